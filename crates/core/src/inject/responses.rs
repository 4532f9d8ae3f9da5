//! Responses API: a `developer` item first in `input`, or the message first in
//! `instructions`.

use super::{InjectError, Plan, json_string, prepend_to_array};
use crate::api::ApiShape;
use crate::config::InjectionSlot;
use crate::json::Kind;

pub(super) fn plan(
    plan: &mut Plan<'_>,
    message: &str,
    slot: InjectionSlot,
) -> Result<(), InjectError> {
    let (input, input_kind) = plan.conversation(
        ApiShape::Responses,
        "input",
        "an array of items or a string",
        true,
    )?;
    // Some clients send Chat-style `messages: []` next to `input`; the Responses API rejects
    // the unknown parameter, and an empty list carries nothing.
    if let Some(i) = plan.field("messages")? {
        let span = plan.value(i);
        if plan.kind(&span) == Kind::Array && super::array_is_empty(plan.body, &span) {
            plan.root_edit.drop_member(i);
        }
    }
    let text = json_string(message);
    match slot {
        InjectionSlot::InputItem => {
            let item = message_item("developer", &text).into_bytes();
            if input_kind == Kind::String {
                // Reuse the client's own bytes of the string.
                let original = &plan.body[input.clone()];
                let user = message_item("user", &String::from_utf8_lossy(original));
                let mut list = Vec::with_capacity(item.len() + user.len() + 3);
                list.push(b'[');
                list.extend_from_slice(&item);
                list.push(b',');
                list.extend_from_slice(user.as_bytes());
                list.push(b']');
                plan.edits.replace(input, list);
            } else if let Some(list) = plan.input.as_mut() {
                list.prepend(item);
            } else {
                prepend_to_array(&mut plan.edits, plan.body, &input, item);
            }
        }
        InjectionSlot::Instructions => match plan.field("instructions")? {
            None => {
                plan.root_edit
                    .prepend(format!(r#""instructions":{text}"#).into_bytes());
            }
            Some(i) => {
                let span = plan.value(i);
                let raw = &plan.body[span.clone()];
                let new = match plan.kind(&span) {
                    Kind::Null => text.into_bytes(),
                    Kind::String if raw == b"\"\"" => text.into_bytes(),
                    Kind::String => {
                        // `"<message>\n\n` + the original string without its opening quote:
                        // two JSON string bodies concatenate into one, and the client's
                        // escaping of its own instructions is kept.
                        let head = json_string(&format!("{message}\n\n"));
                        let mut out = Vec::with_capacity(head.len() + raw.len());
                        out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
                        out.extend_from_slice(&raw[1..]);
                        out
                    }
                    found => {
                        return Err(InjectError::WrongType {
                            field: "instructions",
                            expected: "a string",
                            found: found.described(),
                        });
                    }
                };
                plan.edits.replace(span, new);
            }
        },
    }
    Ok(())
}

/// A message item with one `input_text` part; `text` is a JSON string literal.
fn message_item(role: &str, text: &str) -> String {
    format!(
        r#"{{"type":"message","role":"{role}","content":[{{"type":"input_text","text":{text}}}]}}"#
    )
}
