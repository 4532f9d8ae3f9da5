//! Making a request body portable to another account of the same provider (DESIGN §5.5).
//!
//! Some request state is bound to the account that produced it: the provider refuses it
//! when it arrives through another credential. On an account switch the injection layer calls
//! [`make_portable`] (or [`rewrite_for_switch`], which also injects the handoff in the same
//! scan) before forwarding. What is removed:
//!
//! - Responses API: `previous_response_id` and `conversation` (server-side state of the old
//!   account); `input` items of type `reasoning` as whole items (an id without its encrypted
//!   blob, or a blob next to an edited item, is rejected too); `compaction` items are replaced
//!   by a short developer note ([`COMPACTION_NOTE`]) since their encrypted summary cannot be
//!   read by the new account. The [`TURN_STATE_HEADER`] request header must be dropped by the
//!   caller (headers are not part of the body).
//! - Anthropic Messages: `thinking` and `redacted_thinking` blocks of assistant turns (their
//!   signatures are bound to the account); an assistant message left empty is removed. When
//!   extended thinking is on (`thinking.type` is `enabled` or `adaptive`) the API requires the
//!   final assistant turn to start with a thinking block: when the request continues such a
//!   turn (it ends with an assistant prefill that lost its thinking, or with `tool_result`s
//!   answering an assistant turn that began with thinking) the body would be rejected, so
//!   `thinking` is set to `{"type":"disabled"}` for this one request. The next turn starts a
//!   fresh assistant turn and may think again.
//! - Chat Completions and Gemini carry no account-bound state.
//!
//! Everything else is forwarded byte for byte. The removals are counted in [`Removed`], for
//! metrics.
//!
//! ```
//! use context_relay_core::{ApiShape, portable::make_portable};
//!
//! let body = br#"{"model":"gpt-5","previous_response_id":"resp_1","input":[{"type":"reasoning","id":"rs_1"},{"type":"message","role":"user","content":"hi"}]}"#;
//! let p = make_portable(ApiShape::Responses, body).unwrap();
//! assert_eq!(
//!     p.body.unwrap(),
//!     br#"{"model":"gpt-5","input":[{"type":"message","role":"user","content":"hi"}]}"#
//! );
//! assert_eq!(p.removed.iter().collect::<Vec<_>>(), [("previous_response_id", 1), ("reasoning", 1)]);
//! ```

use std::borrow::Cow;

use crate::api::ApiShape;
use crate::config::InjectionSlot;
use crate::inject::{self, InjectError, Plan};
use crate::json::{self, DuplicateKey, EditError, JsonError, Kind, ListEdit, Span};

/// The Codex sticky-routing header: it names server state of the old account, so the caller
/// drops it from the request on a switch.
pub const TURN_STATE_HEADER: &str = "x-codex-turn-state";

/// The text of the developer note that replaces a `compaction` item.
pub const COMPACTION_NOTE: &str = "Earlier context of this conversation was compacted on \
another account and cannot be carried over; it is summarised in the context handoff.";

/// What was removed from a body, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Removed {
    /// Responses `previous_response_id` members.
    pub previous_response_id: u32,
    /// Responses `conversation` members.
    pub conversation: u32,
    /// Responses `reasoning` input items.
    pub reasoning_items: u32,
    /// Responses `compaction` input items replaced by a note.
    pub compaction_items: u32,
    /// Anthropic `thinking` blocks.
    pub thinking_blocks: u32,
    /// Anthropic `redacted_thinking` blocks.
    pub redacted_thinking_blocks: u32,
    /// Anthropic messages left empty and removed.
    pub empty_messages: u32,
    /// Anthropic requests whose extended thinking was disabled (0 or 1).
    pub thinking_disabled: u32,
}

impl Removed {
    /// Whether nothing was removed.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// `(kind, count)` for every kind with a non-zero count, for metric labels.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u32)> + use<> {
        [
            ("previous_response_id", self.previous_response_id),
            ("conversation", self.conversation),
            ("reasoning", self.reasoning_items),
            ("compaction", self.compaction_items),
            ("thinking", self.thinking_blocks),
            ("redacted_thinking", self.redacted_thinking_blocks),
            ("empty_message", self.empty_messages),
            ("thinking_disabled", self.thinking_disabled),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
    }
}

/// A body made portable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Portable {
    /// The new body; `None` when nothing had to change (forward the original as is).
    pub body: Option<Vec<u8>>,
    /// What was removed.
    pub removed: Removed,
}

