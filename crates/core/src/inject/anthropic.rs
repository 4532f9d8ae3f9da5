//! Anthropic Messages: a text block last in the top-level `system`.

use super::{InjectError, Plan, append_to_array, json_string};
use crate::api::ApiShape;
use crate::json::Kind;

pub(super) fn plan(plan: &mut Plan<'_>, message: &str) -> Result<(), InjectError> {
    plan.conversation(ApiShape::AnthropicMessages, "messages", "an array", false)?;
    let block = format!(r#"{{"type":"text","text":{}}}"#, json_string(message));
    let Some(i) = plan.field("system")? else {
        plan.root_edit
            .prepend(format!(r#""system":[{block}]"#).into_bytes());
        return Ok(());
    };
    let span = plan.value(i);
    let raw = &plan.body[span.clone()];
    match plan.kind(&span) {
        // The API rejects empty text blocks, so an empty string is not kept as one.
        Kind::Null => plan.edits.replace(span, format!("[{block}]").into_bytes()),
        Kind::String if raw == b"\"\"" => {
            plan.edits.replace(span, format!("[{block}]").into_bytes());
        }
        Kind::String => {
            let mut out = Vec::with_capacity(raw.len() + block.len() + 32);
            out.extend_from_slice(br#"[{"type":"text","text":"#);
            out.extend_from_slice(raw);
            out.extend_from_slice(b"},");
            out.extend_from_slice(block.as_bytes());
            out.push(b']');
            plan.edits.replace(span, out);
        }
        // Last, after any `cache_control` breakpoint: the cached prefix stays byte-identical.
        Kind::Array => append_to_array(&mut plan.edits, &plan.doc, &span, block.into_bytes())?,
        found => {
            return Err(InjectError::WrongType {
                field: "system",
                expected: "a string or an array of content blocks",
                found: found.described(),
            });
        }
    }
    Ok(())
}
