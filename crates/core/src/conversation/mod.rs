//! A read-only view over the conversation carried by a request body.
//!
//! The generation side needs the same thing from four API shapes: an ordered list of entries,
//! each with a role and its text. [`Conversation`] gives exactly that and nothing more; it never
//! changes the body (rewriting is [`crate::inject`]'s job, on raw bytes).
//!
//! What becomes an entry, per shape:
//!
//! | shape | entries |
//! |---|---|
//! | Chat Completions | each object of `messages` |
//! | Responses | a leading `system` entry for a string `instructions`; a string `input` is one `user` entry; each object item of an `input` array that is a message (`type: "message"` or no `type`), a tool call (`function_call`, `custom_tool_call`, any `*_call`) or a tool output (`*_call_output`) |
//! | Anthropic Messages | a leading `system` entry for the top-level `system`; each object of `messages` |
//! | Gemini | a leading `system` entry for `systemInstruction`; each object of `contents` |
//!
//! Decisions worth knowing:
//!
//! - **Top-level system prompts count as a system entry.** Chat clients and Codex put their
//!   system prompt inside the conversation (`system` / `developer` messages), Anthropic, Gemini
//!   and some Responses clients put it in a top-level field. Treating both the same means a
//!   conversation selects the same history whichever API carried it; `schema-locked` mode
//!   ([`crate::config::RelayMode::SchemaLocked`]) leaves every system entry out.
//! - Responses tool items have no role: calls get `assistant`, outputs get `tool`.
//! - `reasoning`, `compaction` and `item_reference` items carry no readable text and are
//!   skipped entirely; Anthropic `thinking` / `redacted_thinking` blocks and Gemini parts marked
//!   `thought` are ignored. Entries that are not JSON objects are dropped.
//! - Tool calls and tool outputs are rendered as one line each (whitespace runs folded to one
//!   space), at most [`TOOL_LINE_MAX_CHARS`] chars: `tool call NAME(ARGS)` and
//!   `tool output: OUTPUT` (a longer output keeps its beginning and its end, where a test
//!   run's verdict is). Anthropic `tool_result` blocks and Chat `tool` messages are tool
//!   outputs too, though they travel as message content. Each part's [`PartKind`] says which it
//!   is, and [`Entry::files`] lists the files a tool call's arguments name ([`crate::touched`]).
//! - Roles are kept as sent (Gemini's `model` stays `model`); a role that is not a string is
//!   treated as missing.
//!
//! ```
//! use context_relay_core::{ApiShape, conversation::Conversation};
//!
//! let body = serde_json::json!({
//!     "model": "gpt-5",
//!     "input": [
//!         {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the tests"}]},
//!         {"type": "reasoning", "encrypted_content": "…"},
//!         {"type": "function_call", "name": "shell", "arguments": "{\"cmd\":\"cargo test\"}", "call_id": "c1"},
//!         {"type": "function_call_output", "call_id": "c1", "output": "ok\n3 passed"}
//!     ]
//! });
//! let conv = Conversation::from_value(ApiShape::Responses, &body).unwrap();
//! let entries = conv.entries();
//! assert_eq!(entries.len(), 3);
//! assert_eq!(entries[1].parts, ["tool call shell({\"cmd\":\"cargo test\"})"]);
//! assert_eq!(entries[2].parts, ["tool output: ok 3 passed"]);
//! ```

mod content;
mod gemini;
mod lines;
mod messages;
mod responses;

use serde_json::{Map, Value};

use crate::api::ApiShape;
pub(crate) use content::push_content;
use content::push_part;
use gemini::gemini;
pub use lines::{TOOL_LINE_MAX_CHARS, TOOL_OUTPUT_TAIL_CHARS, tool_call_line, tool_output_line};
pub(crate) use messages::message_parts;
use messages::messages;
use responses::responses;
pub(crate) use responses::responses_item;

/// Why a body has no readable conversation.
#[derive(Debug, thiserror::Error)]
pub enum ConversationError {
    /// The body is not JSON.
    #[error("expected a JSON request body, found invalid JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// The body is JSON but not an object.
    #[error("expected a JSON object at the top level, found {found}")]
    NotObject {
        /// The JSON type found.
        found: &'static str,
    },
    /// The conversation field is absent.
    #[error("expected a `{field}` field holding the conversation, found none")]
    MissingField {
        /// The field the shape keeps its conversation in.
        field: &'static str,
    },
    /// The conversation field has an unexpected JSON type.
    #[error("expected `{field}` to be {expected}, found {found}")]
    WrongType {
        /// The field the shape keeps its conversation in.
        field: &'static str,
        /// What the shape allows there.
        expected: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
}

/// What a part of an [`Entry`] is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PartKind {
    /// Message text.
    #[default]
    Text,
    /// A tool call, rendered by [`tool_call_line`].
    ToolCall,
    /// A tool output, rendered by [`tool_output_line`].
    ToolOutput,
}

