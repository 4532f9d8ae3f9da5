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
//!   `tool output: OUTPUT`. Anthropic `tool_result` blocks and Chat `tool` messages are tool
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

use std::io;

use serde_json::{Map, Value};

use crate::api::ApiShape;

/// Longest one-line rendering of a tool call or tool output, in chars (ellipsis included).
pub const TOOL_LINE_MAX_CHARS: usize = 200;

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
        }
    }

    fn from_parts(role: Option<String>, parts: Parts) -> Self {
        Self {
            role,
            parts: parts.texts,
            kinds: parts.kinds,
            files: parts.files,
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
}

impl Parts {
    fn push(&mut self, kind: PartKind, text: String) {
        self.texts.push(text);
        self.kinds.push(kind);
    }

    fn call(&mut self, name: &str, args: &Value) {
        crate::touched::files_in_args(args, &mut self.files);
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

/// Chat Completions and Anthropic Messages: both keep the conversation in `messages`, and one
/// reader handles the content forms of both (a body sent to the "wrong" path still reads well).
fn messages(
    obj: &Map<String, Value>,
    system_field: Option<&'static str>,
) -> Result<Vec<Entry>, ConversationError> {
    let items = array_field(obj, "messages")?;
    let mut entries = Vec::with_capacity(items.len() + 1);
    entries.extend(system_field.and_then(|f| top_level_system(obj.get(f))));
    for item in items {
        let Value::Object(msg) = item else { continue };
        entries.push(Entry::from_parts(role_of(msg), message_parts(msg)));
    }
    Ok(entries)
}

/// The parts of one Chat or Anthropic message: its content, then its tool calls.
pub(crate) fn message_parts(msg: &Map<String, Value>) -> Parts {
    let mut parts = Parts::default();
    // Chat `tool` (and legacy `function`) messages are tool outputs.
    let output = matches!(
        msg.get("role").and_then(Value::as_str),
        Some("tool" | "function")
    );
    if let Some(content) = msg.get("content") {
        if output {
            let mut text = Parts::default();
            push_content(&mut text, content);
            if !text.is_empty() {
                parts.push(
                    PartKind::ToolOutput,
                    tool_output_line(&text.texts.join("\n")),
                );
            }
        } else {
            push_content(&mut parts, content);
        }
    }
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        for call in calls {
            chat_tool_call(&mut parts, call);
        }
    }
    // The deprecated single `function_call` of early Chat Completions.
    if let Some(call) = msg.get("function_call").and_then(Value::as_object) {
        parts.call(
            str_field(call, "name"),
            call.get("arguments").unwrap_or(&Value::Null),
        );
    }
    parts
}

fn chat_tool_call(parts: &mut Parts, call: &Value) {
    let Some(call) = call.as_object() else { return };
    if let Some(f) = call.get("function").and_then(Value::as_object) {
        parts.call(
            str_field(f, "name"),
            f.get("arguments").unwrap_or(&Value::Null),
        );
    } else if let Some(custom) = call.get("custom").and_then(Value::as_object) {
        parts.call(
            str_field(custom, "name"),
            custom.get("input").unwrap_or(&Value::Null),
        );
    }
}

fn responses(obj: &Map<String, Value>) -> Result<Vec<Entry>, ConversationError> {
    let mut entries = Vec::new();
    if let Some(instr) = obj.get("instructions") {
        entries.extend(top_level_system(Some(instr)));
    }
    match obj.get("input") {
        None => return Err(ConversationError::MissingField { field: "input" }),
        Some(Value::String(s)) => entries.push(Entry::new(Some("user"), [s.as_str()])),
        Some(Value::Array(items)) => {
            entries.reserve(items.len());
            entries.extend(items.iter().filter_map(responses_item));
        }
        Some(other) => {
            return Err(ConversationError::WrongType {
                field: "input",
                expected: "a string or an array",
                found: type_name(other),
            });
        }
    }
    Ok(entries)
}

pub(crate) fn responses_item(item: &Value) -> Option<Entry> {
    let obj = item.as_object()?;
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or("message");
    match kind {
        "message" => {
            let mut parts = Parts::default();
            if let Some(content) = obj.get("content") {
                push_content(&mut parts, content);
            }
            Some(Entry::from_parts(role_of(obj), parts))
        }
        "reasoning" | "compaction" | "item_reference" => None,
        k if k.ends_with("_output") => {
            let mut text = Parts::default();
            if let Some(output) = obj.get("output") {
                push_content(&mut text, output);
            }
            let mut parts = Parts::default();
            parts.push(
                PartKind::ToolOutput,
                tool_output_line(&text.texts.join("\n")),
            );
            Some(Entry::from_parts(Some("tool".to_owned()), parts))
        }
        k if k.ends_with("_call") => {
            // `function_call` / `custom_tool_call` carry a name; built-in tools
            // (`local_shell_call`, `web_search_call`, …) are named by their type.
            let name = obj
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_else(|| k.trim_end_matches("_call"));
            let args = ["arguments", "input", "action"]
                .iter()
                .find_map(|f| obj.get(*f))
                .unwrap_or(&Value::Null);
            let mut parts = Parts::default();
            parts.call(name, args);
            Some(Entry::from_parts(Some("assistant".to_owned()), parts))
        }
        _ => None,
    }
}

fn gemini(obj: &Map<String, Value>) -> Result<Vec<Entry>, ConversationError> {
    let items = array_field(obj, "contents")?;
    let mut entries = Vec::with_capacity(items.len() + 1);
    // The REST API accepts both the proto JSON name and the snake_case one.
    let system = obj
        .get("systemInstruction")
        .or_else(|| obj.get("system_instruction"));
    entries.extend(top_level_system(system));
    for item in items {
        let Value::Object(content) = item else {
            continue;
        };
        let mut parts = Parts::default();
        if let Some(p) = content.get("parts") {
            push_content(&mut parts, p);
        }
        entries.push(Entry::from_parts(role_of(content), parts));
    }
    Ok(entries)
}

fn role_of(obj: &Map<String, Value>) -> Option<String> {
    obj.get("role").and_then(Value::as_str).map(str::to_owned)
}

fn str_field<'a>(obj: &'a Map<String, Value>, field: &str) -> &'a str {
    obj.get(field).and_then(Value::as_str).unwrap_or("")
}

