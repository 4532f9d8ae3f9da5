//! Chat Completions: a `system` message first in `messages`.

use super::{InjectError, Plan, json_string, prepend_to_array};
use crate::api::ApiShape;

pub(super) fn plan(plan: &mut Plan<'_>, message: &str) -> Result<(), InjectError> {
    let (span, _) = plan.conversation(ApiShape::ChatCompletions, "messages", "an array", false)?;
    let item = format!(r#"{{"role":"system","content":{}}}"#, json_string(message));
    prepend_to_array(&mut plan.edits, plan.body, &span, item.into_bytes());
    Ok(())
}