/// One entry of a conversation: who spoke and what was said, as text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    /// The role as sent (`user`, `assistant`, `system`, `developer`, `tool`, `model`, …), or
    /// `None` when absent or not a string.
    pub role: Option<String>,
    /// Text pieces in order: message text and one-line tool call / tool output renderings.
    pub parts: Vec<String>,
    /// What each of `parts` is (same length as `parts`).
    pub kinds: Vec<PartKind>,
    /// Files named by the arguments of this entry's tool calls, in call order (see
    /// [`crate::touched`]).
    pub files: Vec<String>,
    /// Of [`files`](Self::files), those named by a call that edits them (an `apply_patch`
    /// envelope, or a tool whose name says it writes: see [`crate::touched::is_edit_tool`]).
    pub edited: Vec<String>,
}

impl Entry {
    /// An entry with the given role and text parts.
    pub fn new(role: Option<&str>, parts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let parts: Vec<String> = parts.into_iter().map(Into::into).collect();
        Self {
            role: role.map(str::to_owned),
            kinds: vec![PartKind::Text; parts.len()],
            parts,
            files: Vec::new(),
            edited: Vec::new(),
        }
    }

    fn from_parts(role: Option<String>, parts: Parts) -> Self {
        Self {
            role,
            parts: parts.texts,
            kinds: parts.kinds,
            files: parts.files,
            edited: parts.edited,
        }
    }

    /// Whether the role is `system` or `developer` (ASCII case ignored).
    pub fn is_system_like(&self) -> bool {
        self.role.as_deref().is_some_and(is_system_role)
    }

    /// The kind of part `i` (`Text` when unknown).
    pub fn kind(&self, i: usize) -> PartKind {
        self.kinds.get(i).copied().unwrap_or_default()
    }

    /// The parts joined by newlines.
    pub fn text(&self) -> String {
        self.parts.join("\n")
    }

    /// Whether the entry has no text other than whitespace.
    pub fn is_blank(&self) -> bool {
        self.parts.iter().all(|p| p.trim().is_empty())
    }
}

/// The parts of an entry while it is read.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    texts: Vec<String>,
    kinds: Vec<PartKind>,
    files: Vec<String>,
    edited: Vec<String>,
}

impl Parts {
    fn push(&mut self, kind: PartKind, text: String) {
        self.texts.push(text);
        self.kinds.push(kind);
    }

    fn call(&mut self, name: &str, args: &Value) {
        let start = self.files.len();
        let patched = crate::touched::files_in_args(args, &mut self.files);
        if patched || crate::touched::is_edit_tool(name) {
            self.edited.extend_from_slice(&self.files[start..]);
        }
        self.push(PartKind::ToolCall, tool_call_line(name, args));
    }

    fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    pub(crate) fn into_texts(self) -> Vec<String> {
        self.texts
    }
}

/// Whether `role` is system-like (`system` or `developer`, ASCII case ignored).
pub fn is_system_role(role: &str) -> bool {
    role.eq_ignore_ascii_case("system") || role.eq_ignore_ascii_case("developer")
}

/// The conversation of one request, as a list of [`Entry`] (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    shape: ApiShape,
    entries: Vec<Entry>,
}

impl Conversation {
    /// A conversation made of the given entries.
    pub fn new(shape: ApiShape, entries: Vec<Entry>) -> Self {
        Self { shape, entries }
    }

    /// Reads the conversation of a request body given as bytes.
    pub fn from_slice(shape: ApiShape, body: &[u8]) -> Result<Self, ConversationError> {
        let value: Value = serde_json::from_slice(body).map_err(ConversationError::NotJson)?;
        Self::from_value(shape, &value)
    }

