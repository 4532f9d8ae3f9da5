//! Gemini conversations: the `systemInstruction` and the `contents` array.

use serde_json::{Map, Value};

use super::{
    ConversationError, Entry, Parts, array_field, push_content, role_of, top_level_system,
};

pub(super) fn gemini(obj: &Map<String, Value>) -> Result<Vec<Entry>, ConversationError> {
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