/// Appends the text of a `content` value: a string, an array of parts, or a single part.
pub(crate) fn push_content(parts: &mut Parts, content: &Value) {
    match content {
        Value::Array(items) => {
            for item in items {
                push_part(parts, item);
            }
        }
        other => push_part(parts, other),
    }
}

/// Appends the text of one content part of any of the four shapes.
fn push_part(parts: &mut Parts, part: &Value) {
    let obj = match part {
        Value::String(s) => {
            if !s.is_empty() {
                parts.push(PartKind::Text, s.clone());
            }
            return;
        }
        Value::Object(obj) => obj,
        _ => return,
    };
    // Gemini thought summaries: the model's private reasoning, like Anthropic thinking.
    if obj.get("thought").and_then(Value::as_bool) == Some(true) {
        return;
    }
    match obj.get("type").and_then(Value::as_str) {
        Some("tool_use" | "server_tool_use") => {
            parts.call(
                str_field(obj, "name"),
                obj.get("input").unwrap_or(&Value::Null),
            );
            return;
        }
        Some("tool_result") => {
            // Sent as user content, but it is a tool's output, not the user's words.
            let mut text = Parts::default();
            if let Some(content) = obj.get("content") {
                push_content(&mut text, content);
            }
            parts.push(
                PartKind::ToolOutput,
                tool_output_line(&text.texts.join("\n")),
            );
            return;
        }
        Some("thinking" | "redacted_thinking" | "reasoning") => return,
        Some("refusal") => {
            if let Some(r) = obj.get("refusal").and_then(Value::as_str) {
                parts.push(PartKind::Text, r.to_owned());
            }
            return;
        }
        _ => {}
    }
    if let Some(text) = obj.get("text").and_then(Value::as_str) {
        if !text.is_empty() {
            parts.push(PartKind::Text, text.to_owned());
        }
    } else if let Some(call) = obj.get("functionCall").and_then(Value::as_object) {
        parts.call(
            str_field(call, "name"),
            call.get("args").unwrap_or(&Value::Null),
        );
    } else if let Some(resp) = obj.get("functionResponse").and_then(Value::as_object) {
        let body = resp.get("response").unwrap_or(&Value::Null);
        parts.push(PartKind::ToolOutput, tool_output_line(&compact_json(body)));
    }
}

