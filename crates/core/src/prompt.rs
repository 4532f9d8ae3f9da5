//! The summary request: the prompt, and a request body the serving account accepts, derived
//! from the request that triggered it.
//!
//! The summary goes to the same account and endpoint as the user's turn, so it keeps what that
//! account needs to accept a request and replaces the conversation by one user message (the
//! prompt). Subscription backends are strict: the ChatGPT Codex backend takes only what Codex
//! itself sends (streamed, `store: false`, the client's own `instructions`), Claude
//! subscriptions expect the client's own system prompt, and reasoning models reject sampling
//! parameters. Hence:
//!
//! | shape | body |
//! |---|---|
//! | Responses | `model`, `instructions` (unchanged, when sent), `previous_response_id` (as sent, when the trigger keeps it: the stored chain the turn continued, which the same account reads; never `conversation`, whose items the summary would be added to), `input` (the `carried` items of [`summary_request_carrying`], then one user message item), `store` and `stream` (as sent), `max_output_tokens` |
//! | Anthropic Messages | `model`, `system` (as sent), `messages`, `max_tokens` (required), `thinking: {"type": "disabled"}`, `stream` |
//! | Chat Completions | `model`, `messages`, `stream` (and `stream_options: {"include_usage": true}` when streamed, so that the summary's usage is counted), `max_completion_tokens` for OpenAI reasoning families (`o1`, `o3`, `o4`, `gpt-5`…), else `max_tokens` |
//! | Gemini | `contents`, `generationConfig.maxOutputTokens` (model and streaming are in the URL) |
//!
//! No sampling parameter is sent unless [`SummarySettings::params`] asks for it (merged at the
//! top level of the body). `stream` is the client's for Responses and `false` elsewhere unless
//! [`SummarySettings::stream`] says otherwise. Gemini names its model in the URL, which the
//! summary request shares with the turn, so [`SummarySettings::model`] does not apply to it.
//!
//! ```
//! use context_relay_core::{ApiShape, prompt::{SummarySettings, summary_request}};
//! use serde_json::json;
//!
//! let turn = json!({"model": "gpt-5.5", "instructions": "You are Codex.", "store": false,
//!     "stream": true, "input": [], "tools": [], "reasoning": {"effort": "high"}});
//! let body = summary_request(ApiShape::Responses, &turn, "the prompt", &SummarySettings::default());
//! assert_eq!(body, json!({"model": "gpt-5.5", "instructions": "You are Codex.", "store": false,
//!     "stream": true, "max_output_tokens": 800, "input": [{"type": "message", "role": "user",
//!     "content": [{"type": "input_text", "text": "the prompt"}]}]}));
//! ```

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::api::ApiShape;

/// Default output token limit of the summary call: room for 200 words plus the lists.
pub const SUMMARY_MAX_TOKENS: u32 = 800;

/// How summary requests to one provider are made (the gateway's `[providers.summary]` table).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SummarySettings {
    /// The model that writes summaries; unset = the model of the triggering request.
    pub model: Option<String>,
    /// Output token limit (default 800). `0` sends none where the API allows it (the ChatGPT
    /// Codex backend refuses `max_output_tokens`); Anthropic Messages, which requires one, then
    /// gets the default.
    pub max_output_tokens: u32,
    /// Whether to ask for a streamed reply; unset = as the client did (Responses) or `false`.
    pub stream: Option<bool>,
    /// Extra body fields merged at the top level, e.g. `temperature = 0.2` for a model that
    /// takes it.
    pub params: Map<String, Value>,
}

impl Default for SummarySettings {
    fn default() -> Self {
        Self {
            model: None,
            max_output_tokens: SUMMARY_MAX_TOKENS,
            stream: None,
            params: Map::new(),
        }
    }
}

