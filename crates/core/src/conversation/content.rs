//! The text of message content, part by part, for the content forms of all four API shapes
//! (strings, Chat and Responses text parts, Anthropic blocks, Gemini parts).

use serde_json::Value;

use super::lines::compact_json;
use super::{PartKind, Parts, str_field, tool_output_line};

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
pub(super) fn push_part(parts: &mut Parts, part: &Value) {
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
