//! The Anthropic Messages part of [`rewrite`](super::rewrite): signed thinking blocks, and the
//! thinking setting and context edits a request left without them needs.

use std::borrow::Cow;

use super::{Cx, PortableError, string_member};
use crate::inject::Plan;
use crate::json::{self, JsonError, Kind, ListEdit, Span};

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

pub(super) fn anthropic(plan: &mut Plan<'_>, cx: &mut Cx<'_>) -> Result<(), PortableError> {
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
                    strip_thinking(plan, content, &mut turn, cx)?;
                    if turn.dropped {
                        list.drop_member(k);
                        cx.removed.empty_messages += 1;
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
        cx.removed.thinking_disabled = 1;
        drop_thinking_edits(plan, cx)?;
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
    cx: &mut Cx<'_>,
) -> Result<(), PortableError> {
    let body = plan.body;
    let blocks = json::array_at(body, content)?;
    let mut list = ListEdit::new(&blocks.span, blocks.items.clone());
    for (k, b) in blocks.items.iter().enumerate() {
        if Kind::of(body, b) != Some(Kind::Object) {
            continue;
        }
        let object = json::object_at(body, b.clone())?;
        let (token, thinking) = match string_member(body, &object, "type").as_deref() {
            Some("thinking") => (object.get("signature"), true),
            Some("redacted_thinking") => (object.get("data"), false),
            _ => continue,
        };
        if k == 0 {
            turn.began_with_thinking = true;
        }
        let token = token.map(|f| f.value.clone());
        if !cx.judge(body, token.as_ref()) {
            continue;
        }
        if thinking {
            cx.removed.thinking_blocks += 1;
        } else {
            cx.removed.redacted_thinking_blocks += 1;
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

/// Drops the `context_management` edits that only work with thinking on (`clear_thinking_…`):
/// with thinking disabled the provider rejects them. A `context_management` left without
/// edits is removed.
fn drop_thinking_edits(plan: &mut Plan<'_>, cx: &mut Cx<'_>) -> Result<(), PortableError> {
    let body = plan.body;
    let Some(i) = plan.field("context_management")? else {
        return Ok(());
    };
    let span = plan.value(i);
    if plan.kind(&span) != Kind::Object {
        return Ok(());
    }
    let object = json::object_at(body, span)?;
    let Some(edits) = object.unique("edits")? else {
        return Ok(());
    };
    let edits_span = object.fields[edits].value.clone();
    if Kind::of(body, &edits_span) != Some(Kind::Array) {
        return Ok(());
    }
    let items = json::array_at(body, edits_span)?;
    let mut list = ListEdit::new(&items.span, items.items.clone());
    let mut dropped = 0;
    for (k, item) in items.items.iter().enumerate() {
        if block_type(body, item)?.is_some_and(|t| t.starts_with("clear_thinking")) {
            list.drop_member(k);
            dropped += 1;
        }
    }
    if dropped == 0 {
        return Ok(());
    }
    cx.removed.context_edits += dropped;
    if list.len_after() == 0 && object.fields.len() == 1 {
        plan.root_edit.drop_member(i);
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
