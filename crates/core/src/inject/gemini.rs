//! Gemini `generateContent`: a text part last in `systemInstruction.parts`.

use super::{InjectError, Plan, append_to_array, json_string};
use crate::api::ApiShape;
use crate::json::{DuplicateKey, Kind};

pub(super) fn plan(plan: &mut Plan<'_>, message: &str) -> Result<(), InjectError> {
    plan.conversation(ApiShape::Gemini, "contents", "an array", false)?;
    let part = format!(r#"{{"text":{}}}"#, json_string(message));
    // The API accepts the proto field name in both spellings; editing one while the other
    // is also present would be a guess.
    let camel = plan.field("systemInstruction")?;
    let snake = plan.field("system_instruction")?;
    let (i, field) = match (camel, snake) {
        (Some(_), Some(_)) => {
            return Err(DuplicateKey {
                key: "systemInstruction",
                count: 2,
            }
            .into());
        }
        (Some(i), None) => (i, "systemInstruction"),
        (None, Some(i)) => (i, "system_instruction"),
        (None, None) => {
            plan.root_edit
                .prepend(format!(r#""systemInstruction":{{"parts":[{part}]}}"#).into_bytes());
            return Ok(());
        }
    };
    let span = plan.value(i);
    match plan.kind(&span) {
        Kind::Null => plan
            .edits
            .replace(span, format!(r#"{{"parts":[{part}]}}"#).into_bytes()),
        Kind::Object => {
            let object = plan.doc.object_at(span).map_err(InjectError::NotJson)?;
            match object.unique("parts")? {
                None => {
                    let mut member = format!(r#""parts":[{part}]"#).into_bytes();
                    if !object.fields.is_empty() {
                        member.push(b',');
                    }
                    plan.edits.insert(object.span.start + 1, member);
                }
                Some(p) => {
                    let parts = object.fields[p].value.clone();
                    match plan.kind(&parts) {
                        Kind::Array => {
                            append_to_array(&mut plan.edits, &plan.doc, &parts, part.into_bytes())?
                        }
                        Kind::Null => plan.edits.replace(parts, format!("[{part}]").into_bytes()),
                        found => {
                            return Err(InjectError::WrongType {
                                field: if field == "systemInstruction" {
                                    "systemInstruction.parts"
                                } else {
                                    "system_instruction.parts"
                                },
                                expected: "an array of parts",
                                found: found.described(),
                            });
                        }
                    }
                }
            }
        }
        found => {
            return Err(InjectError::WrongType {
                field,
                expected: "an object",
                found: found.described(),
            });
        }
    }
    Ok(())
}
