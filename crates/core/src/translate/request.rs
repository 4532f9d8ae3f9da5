//! A Responses request body as an Anthropic Messages request body.

use serde_json::{Map, Value, json};

use super::sequence::{Msg, Role, content_text, normalize};
use super::{DEFAULT_MAX_TOKENS, TranslateError};

/// How a request is translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOptions {
    /// The model the provider is asked for (the route target's model).
    pub model: String,
    /// `max_tokens` when the client set no `max_output_tokens`.
    pub default_max_tokens: u64,
}

impl RequestOptions {
    /// Options for `model` with [`DEFAULT_MAX_TOKENS`].
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            default_max_tokens: DEFAULT_MAX_TOKENS,
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

/// Top-level Responses fields with a Messages equivalent or none worth keeping: everything
/// else is dropped and listed.
const KEPT: [&str; 2] = ["temperature", "top_p"];

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
    if let Some(text) = root.get("instructions").and_then(Value::as_str)
        && !text.is_empty()
    {
        system.push(text.to_owned());
    }
    let mut msgs: Vec<Msg> = Vec::new();
    match root.get("input") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => msgs.push(user_text(s)),
        Some(Value::Array(items)) => {
            for item in items {
                input_item(item, &mut system, &mut msgs, &mut dropped);
            }
        }
        Some(_) => {
            return Err(TranslateError::BadField {
                field: "input",
                expected: "a string or an array of items",
            });
        }
    }
    let mut out = Map::new();
    out.insert("model".into(), Value::String(options.model.clone()));
    let max = root
        .get("max_output_tokens")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .unwrap_or(options.default_max_tokens);
    out.insert("max_tokens".into(), json!(max));
    if !system.is_empty() {
        out.insert("system".into(), Value::String(system.join("\n\n")));
    }
    let messages: Vec<Value> = normalize(msgs)
        .into_iter()
        .map(|m| json!({"role": m.role.as_str(), "content": m.blocks}))
        .collect();
    out.insert("messages".into(), Value::Array(messages));
    let mut custom_tools = Vec::new();
    let tools = match root.get("tools") {
        Some(Value::Array(tools)) => translate_tools(tools, &mut custom_tools, &mut dropped),
        _ => Vec::new(),
    };
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
        let parallel = root.get("parallel_tool_calls").and_then(Value::as_bool);
        if let Some(choice) = tool_choice(root.get("tool_choice"), parallel) {
            out.insert("tool_choice".into(), choice);
        }
    }
    let stream = root.get("stream").and_then(Value::as_bool) == Some(true);
    if stream {
        out.insert("stream".into(), Value::Bool(true));
    }
    for key in KEPT {
        if let Some(v) = root.get(key).filter(|v| v.is_number()) {
            out.insert(key.into(), v.clone());
        }
    }
    for key in root.keys() {
        let handled = matches!(
            key.as_str(),
            "model"
                | "instructions"
                | "input"
                | "max_output_tokens"
                | "tools"
                | "tool_choice"
                | "parallel_tool_calls"
                | "stream"
        ) || KEPT.contains(&key.as_str());
        if !handled {
            dropped.push(key.clone());
        }
    }
    let body = serde_json::to_vec(&Value::Object(out))
        .map_err(|e| TranslateError::NotAnObject(e.to_string()))?;
    Ok(Translated {
        body,
        stream,
        client_model: root.get("model").and_then(Value::as_str).map(str::to_owned),
        custom_tools,
        dropped,
    })
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

/// Anthropic tool ids match `^[a-zA-Z0-9_-]+$`.
fn tool_id(call_id: &str) -> String {
    let id: String = call_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() { "call".into() } else { id }
}

fn input_item(
    item: &Value,
    system: &mut Vec<String>,
    msgs: &mut Vec<Msg>,
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
                "developer" | "system" => {
                    let text: Vec<&str> = blocks
                        .iter()
                        .filter_map(|b| b.get("text").and_then(Value::as_str))
                        .collect();
                    if !text.is_empty() {
                        system.push(text.join("\n"));
                    }
                }
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
            msgs.push(tool_use(item, input));
        }
        "custom_tool_call" => {
            let input = json!({ "input": str_of(item, "input") });
            msgs.push(tool_use(item, input));
        }
        "function_call_output" | "custom_tool_call_output" => {
            let content = content_text(item.get("output"));
            let mut block = json!({
                "type": "tool_result",
                "tool_use_id": tool_id(str_of(item, "call_id")),
            });
            if !content.trim().is_empty() {
                block["content"] = Value::String(content);
            }
            msgs.push(Msg {
                role: Role::User,
                blocks: vec![block],
            });
        }
        other => dropped.push(format!("item:{other}")),
    }
}

fn tool_use(item: &Value, input: Value) -> Msg {
    let name = str_of(item, "name");
    Msg {
        role: Role::Assistant,
        blocks: vec![json!({
            "type": "tool_use",
            "id": tool_id(str_of(item, "call_id")),
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

/// Anthropic tool names match `^[a-zA-Z0-9_-]{1,64}$`.
fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn translate_tools(
    tools: &[Value],
    custom: &mut Vec<String>,
    dropped: &mut Vec<String>,
) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for tool in tools {
        let kind = str_of(tool, "type");
        let name = str_of(tool, "name");
        if !valid_tool_name(name) || out.iter().any(|t| t["name"] == name) {
            dropped.push(format!("tool:{kind}:{name}"));
            continue;
        }
        let description = str_of(tool, "description");
        let schema = match kind {
            "function" => match tool.get("parameters") {
                Some(Value::Object(p)) => {
                    let mut p = p.clone();
                    p.insert("type".into(), Value::String("object".into()));
                    Value::Object(p)
                }
                _ => json!({"type": "object", "properties": {}}),
            },
            "custom" => {
                custom.push(name.to_owned());
                json!({
                    "type": "object",
                    "properties": {"input": {"type": "string", "description": "The raw input of the tool, as its description says."}},
                    "required": ["input"]
                })
            }
            _ => {
                dropped.push(format!("tool:{kind}:{name}"));
                continue;
            }
        };
        let mut t = json!({"name": name, "input_schema": schema});
        if !description.is_empty() {
            t["description"] = Value::String(description.to_owned());
        }
        out.push(t);
    }
    out
}

fn tool_choice(choice: Option<&Value>, parallel: Option<bool>) -> Option<Value> {
    let mut out = match choice {
        None | Some(Value::Null) => json!({"type": "auto"}),
        Some(Value::String(s)) => match s.as_str() {
            "none" => json!({"type": "none"}),
            "required" => json!({"type": "any"}),
            _ => json!({"type": "auto"}),
        },
        Some(v) => match (str_of(v, "type"), str_of(v, "name")) {
            ("function" | "custom", name) if valid_tool_name(name) => {
                json!({"type": "tool", "name": name})
            }
            _ => json!({"type": "auto"}),
        },
    };
    if parallel == Some(false) && out["type"] != "none" {
        out["disable_parallel_tool_use"] = Value::Bool(true);
    }
    Some(out)
}