/// `tool call NAME(ARGS)` on one line, at most [`TOOL_LINE_MAX_CHARS`] chars.
///
/// `args` is used as is when it is a string (Responses and Chat send arguments as a JSON
/// string), else as compact JSON.
///
/// ```
/// use context_relay_core::conversation::tool_call_line;
/// let line = tool_call_line("Bash", &serde_json::json!({"command": "ls\n-la"}));
/// assert_eq!(line, r#"tool call Bash({"command":"ls\n-la"})"#);
/// ```
pub fn tool_call_line(name: &str, args: &Value) -> String {
    let args = match args {
        Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
        Value::Null => std::borrow::Cow::Borrowed(""),
        other => std::borrow::Cow::Owned(compact_json(other)),
    };
    one_line(&["tool call ", name, "(", &args, ")"])
}

/// `tool output: OUTPUT` on one line, at most [`TOOL_LINE_MAX_CHARS`] chars.
pub fn tool_output_line(output: &str) -> String {
    one_line(&["tool output: ", output])
}

/// Joins `pieces`, folds every whitespace run into one space, trims, and cuts the result to
/// [`TOOL_LINE_MAX_CHARS`] chars with a trailing `…` when longer. Stops reading as soon as the
/// limit is passed, so a megabyte of tool output costs no more than a short one.
fn one_line(pieces: &[&str]) -> String {
    let mut out = String::new();
    let mut count = 0usize;
    let mut pending_space = false;
    for c in pieces.iter().flat_map(|p| p.chars()) {
        if c.is_whitespace() {
            pending_space = count > 0;
            continue;
        }
        if pending_space {
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        out.push(c);
        count += 1;
        if count > TOOL_LINE_MAX_CHARS {
            break;
        }
    }
    if count > TOOL_LINE_MAX_CHARS {
        let cut = crate::parse::clamp_chars(&out, TOOL_LINE_MAX_CHARS - 1).len();
        out.truncate(cut);
        out.push('…');
    }
    out
}

/// Compact JSON of `v`, stopping early once longer than a tool line can show.
fn compact_json(v: &Value) -> String {
    // A tool line shows at most 200 chars (≤ 800 bytes); 1 KiB always covers them, so the
    // serialisation of a large argument object is abandoned early instead of built in full.
    const LIMIT: usize = 1024;
    struct Bounded(Vec<u8>);
    impl io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let room = LIMIT.saturating_sub(self.0.len());
            if room == 0 {
                return Err(io::Error::other("tool line long enough"));
            }
            let n = room.min(buf.len());
            self.0.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut w = Bounded(Vec::new());
    // An error only means the limit was reached: what was written is what we want.
    let _ = serde_json::to_writer(&mut w, v);
    String::from_utf8_lossy(&w.0).into_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn conv(shape: ApiShape, body: Value) -> Vec<Entry> {
        Conversation::from_value(shape, &body)
            .expect("conversation")
            .into_entries()
    }

    #[test]
    fn errors_are_typed() {
        assert!(matches!(
            Conversation::from_slice(ApiShape::ChatCompletions, b"{nope"),
            Err(ConversationError::NotJson(_))
        ));
        assert!(matches!(
            Conversation::from_slice(ApiShape::ChatCompletions, b"[1]"),
            Err(ConversationError::NotObject { found: "an array" })
        ));
        assert!(matches!(
            Conversation::from_slice(ApiShape::ChatCompletions, b"{}"),
            Err(ConversationError::MissingField { field: "messages" })
        ));
        let err = Conversation::from_slice(ApiShape::Responses, br#"{"input": 3}"#)
            .expect_err("wrong type");
        assert_eq!(
            err.to_string(),
            "expected `input` to be a string or an array, found a number"
        );
        assert!(matches!(
            Conversation::from_slice(ApiShape::Gemini, br#"{"contents": {}}"#),
            Err(ConversationError::WrongType {
                field: "contents",
                ..
            })
        ));
    }

    #[test]
    fn chat_messages_parts_and_tool_calls() {
        let e = conv(
            ApiShape::ChatCompletions,
            json!({"messages": [
                {"role": "system", "content": "be terse"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"src/lib.rs\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "1", "content": "fn main() {}"},
                42,
                {"content": "no role"}
            ]}),
        );
        assert_eq!(e.len(), 5, "the number is dropped");
        assert!(e[0].is_system_like());
        assert_eq!(e[1].text(), "a\nb");
        assert_eq!(e[2].parts, [r#"tool call read({"path": "src/lib.rs"})"#]);
        assert_eq!(e[3].parts, ["tool output: fn main() {}"]);
        assert_eq!(e[3].kinds, [PartKind::ToolOutput]);
        assert_eq!(e[2].kinds, [PartKind::ToolCall]);
        assert_eq!(e[2].files, ["src/lib.rs"]);
        assert_eq!(e[4].role, None);
    }

    #[test]
    fn responses_string_input_and_instructions() {
        let e = conv(
            ApiShape::Responses,
            json!({"input": "say hi", "instructions": "You are terse."}),
        );
        assert_eq!(
            e,
            [
                Entry::new(Some("system"), ["You are terse."]),
                Entry::new(Some("user"), ["say hi"]),
            ]
        );
    }

    #[test]
    fn responses_items() {
        let e = conv(
            ApiShape::Responses,
            json!({"input": [
                {"role": "user", "content": "typeless message"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hidden"}]},
                {"type": "compaction", "encrypted_content": "x"},
                {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch", "call_id": "c"},
                {"type": "custom_tool_call_output", "call_id": "c", "output": "Success"},
                {"type": "local_shell_call", "action": {"command": ["ls"]}},
                {"type": "function_call_output", "call_id": "d", "output": [{"type": "input_text", "text": "part"}]},
                "not an object"
            ]}),
        );
        assert_eq!(e.len(), 6);
        assert_eq!(e[0].parts, ["typeless message"]);
        assert_eq!(e[1].role.as_deref(), Some("assistant"));
        assert_eq!(
            e[2].parts,
            ["tool call apply_patch(*** Begin Patch *** End Patch)"]
        );
        assert_eq!(e[2].role.as_deref(), Some("assistant"));
        assert_eq!(e[3].parts, ["tool output: Success"]);
        assert_eq!(e[3].role.as_deref(), Some("tool"));
        assert_eq!(e[4].parts, [r#"tool call local_shell({"command":["ls"]})"#]);
        assert_eq!(e[5].parts, ["tool output: part"]);
    }

    #[test]
    fn anthropic_blocks_and_system() {
        let e = conv(
            ApiShape::AnthropicMessages,
            json!({
                "system": [{"type": "text", "text": "sys one"}, {"type": "text", "text": "sys two", "cache_control": {"type": "ephemeral"}}],
                "messages": [
                    {"role": "user", "content": "fix it"},
                    {"role": "system", "content": "mid-conversation system"},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "secret", "signature": "s"},
                        {"type": "text", "text": "on it"},
                        {"type": "tool_use", "id": "t", "name": "Edit", "input": {"file": "a.rs"}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "edited"}]},
                        {"type": "tool_result", "tool_use_id": "u", "content": "plain"}
                    ]},
                    {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]}
                ]
            }),
        );
        assert_eq!(e.len(), 6);
        assert_eq!(e[0], Entry::new(Some("system"), ["sys one", "sys two"]));
        assert!(e[2].is_system_like());
        assert_eq!(e[3].parts, ["on it", r#"tool call Edit({"file":"a.rs"})"#]);
        assert_eq!(e[4].parts, ["tool output: edited", "tool output: plain"]);
        assert!(e[3].files.is_empty(), "`file` is no file argument");
        assert!(e[5].is_blank());
    }

    #[test]
    fn anthropic_string_system_and_no_system() {
        let e = conv(
            ApiShape::AnthropicMessages,
            json!({"system": "terse", "messages": [{"role": "user", "content": "hi"}]}),
        );
        assert_eq!(e[0], Entry::new(Some("system"), ["terse"]));
        let e = conv(
            ApiShape::AnthropicMessages,
            json!({"system": "", "messages": [{"role": "user", "content": "hi"}]}),
        );
        assert_eq!(e.len(), 1, "an empty system prompt is no entry");
    }

    #[test]
    fn gemini_contents() {
        let e = conv(
            ApiShape::Gemini,
            json!({
                "systemInstruction": {"parts": [{"text": "be brief"}]},
                "contents": [
                    {"role": "user", "parts": [{"text": "weather?"}]},
                    {"role": "model", "parts": [
                        {"text": "pondering", "thought": true},
                        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
                    ]},
                    {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 21}}}]}
                ]
            }),
        );
        assert_eq!(e[0], Entry::new(Some("system"), ["be brief"]));
        assert_eq!(e[2].parts, [r#"tool call get_weather({"city":"Paris"})"#]);
        assert_eq!(e[3].parts, [r#"tool output: {"temp":21}"#]);
        assert_eq!(e[2].role.as_deref(), Some("model"));
    }

    #[test]
    fn tool_lines_are_one_line_and_bounded() {
        let big = "x y\n".repeat(10_000);
        let line = tool_output_line(&big);
        assert_eq!(line.chars().count(), TOOL_LINE_MAX_CHARS);
        assert!(line.ends_with('…'));
        assert!(!line.contains('\n'));
        let args = json!({"content": "é".repeat(5000)});
        let line = tool_call_line("Write", &args);
        assert_eq!(line.chars().count(), TOOL_LINE_MAX_CHARS);
        assert!(line.starts_with("tool call Write({\"content\":\"éé"));
        // Short lines are untouched apart from whitespace folding.
        assert_eq!(tool_output_line("  a \t b  "), "tool output: a b");
        assert_eq!(tool_call_line("f", &Value::Null), "tool call f()");
    }

    #[test]
    fn detection() {
        let d = |v: Value| detect(None, &v);
        assert_eq!(d(json!({"contents": []})), Some(ApiShape::Gemini));
        assert_eq!(d(json!({"input": "x"})), Some(ApiShape::Responses));
        assert_eq!(
            d(json!({"messages": [], "max_tokens": 5})),
            Some(ApiShape::ChatCompletions)
        );
        assert_eq!(
            d(json!({"messages": [], "anthropic_version": "bedrock-2023-05-31"})),
            Some(ApiShape::AnthropicMessages)
        );
        assert_eq!(
            d(
                json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]})
            ),
            Some(ApiShape::AnthropicMessages)
        );
        assert_eq!(d(json!({"model": "x"})), None);
        assert_eq!(d(json!([1])), None);
        assert_eq!(
            detect(Some("/v1/responses"), &json!({"messages": []})),
            Some(ApiShape::Responses)
        );
        assert_eq!(
            detect(Some("/v1/models"), &json!({"messages": []})),
            Some(ApiShape::ChatCompletions),
            "an unknown path falls back to the body"
        );
    }
}
