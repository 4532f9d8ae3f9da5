//! Chat Completions and Anthropic Messages conversations: the `messages` array, read by one
//! reader that understands the content forms of both.

use serde_json::{Map, Value};

use super::{
    ConversationError, Entry, PartKind, Parts, array_field, push_content, role_of, str_field,
    tool_output_line, top_level_system,
};

/// Chat Completions and Anthropic Messages: both keep the conversation in `messages`, and one
/// reader handles the content forms of both (a body sent to the "wrong" path still reads well).
pub(super) fn messages(
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