    /// Reads the conversation of a parsed request body.
    pub fn from_value(shape: ApiShape, body: &Value) -> Result<Self, ConversationError> {
        let Value::Object(obj) = body else {
            return Err(ConversationError::NotObject {
                found: type_name(body),
            });
        };
        let entries = match shape {
            ApiShape::ChatCompletions => messages(obj, None)?,
            ApiShape::AnthropicMessages => messages(obj, Some("system"))?,
            ApiShape::Responses => responses(obj)?,
            ApiShape::Gemini => gemini(obj)?,
        };
        Ok(Self { shape, entries })
    }

    /// The API shape the conversation was read as.
    pub fn shape(&self) -> ApiShape {
        self.shape
    }

    /// The entries, in conversation order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entries, by value.
    pub fn into_entries(self) -> Vec<Entry> {
        self.entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The API shape of a request: from its path when that names one, else from the body.
///
/// Body rules, in order (the first that matches wins):
/// 1. a `contents` key → Gemini;
/// 2. an `input` key → Responses;
/// 3. a `messages` key with an Anthropic-only marker → Anthropic Messages. Markers: a top-level
///    `system`, `anthropic_version` (Bedrock / Vertex), `stop_sequences` or `thinking` key,
///    or a content block of type `tool_use`, `tool_result`, `thinking` or `redacted_thinking`. `max_tokens` alone decides nothing: Chat accepts it too, and a Chat
///    body misread as Anthropic would get a summary request its API rejects;
/// 4. any other `messages` key → Chat Completions;
/// 5. otherwise `None` (also for a body that is not an object).
///
/// ```
/// use context_relay_core::{ApiShape, conversation::detect};
/// let body = serde_json::json!({"model": "m", "system": "be brief", "messages": []});
/// assert_eq!(detect(None, &body), Some(ApiShape::AnthropicMessages));
/// assert_eq!(detect(Some("/v1/chat/completions"), &body), Some(ApiShape::ChatCompletions));
/// ```
pub fn detect(path: Option<&str>, body: &Value) -> Option<ApiShape> {
    if let Some(shape) = path.and_then(ApiShape::from_path) {
        return Some(shape);
    }
    let obj = body.as_object()?;
    if obj.contains_key("contents") {
        return Some(ApiShape::Gemini);
    }
    if obj.contains_key("input") {
        return Some(ApiShape::Responses);
    }
    let messages = obj.get("messages")?;
    // `top_k` is no marker: OpenAI-compatible servers (vLLM and others) accept it in Chat.
    const MARKERS: [&str; 4] = ["system", "anthropic_version", "stop_sequences", "thinking"];
    let anthropic_block = messages.as_array().is_some_and(|ms| {
        ms.iter()
            .filter_map(|m| m.get("content").and_then(Value::as_array))
            .flatten()
            .filter_map(|b| b.get("type").and_then(Value::as_str))
            .any(|t| {
                matches!(
                    t,
                    "tool_use" | "tool_result" | "thinking" | "redacted_thinking"
                )
            })
    });
    if anthropic_block || MARKERS.iter().any(|k| obj.contains_key(*k)) {
        Some(ApiShape::AnthropicMessages)
    } else {
        Some(ApiShape::ChatCompletions)
    }
}

/// The JSON type name of a value, for error messages.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn array_field<'a>(
    obj: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a [Value], ConversationError> {
    match obj.get(field) {
        None => Err(ConversationError::MissingField { field }),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(ConversationError::WrongType {
            field,
            expected: "an array",
            found: type_name(other),
        }),
    }
}

/// A leading system entry built from a top-level system field, when it has any text.
fn top_level_system(value: Option<&Value>) -> Option<Entry> {
    let value = value?;
    let mut parts = Parts::default();
    match value {
        Value::Array(items) => {
            for item in items {
                // Responses `instructions` may be an array of message items; their text lives
                // in `content`, Anthropic system blocks carry it in `text`.
                match item.get("content") {
                    Some(content) => push_content(&mut parts, content),
                    None => push_part(&mut parts, item),
                }
            }
        }
        Value::Object(o) => match o.get("parts") {
            Some(p) => push_content(&mut parts, p),
            None => push_part(&mut parts, value),
        },
        other => push_content(&mut parts, other),
    }
    (!parts.is_empty()).then(|| Entry::from_parts(Some("system".to_owned()), parts))
}

fn role_of(obj: &Map<String, Value>) -> Option<String> {
    obj.get("role").and_then(Value::as_str).map(str::to_owned)
}

fn str_field<'a>(obj: &'a Map<String, Value>, field: &str) -> &'a str {
    obj.get(field).and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests;