/// The summary prompt around a formatted history ([`crate::select::Selection::text`]) and the
/// files the session touched.
///
/// The history goes last, between `<conversation>` tags, so the instructions cannot be read
/// as part of it. A history carries text the session read (a file, a web page, a test's
/// output), so a tag of that name inside it (`</conversation>`, any case, spaces allowed after
/// the `<` and the `/`) has its `<` written `&lt;`: such text cannot close the conversation
/// early and speak as the prompt ([`fence`]). The file names are fenced alike.
pub fn summary_prompt(history: &str, touched_files: &[String]) -> String {
    const HEAD: &str = "\
You are writing a handoff note. The conversation below is moving to another AI account, which \
will receive your note instead of the full history and must carry on as if nothing changed. \
Capture what that assistant needs to continue seamlessly: the goal, the current state of the \
work, what was decided and why, and what comes next. Parts of the history were left out to \
keep it short; they are marked.

Reply with ONE JSON object and nothing else: no markdown, no code fence, no text before or after \
it. Use exactly these keys:
- \"summary\": string, at most 200 words, what matters to continue the work;
- \"keyDecisions\": array of strings, decisions and constraints agreed so far;
- \"taskProgress\": string, what is done, what is pending, and the next step;
- \"activeEntities\": array of strings, the files, features, functions and other identifiers \
in play.

Write the note in the language of the conversation.
";
    let files_len: usize = touched_files.iter().map(|f| f.len() + 3).sum();
    let mut prompt = String::with_capacity(HEAD.len() + history.len() + files_len + 96);
    prompt.push_str(HEAD);
    if !touched_files.is_empty() {
        prompt.push_str(
            "\nFiles the session touched: those it edited, newest first, then those its latest \
             tool calls named:\n",
        );
        for f in touched_files {
            prompt.push_str("- ");
            prompt.push_str(&fence(f));
            prompt.push('\n');
        }
    }
    prompt.push_str("\nHere is the conversation:\n\n<conversation>\n");
    prompt.push_str(&fence(history));
    prompt.push_str("\n</conversation>");
    prompt
}

/// `text` with the `<` of every `conversation` tag in it (opening or closing, any case, ASCII
/// spaces allowed after the `<` and the `/`) written `&lt;`; borrowed when there is none.
///
/// ```
/// use context_relay_core::prompt::fence;
/// assert_eq!(fence("a </Conversation> b < conversation>"), "a &lt;/Conversation> b &lt; conversation>");
/// assert_eq!(fence("Vec<u8> <b>"), "Vec<u8> <b>");
/// ```
pub fn fence(text: &str) -> std::borrow::Cow<'_, str> {
    const NAME: &[u8] = b"conversation";
    let bytes = text.as_bytes();
    let is_tag = |at: usize| {
        let mut i = at + 1;
        let skip_spaces = |i: &mut usize| {
            while bytes
                .get(*i)
                .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            {
                *i += 1;
            }
        };
        skip_spaces(&mut i);
        if bytes.get(i) == Some(&b'/') {
            i += 1;
            skip_spaces(&mut i);
        }
        bytes
            .get(i..i + NAME.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(NAME))
    };
    let mut tags = memchr::memchr_iter(b'<', bytes)
        .filter(|&at| is_tag(at))
        .peekable();
    if tags.peek().is_none() {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 12);
    let mut from = 0;
    for at in tags {
        // `<` is ASCII: `at` and `at + 1` are char boundaries.
        out.push_str(&text[from..at]);
        out.push_str("&lt;");
        from = at + 1;
    }
    out.push_str(&text[from..]);
    std::borrow::Cow::Owned(out)
}

/// Whether a Chat Completions model is of an OpenAI reasoning family, which takes
/// `max_completion_tokens` and rejects `max_tokens`.
///
/// ```
/// use context_relay_core::prompt::is_reasoning_model;
/// assert!(is_reasoning_model("gpt-5.1-codex") && is_reasoning_model("openai/o3-mini"));
/// assert!(!is_reasoning_model("gpt-4.1-mini"));
/// ```
pub fn is_reasoning_model(model: &str) -> bool {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    ["o1", "o3", "o4", "gpt-5"]
        .iter()
        .any(|family| name.starts_with(family))
}

/// The summary request body in `shape`, derived from the triggering request `trigger` (see the
/// module docs), carrying `prompt` as its one user message.
pub fn summary_request(
    shape: ApiShape,
    trigger: &Value,
    prompt: &str,
    settings: &SummarySettings,
) -> Value {
    summary_request_carrying(shape, trigger, &[], prompt, settings)
}

