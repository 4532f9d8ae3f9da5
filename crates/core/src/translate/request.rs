//! A Responses request body as an Anthropic Messages request body.

use serde_json::{Map, Value, json};

use super::sequence::{Msg, Role, calls_as_text, content_text, normalize};
use super::tools::{CallIds, tool_choice, translate_tools};
use super::{TranslateError, default_max_tokens};

/// How a request is translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOptions {
    /// The model the provider is asked for (the route target's model); empty: the model the
    /// body names.
    pub model: String,
    /// `max_tokens` when the client set no `max_output_tokens`.
    pub default_max_tokens: u64,
}

impl RequestOptions {
    /// Options for `model` with its [`default_max_tokens`] (for an empty `model`,
    /// [`DEFAULT_MAX_TOKENS`](super::DEFAULT_MAX_TOKENS)).
    pub fn new(model: impl Into<String>) -> Self {
        let model = model.into();
        Self {
            default_max_tokens: default_max_tokens(&model),
            model,
        }
    }
}

/// A translated request.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    /// The Messages request body.
    pub body: Vec<u8>,
    /// The client asked for a stream (`stream: true`).
    pub stream: bool,
    /// The model the client's body named, echoed in the translated answer.
    pub client_model: Option<String>,
    /// Names of the client's freeform `custom` tools: their calls go back as
    /// `custom_tool_call` items.
    pub custom_tools: Vec<String>,
    /// What the Messages API cannot carry and was left out (`field` or `kind:name`), for logs.
    pub dropped: Vec<String>,
}

/// Top-level Responses fields read by the translation: every other one is dropped and listed.
const HANDLED: [&str; 10] = [
    "model",
    "instructions",
    "input",
    "max_output_tokens",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "stream",
    "temperature",
    "top_p",
];

/// The prompt-caching marker of the Messages API (a five-minute cache entry).
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// Translates a Responses request `body` into a Messages request (see the module docs).
///
/// # Errors
/// [`TranslateError`] when the body is not a JSON object or `input` is neither a string nor
/// an array.
pub fn responses_to_messages(
    body: &[u8],
    options: &RequestOptions,
) -> Result<Translated, TranslateError> {
    let root: Value =
        serde_json::from_slice(body).map_err(|e| TranslateError::NotAnObject(e.to_string()))?;
    let Value::Object(root) = root else {
        return Err(TranslateError::NotAnObject("not an object".into()));
    };
    let mut dropped = Vec::new();
    let mut system: Vec<String> = Vec::new();
    instructions(root.get("instructions"), &mut system, &mut dropped);
    let mut custom_tools = Vec::new();
    let mut tools = match root.get("tools") {
        Some(Value::Array(tools)) => translate_tools(tools, &mut custom_tools, &mut dropped),
        _ => Vec::new(),
    };
    let mut ids = CallIds::default();
    let mut msgs: Vec<Msg> = Vec::new();
    match root.get("input") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => msgs.push(user_text(s)),
        Some(Value::Array(items)) => {
            for item in items {
                input_item(item, &mut system, &mut msgs, &mut ids, &mut dropped);
            }
        }
        Some(_) => {
            return Err(TranslateError::BadField {
                field: "input",
                expected: "a string or an array of items",
            });
        }
    }
    if tools.is_empty() {
        // The API refuses `tool_use`/`tool_result` blocks in a request without tools.
        for m in &mut msgs {
            calls_as_text(m);
        }
    }
    let mut out = Map::new();
    let client_model = root.get("model").and_then(Value::as_str).map(str::to_owned);
    let model = match (&*options.model, &client_model) {
        ("", Some(named)) => named.clone(),
        (target, _) => target.to_owned(),
    };
    out.insert("model".into(), Value::String(model));
    let max = root
        .get("max_output_tokens")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .unwrap_or(options.default_max_tokens);
    out.insert("max_tokens".into(), json!(max));
    if !system.is_empty() {
        // One block, so the cache breakpoint covers the whole system prompt.
        let block =
            json!({"type": "text", "text": system.join("\n\n"), "cache_control": ephemeral()});
        out.insert("system".into(), Value::Array(vec![block]));
    }
    let mut messages: Vec<Value> = normalize(msgs)
        .into_iter()
        .map(|m| json!({"role": m.role.as_str(), "content": m.blocks}))
        .collect();
    // The cache breakpoint of the conversation: the last block of the last user message, so
    // the next turn (the same history plus new items) reads it all from the cache.
    if let Some(last) = messages
        .iter_mut()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|blocks| blocks.last_mut())
    {
        last["cache_control"] = ephemeral();
    }
    out.insert("messages".into(), Value::Array(messages));
    if !tools.is_empty() {
        let parallel = root.get("parallel_tool_calls").and_then(Value::as_bool);
        let choice = tool_choice(root.get("tool_choice"), parallel, &tools, &mut dropped);
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = ephemeral();
        }
        out.insert("tools".into(), Value::Array(tools));
        out.insert("tool_choice".into(), choice);
    }
    let stream = root.get("stream").and_then(Value::as_bool) == Some(true);
    if stream {
        out.insert("stream".into(), Value::Bool(true));
    }
    sampling(&root, &mut out, &mut dropped);
    for key in root.keys() {
        if !HANDLED.contains(&key.as_str()) {
            dropped.push(key.clone());
        }
    }
    let body = serde_json::to_vec(&Value::Object(out))
        .map_err(|e| TranslateError::NotAnObject(e.to_string()))?;
    Ok(Translated {
        body,
        stream,
        client_model,
        custom_tools,
        dropped,
    })
}