/// Why a body could not be made portable. The caller forwards it unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortableError {
    /// The body is not well-formed JSON.
    #[error("expected a JSON request body: {0}")]
    NotJson(#[source] JsonError),
    /// The body is JSON but not an object.
    #[error("expected the request body to be a JSON object, found {found}")]
    NotAnObject {
        /// What the body is.
        found: &'static str,
    },
    /// A member that would be edited occurs more than once.
    #[error(transparent)]
    DuplicateKey(#[from] DuplicateKey),
    /// The planned edits overlap (a bug; reported rather than writing a corrupt body).
    #[error(transparent)]
    Edit(#[from] EditError),
}

impl From<JsonError> for PortableError {
    fn from(e: JsonError) -> Self {
        match inject::root_error(e) {
            InjectError::NotAnObject { found } => PortableError::NotAnObject { found },
            InjectError::NotJson(e) => PortableError::NotJson(e),
            // `root_error` gives only the two variants above.
            _ => PortableError::NotAnObject {
                found: "another value",
            },
        }
    }
}

/// Removes the account-bound state of `body` (see the module docs).
pub fn make_portable(shape: ApiShape, body: &[u8]) -> Result<Portable, PortableError> {
    let mut plan = Plan::new(body)?;
    let removed = plan_portable(&mut plan, shape)?;
    Ok(Portable {
        body: plan.finish()?,
        removed,
    })
}

/// A body rewritten for an account switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The new body; `None` when nothing changed (forward the original as is).
    pub body: Option<Vec<u8>>,
    /// What was removed to make it portable.
    pub removed: Removed,
    /// Whether the message was injected.
    pub injected: bool,
    /// Why the message could not be injected, if it could not; the body is then only made
    /// portable.
    pub inject_error: Option<InjectError>,
}

/// Makes `body` portable and, with a `message`, injects it, from one scan of the body.
///
/// An injection failure (a body of an unexpected shape) does not undo the portability edits:
/// the request still needs them to be accepted by the new account. It is reported in
/// [`Rewrite::inject_error`].
pub fn rewrite_for_switch(
    shape: ApiShape,
    body: &[u8],
    message: Option<&str>,
    slot: InjectionSlot,
) -> Result<Rewrite, PortableError> {
    let mut plan = Plan::new(body)?;
    let removed = plan_portable(&mut plan, shape)?;
    let mut inject_error = None;
    let mut injected = false;
    if let Some(message) = message {
        let before = plan.clone();
        match inject::plan_injection(&mut plan, shape, message, slot) {
            Ok(()) => injected = true,
            Err(e) => {
                // Drop the half-planned injection, keep the portability edits.
                plan = before;
                inject_error = Some(e);
            }
        }
    }
    Ok(Rewrite {
        body: plan.finish()?,
        removed,
        injected,
        inject_error,
    })
}

fn plan_portable(plan: &mut Plan<'_>, shape: ApiShape) -> Result<Removed, PortableError> {
    let mut removed = Removed::default();
    match shape {
        ApiShape::Responses => responses(plan, &mut removed)?,
        ApiShape::AnthropicMessages => anthropic(plan, &mut removed)?,
        ApiShape::ChatCompletions | ApiShape::Gemini => {}
    }
    Ok(removed)
}

/// The decoded string member `key` of the object at `span`, if it is one.
fn string_member<'a>(body: &'a [u8], object: &json::Object<'a>, key: &str) -> Option<Cow<'a, str>> {
    let f = object.get(key)?;
    json::decode_str(body, f.value.clone()).ok()
}

fn responses(plan: &mut Plan<'_>, removed: &mut Removed) -> Result<(), PortableError> {
    let body = plan.body;
    for (i, f) in plan.root.fields.iter().enumerate() {
        // Every copy goes: there is nothing to choose between.
        match f.key.as_ref() {
            "previous_response_id" => removed.previous_response_id += 1,
            "conversation" => removed.conversation += 1,
            _ => continue,
        }
        plan.root_edit.drop_member(i);
    }
    let Some(i) = plan.field("input")? else {
        return Ok(());
    };
    let span = plan.value(i);
    if plan.kind(&span) != Kind::Array {
        return Ok(());
    }
    let input = json::array_at(body, span)?;
    let mut list = ListEdit::new(&input.span, input.items.clone());
    let note = compaction_note();
    for (k, item) in input.items.iter().enumerate() {
        if plan.kind(item) != Kind::Object {
            continue;
        }
        let object = json::object_at(body, item.clone())?;
        match string_member(body, &object, "type").as_deref() {
            Some("reasoning") => {
                list.drop_member(k);
                removed.reasoning_items += 1;
            }
            Some("compaction") => {
                plan.edits.replace(item.clone(), note.clone().into_bytes());
                removed.compaction_items += 1;
            }
            _ => {}
        }
    }
    plan.input = Some(list);
    Ok(())
}

fn compaction_note() -> String {
    format!(
        r#"{{"type":"message","role":"developer","content":[{{"type":"input_text","text":{}}}]}}"#,
        inject::json_string(COMPACTION_NOTE)
    )
}

/// What the thinking rule needs to know about one message.
#[derive(Debug, Default, Clone, Copy)]
struct Turn {
    assistant: bool,
    /// The assistant turn began with a (redacted) thinking block.
    began_with_thinking: bool,
    /// A thinking block was removed from it.
    lost_thinking: bool,
    /// A user turn holding `tool_result` blocks.
    tool_results: bool,
    dropped: bool,
}

fn anthropic(plan: &mut Plan<'_>, removed: &mut Removed) -> Result<(), PortableError> {
    let body = plan.body;
    let Some(i) = plan.field("messages")? else {
        return Ok(());
    };
    let span = plan.value(i);
    if plan.kind(&span) != Kind::Array {
        return Ok(());
    }
    let messages = json::array_at(body, span)?;
    let mut list = ListEdit::new(&messages.span, messages.items.clone());
    let mut turns = Vec::with_capacity(messages.items.len());
    for (k, item) in messages.items.iter().enumerate() {
        let mut turn = Turn::default();
        if plan.kind(item) == Kind::Object {
            let object = json::object_at(body, item.clone())?;
            let role = string_member(body, &object, "role");
            let content = object
                .get("content")
                .map(|f| f.value.clone())
                .filter(|c| plan.kind(c) == Kind::Array);
            match (role.as_deref(), content) {
                (Some("assistant"), Some(content)) => {
                    turn.assistant = true;
                    strip_thinking(plan, content, &mut turn, removed)?;
                    if turn.dropped {
                        list.drop_member(k);
                        removed.empty_messages += 1;
                    }
                }
                (Some("assistant"), None) => turn.assistant = true,
                (Some("user"), Some(content)) => {
                    let blocks = json::array_at(body, content)?;
                    for b in &blocks.items {
                        if block_type(body, b)?.as_deref() == Some("tool_result") {
                            turn.tool_results = true;
                            break;
                        }
                    }
                }
                _ => {}
            }
        }
        turns.push(turn);
    }
    if thinking_needs_disabling(plan, &turns)?
        && let Some(t) = plan.field("thinking")?
    {
        plan.edits
            .replace(plan.value(t), br#"{"type":"disabled"}"#.to_vec());
        removed.thinking_disabled = 1;
    }
    if !list.is_noop() {
        list.finish(&mut plan.edits);
    }
    Ok(())
}

/// The `type` of a content block, when it is an object with a string `type`.
fn block_type<'a>(body: &'a [u8], block: &Span) -> Result<Option<Cow<'a, str>>, JsonError> {
    if Kind::of(body, block) != Some(Kind::Object) {
        return Ok(None);
    }
    let object = json::object_at(body, block.clone())?;
    Ok(string_member(body, &object, "type"))
}

