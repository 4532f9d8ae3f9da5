//! Text out of a whole (non-streamed) reply object, whichever of the four API shapes it has.

use serde_json::Value;

use crate::conversation::{Parts, message_parts, push_content, responses_item};

/// Text of one non-streamed reply object, by the first shape that has some.
pub(super) fn json_text(v: &Value, tools: bool) -> Option<String> {
    let non_empty = |s: String| (!s.trim().is_empty()).then_some(s);
    let chat = || {
        let msg = v.get("choices")?.get(0)?.get("message")?;
        let text = if tools {
            message_parts(msg.as_object()?).into_texts().join("\n")
        } else {
            text_of(msg.get("content")?, "\n")
        };
        non_empty(text)
    };
    let responses = || {
        let items = v.get("output")?.as_array()?;
        let text = if tools {
            items
                .iter()
                .filter_map(responses_item)
                .flat_map(|e| e.parts)
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            responses_output_text(items)
        };
        non_empty(text)
    };
    let anthropic = || non_empty(content_text(v.get("content")?, tools, "\n"));
    let gemini = || {
        let parts = v.get("candidates")?.get(0)?.get("content")?.get("parts")?;
        non_empty(content_text(parts, tools, ""))
    };
    chat().or_else(responses).or_else(anthropic).or_else(gemini)
}

/// The text of an Anthropic or Gemini content value: with `tools`, every part as the
/// conversation reads it (tool calls as lines) joined by newlines, else its text parts joined by
/// `sep`.
fn content_text(content: &Value, tools: bool, sep: &str) -> String {
    if tools {
        let mut parts = Parts::default();
        push_content(&mut parts, content);
        parts.into_texts().join("\n")
    } else {
        text_of(content, sep)
    }
}

/// The text of a content value: a string, or the text parts of an array joined by `sep`.
/// Reasoning parts (Anthropic `thinking`, Gemini `thought`) and tool parts are not text.
pub(super) fn text_of(content: &Value, sep: &str) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(part_text)
            .collect::<Vec<_>>()
            .join(sep),
        _ => String::new(),
    }
}

pub(super) fn part_text(part: &Value) -> Option<&str> {
    if part.get("thought").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    match part.get("type").and_then(Value::as_str) {
        None | Some("text" | "output_text" | "input_text") => part.get("text")?.as_str(),
        Some(_) => None,
    }
}

/// Text of the message items of a Responses `output` array.
pub(super) fn responses_output_text(items: &[Value]) -> String {
    items
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str).unwrap_or("message") == "message")
        .filter_map(|i| i.get("content"))
        .map(|c| text_of(c, "\n"))
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}