/// `instructions`, a string or an array of input messages (read as system text).
fn instructions(value: Option<&Value>, system: &mut Vec<String>, dropped: &mut Vec<String>) {
    match value {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            if !s.trim().is_empty() {
                system.push(s.clone());
            }
        }
        Some(Value::Array(items)) => {
            for item in items {
                let is_message = item.get("role").is_some() && str_of(item, "type") != "reasoning";
                if !is_message {
                    dropped.push(format!("instructions:item:{}", str_of(item, "type")));
                    continue;
                }
                let blocks = content_blocks(item.get("content"), dropped);
                push_text(system, &blocks);
            }
        }
        Some(_) => dropped.push("instructions".into()),
    }
}

/// Appends the text of `blocks` (lines joined) to `system`, when there is some.
fn push_text(system: &mut Vec<String>, blocks: &[Value]) {
    let text: Vec<&str> = blocks
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    if !text.is_empty() {
        system.push(text.join("\n"));
    }
}

/// `temperature` and `top_p`: current Claude models refuse both together and a temperature
/// outside `0..=1`, so `top_p` is left out when both are given and the temperature clamped;
/// each change is listed in `dropped`.
fn sampling(root: &Map<String, Value>, out: &mut Map<String, Value>, dropped: &mut Vec<String>) {
    let mut number = |key: &str| match root.get(key) {
        None | Some(Value::Null) => None,
        Some(v) => {
            let n = v.as_f64();
            if n.is_none() {
                dropped.push(key.to_owned());
            }
            n
        }
    };
    let temperature = number("temperature");
    let top_p = number("top_p");
    let mut clamped = |key: &str, n: f64| {
        let c = n.clamp(0.0, 1.0);
        if c != n {
            dropped.push(format!("{key}:{n} clamped to {c}"));
        }
        out.insert(key.to_owned(), json!(c));
    };
    if let Some(t) = temperature {
        clamped("temperature", t);
    }
    match top_p {
        Some(_) if temperature.is_some() => dropped.push("top_p:temperature given".into()),
        Some(p) => clamped("top_p", p),
        None => {}
    }
}

fn user_text(s: &str) -> Msg {
    Msg {
        role: Role::User,
        blocks: text_block(s).into_iter().collect(),
    }
}