/// Plans the removal of the thinking blocks of one assistant message's `content`.
fn strip_thinking(
    plan: &mut Plan<'_>,
    content: Span,
    turn: &mut Turn,
    removed: &mut Removed,
) -> Result<(), PortableError> {
    let blocks = json::array_at(plan.body, content)?;
    let mut list = ListEdit::new(&blocks.span, blocks.items.clone());
    for (k, b) in blocks.items.iter().enumerate() {
        let ty = block_type(plan.body, b)?;
        let counter = match ty.as_deref() {
            Some("thinking") => &mut removed.thinking_blocks,
            Some("redacted_thinking") => &mut removed.redacted_thinking_blocks,
            _ => continue,
        };
        *counter += 1;
        if k == 0 {
            turn.began_with_thinking = true;
        }
        turn.lost_thinking = true;
        list.drop_member(k);
    }
    if !turn.lost_thinking {
        return Ok(());
    }
    if list.len_after() == 0 {
        // The whole message goes; its own edits would overlap that removal.
        turn.dropped = true;
    } else {
        list.finish(&mut plan.edits);
    }
    Ok(())
}

/// Whether extended thinking is on and the request continues an assistant turn whose
/// thinking block was removed (see the module docs).
fn thinking_needs_disabling(plan: &Plan<'_>, turns: &[Turn]) -> Result<bool, PortableError> {
    let Some(t) = plan.field("thinking")? else {
        return Ok(false);
    };
    let span = plan.value(t);
    if plan.kind(&span) != Kind::Object {
        return Ok(false);
    }
    let object = json::object_at(plan.body, span)?;
    let on = matches!(
        string_member(plan.body, &object, "type").as_deref(),
        Some("enabled" | "adaptive")
    );
    if !on {
        return Ok(false);
    }
    let Some((last, before)) = turns.split_last() else {
        return Ok(false);
    };
    // An assistant prefill that lost its thinking.
    if last.assistant && !last.dropped && last.lost_thinking {
        return Ok(true);
    }
    // Tool results answering an assistant turn that began with thinking.
    Ok(!last.assistant
        && last.tool_results
        && before
            .last()
            .is_some_and(|prev| prev.assistant && prev.began_with_thinking))
}

#[cfg(test)]
mod tests;
