//! Responses API conversations: the `instructions` and the `input` string or item array.

use serde_json::{Map, Value};

use super::{
    ConversationError, Entry, PartKind, Parts, push_content, role_of, tool_output_line,
    top_level_system, type_name,
};

pub(super) fn responses(obj: &Map<String, Value>) -> Result<Vec<Entry>, ConversationError> {
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