/// A text block, or none for empty text (the Messages API refuses empty text blocks).
fn text_block(s: &str) -> Option<Value> {
    (!s.trim().is_empty()).then(|| json!({"type": "text", "text": s}))
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn input_item(
    item: &Value,
    system: &mut Vec<String>,
    msgs: &mut Vec<Msg>,
    ids: &mut CallIds,
    dropped: &mut Vec<String>,
) {
    let kind = match item.get("type").and_then(Value::as_str) {
        Some(k) => k,
        // An "easy" input message has a role and no type.
        None if item.get("role").is_some() => "message",
        None => {
            dropped.push("item:untyped".into());
            return;
        }
    };
    match kind {
        "message" => {
            let role = str_of(item, "role");
            let blocks = content_blocks(item.get("content"), dropped);
            match role {
                // Messages has no developer turn: its text joins `system`, wherever it stood.
                "developer" | "system" => push_text(system, &blocks),
                "assistant" => msgs.push(Msg {
                    role: Role::Assistant,
                    // Images are user content only.
                    blocks: blocks.into_iter().filter(|b| b["type"] == "text").collect(),
                }),
                _ => msgs.push(Msg {
                    role: Role::User,
                    blocks,
                }),
            }
        }
        "function_call" => {
            let args = str_of(item, "arguments");
            let input = match serde_json::from_str::<Value>(args) {
                Ok(Value::Object(o)) => Value::Object(o),
                Ok(Value::Null) | Err(_) if args.trim().is_empty() => json!({}),
                _ => json!({ "arguments": args }),
            };
            msgs.push(tool_use(item, input, ids));
        }
        "custom_tool_call" => {
            let input = json!({ "input": str_of(item, "input") });
            msgs.push(tool_use(item, input, ids));
        }
        "function_call_output" | "custom_tool_call_output" => {
            let mut block = json!({
                "type": "tool_result",
                "tool_use_id": ids.output(str_of(item, "call_id")),
            });
            match item.get("output") {
                // Content parts (text, images) become the result's content blocks.
                Some(output @ Value::Array(_)) => {
                    let blocks = content_blocks(Some(output), dropped);
                    if !blocks.is_empty() {
                        block["content"] = Value::Array(blocks);
                    }
                }
                output => {
                    let content = content_text(output);
                    if !content.trim().is_empty() {
                        block["content"] = Value::String(content);
                    }
                }
            }
            msgs.push(Msg {
                role: Role::User,
                blocks: vec![block],
            });
        }
        other => dropped.push(format!("item:{other}")),
    }
}

fn tool_use(item: &Value, input: Value, ids: &mut CallIds) -> Msg {
    let name = str_of(item, "name");
    Msg {
        role: Role::Assistant,
        blocks: vec![json!({
            "type": "tool_use",
            "id": ids.call(str_of(item, "call_id")),
            "name": if name.is_empty() { "tool" } else { name },
            "input": input,
        })],
    }
}

/// Message content (a string or parts) as Messages content blocks.
fn content_blocks(content: Option<&Value>, dropped: &mut Vec<String>) -> Vec<Value> {
    match content {
        Some(Value::String(s)) => text_block(s).into_iter().collect(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match str_of(p, "type") {
                "input_text" | "output_text" | "text" => text_block(str_of(p, "text")),
                "refusal" => text_block(str_of(p, "refusal")),
                "input_image" => image_block(str_of(p, "image_url")).or_else(|| {
                    dropped.push("part:input_image".into());
                    None
                }),
                other => {
                    dropped.push(format!("part:{other}"));
                    None
                }
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// An `input_image` URL (a `data:` URL or an http(s) URL) as an image block.
fn image_block(url: &str) -> Option<Value> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (media, data) = rest.split_once(";base64,")?;
        return Some(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media, "data": data}
        }));
    }
    (url.starts_with("https://") || url.starts_with("http://"))
        .then(|| json!({"type": "image", "source": {"type": "url", "url": url}}))
}