/// [`summary_request`], with `carried` Responses input items placed before the prompt: the
/// items the serving account can read and the prompt cannot carry, such as its own encrypted
/// `compaction` items. Other shapes ignore them.
///
/// ```
/// use context_relay_core::{prompt::{summary_request_carrying, SummarySettings}, ApiShape};
/// let trigger = serde_json::json!({"model": "gpt-5", "input": [{"type": "message"}]});
/// let item = serde_json::json!({"type": "compaction", "encrypted_content": "gAAA"});
/// let v = summary_request_carrying(
///     ApiShape::Responses, &trigger, &[item.clone()], "P", &SummarySettings::default(),
/// );
/// assert_eq!(v["input"][0], item);
/// assert_eq!(v["input"].as_array().map(Vec::len), Some(2));
/// ```
pub fn summary_request_carrying(
    shape: ApiShape,
    trigger: &Value,
    carried: &[Value],
    prompt: &str,
    settings: &SummarySettings,
) -> Value {
    let field = |k: &str| trigger.get(k).filter(|v| !v.is_null()).cloned();
    let model = settings
        .model
        .clone()
        .filter(|m| !m.trim().is_empty())
        .map(Value::String)
        .or_else(|| field("model"));
    let limit = settings.max_output_tokens;
    let mut body = Map::new();
    match shape {
        ApiShape::Responses => {
            body.extend(model.map(|m| ("model".to_owned(), m)));
            body.extend(field("instructions").map(|v| ("instructions".to_owned(), v)));
            // A chained client sends only its latest turn: the chain it names (stored by the
            // account that serves the summary too) is the rest of the conversation. A
            // `conversation` is not named: the provider adds a response's items to it, and the
            // client would read the summary's prompt and reply as turns of its own.
            body.extend(
                field("previous_response_id").map(|v| ("previous_response_id".to_owned(), v)),
            );
            let mut input = carried.to_vec();
            input.push(json!({
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": prompt}],
            }));
            body.insert("input".to_owned(), Value::Array(input));
            body.extend(field("store").map(|v| ("store".to_owned(), v)));
            let stream = settings.stream.map(Value::Bool).or_else(|| field("stream"));
            body.extend(stream.map(|v| ("stream".to_owned(), v)));
            if limit > 0 {
                body.insert("max_output_tokens".to_owned(), json!(limit));
            }
        }
        ApiShape::AnthropicMessages => {
            body.extend(model.map(|m| ("model".to_owned(), m)));
            body.extend(field("system").map(|v| ("system".to_owned(), v)));
            body.insert(
                "messages".to_owned(),
                json!([{"role": "user", "content": prompt}]),
            );
            let required = if limit > 0 { limit } else { SUMMARY_MAX_TOKENS };
            body.insert("max_tokens".to_owned(), json!(required));
            body.insert("thinking".to_owned(), json!({"type": "disabled"}));
            body.insert(
                "stream".to_owned(),
                Value::Bool(settings.stream.unwrap_or(false)),
            );
        }
        ApiShape::ChatCompletions => {
            let reasoning = model
                .as_ref()
                .and_then(Value::as_str)
                .is_some_and(is_reasoning_model);
            body.extend(model.map(|m| ("model".to_owned(), m)));
            body.insert(
                "messages".to_owned(),
                json!([{"role": "user", "content": prompt}]),
            );
            let stream = settings.stream.unwrap_or(false);
            body.insert("stream".to_owned(), Value::Bool(stream));
            if stream {
                // A streamed Chat reply carries its usage only when asked: without it, the
                // summary's cost would be counted nowhere.
                body.insert("stream_options".to_owned(), json!({"include_usage": true}));
            }
            let key = if reasoning {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            if limit > 0 {
                body.insert(key.to_owned(), json!(limit));
            }
        }
        ApiShape::Gemini => {
            body.insert(
                "contents".to_owned(),
                json!([{"role": "user", "parts": [{"text": prompt}]}]),
            );
            if limit > 0 {
                body.insert(
                    "generationConfig".to_owned(),
                    json!({"maxOutputTokens": limit}),
                );
            }
        }
    }
    for (k, v) in &settings.params {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

#[cfg(test)]
mod tests;
