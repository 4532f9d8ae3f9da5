//! An Anthropic Messages answer as a Responses answer: the JSON body, and the output items
//! and usage the stream translator shares.

use serde_json::{Value, json};

/// What the answer's translation needs to know about the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseContext {
    /// The model named in the answer (the client's, else the provider's).
    pub model: Option<String>,
    /// Tools whose calls are `custom_tool_call` items (input: one string).
    pub custom_tools: Vec<String>,
    /// `created_at` of the answer, in Unix seconds.
    pub created_at: u64,
}

/// A Messages JSON answer `body` as a Responses JSON answer (`object: "response"`); `None`
/// when the body is not a Messages answer.
///
/// ```
/// use context_relay_core::translate::{ResponseContext, messages_to_response};
/// let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
///   "content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn",
///   "usage":{"input_tokens":10,"output_tokens":2}}"#;
/// let out = messages_to_response(body, &ResponseContext::default()).unwrap();
/// let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
/// assert_eq!(v["object"], "response");
/// assert_eq!(v["output"][0]["content"][0]["text"], "hi");
/// assert_eq!(v["usage"]["total_tokens"], 12);
/// ```
pub fn messages_to_response(body: &[u8], ctx: &ResponseContext) -> Option<Vec<u8>> {
    let v: Value = serde_json::from_slice(body).ok()?;
    if v.get("type").and_then(Value::as_str) != Some("message") {
        return None;
    }
    let id = v.get("id").and_then(Value::as_str).unwrap_or("msg");
    let empty = Vec::new();
    let blocks = v.get("content").and_then(Value::as_array).unwrap_or(&empty);
    let mut output: Vec<Value> = Vec::new();
    let mut text = String::new();
    for (i, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                if !text.is_empty() {
                    output.push(message_item(
                        &format!("msg_{id}_{i}"),
                        &std::mem::take(&mut text),
                    ));
                }
                let call_id = b.get("id").and_then(Value::as_str).unwrap_or("call");
                let name = b.get("name").and_then(Value::as_str).unwrap_or("tool");
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                output.push(call_item(call_id, name, &input, ctx));
            }
            _ => {}
        }
    }
    if !text.is_empty() {
        output.push(message_item(&format!("msg_{id}"), &text));
    }
    let stop = v.get("stop_reason").and_then(Value::as_str);
    let usage = usage(v.get("usage"), None);
    let model = ctx
        .model
        .clone()
        .or_else(|| v.get("model").and_then(Value::as_str).map(str::to_owned));
    let resp = response_object(
        &format!("resp_{id}"),
        model.as_deref(),
        ctx.created_at,
        output,
        stop,
        Some(usage),
    );
    serde_json::to_vec(&resp).ok()
}

/// A finished assistant message item with one `output_text` part.
pub(super) fn message_item(id: &str, text: &str) -> Value {
    json!({
        "type": "message", "id": id, "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]
    })
}

/// A finished call item: `function_call` (arguments as a JSON string), or `custom_tool_call`
/// for a freeform tool (its `input` string).
pub(super) fn call_item(call_id: &str, name: &str, input: &Value, ctx: &ResponseContext) -> Value {
    if ctx.custom_tools.iter().any(|t| t == name) {
        let text = match input.get("input") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        return json!({
            "type": "custom_tool_call", "id": format!("ctc_{call_id}"), "status": "completed",
            "call_id": call_id, "name": name, "input": text
        });
    }
    json!({
        "type": "function_call", "id": format!("fc_{call_id}"), "status": "completed",
        "call_id": call_id, "name": name, "arguments": input.to_string()
    })
}

/// Responses usage from Messages usage (`input_tokens` there excludes cached input; read by
/// [`Usage`](crate::usage::Usage)). `output_tokens` overrides the output count when the stream
/// reported it late.
pub(super) fn usage(u: Option<&Value>, output_tokens: Option<u64>) -> Value {
    let mut usage = u
        .and_then(crate::usage::Usage::from_value)
        .unwrap_or_default();
    if let Some(n) = output_tokens {
        usage.output = n;
    }
    json!({
        "input_tokens": usage.input,
        "input_tokens_details": {"cached_tokens": usage.cached_input},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_output},
        "total_tokens": usage.input.saturating_add(usage.output)
    })
}

/// The `response` object, `completed` (or `incomplete` when the model ran out of tokens).
pub(super) fn response_object(
    id: &str,
    model: Option<&str>,
    created_at: u64,
    output: Vec<Value>,
    stop_reason: Option<&str>,
    usage: Option<Value>,
) -> Value {
    let incomplete = stop_reason == Some("max_tokens");
    json!({
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": if incomplete { "incomplete" } else { "completed" },
        "incomplete_details": if incomplete { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "error": null,
        "model": model.unwrap_or(""),
        "output": output,
        "usage": usage.unwrap_or(Value::Null),
    })
}
