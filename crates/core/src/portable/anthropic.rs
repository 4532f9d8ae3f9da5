//! The Anthropic Messages part of [`rewrite`](super::rewrite): signed thinking blocks, and the
//! thinking setting and context edits a request left without them needs.

use std::borrow::Cow;

use super::{Cx, PortableError, string_member};
use crate::inject::Plan;
use crate::json::{Doc, JsonError, Kind, ListEdit, Span};

/// What the thinking rule needs to know about one message.
#[derive(Debug, Default, Clone, Copy)]
struct Turn {
    assistant: bool,
    /// After the edits, the assistant message still starts with a (redacted) thinking block.
    starts_with_thinking: bool,
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
    let messages = plan.doc.array_at(span)?;
    let mut list = ListEdit::new(&messages.span, messages.items.clone());
    let mut turns = Vec::with_capacity(messages.items.len());
    for (k, item) in messages.items.iter().enumerate() {
        let mut turn = Turn::default();
        if plan.kind(item) == Kind::Object {
            let object = plan.doc.object_at(item.clone())?;
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
                // A string content starts with no thinking block.
                (Some("assistant"), None) => turn.assistant = true,
                (Some("user"), Some(content)) => {
                    let blocks = plan.doc.array_at(content)?;
                    for b in &blocks.items {
                        if block_type(&plan.doc, b)?.as_deref() == Some("tool_result") {
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
fn block_type<'a>(doc: &Doc<'a>, block: &Span) -> Result<Option<Cow<'a, str>>, JsonError> {
    let body = doc.body();
    if Kind::of(body, block) != Some(Kind::Object) {
        return Ok(None);
    }
    let object = doc.object_at(block.clone())?;
    Ok(string_member(body, &object, "type"))
}

/// Plans the removal of the thinking blocks of one assistant message's `content`, and tells
/// whether what is left starts with a thinking block.
fn strip_thinking(
    plan: &mut Plan<'_>,
    content: Span,
    turn: &mut Turn,
    cx: &mut Cx<'_>,
) -> Result<(), PortableError> {
    let body = plan.body;
    let blocks = plan.doc.array_at(content)?;
    let mut list = ListEdit::new(&blocks.span, blocks.items.clone());
    // Whether the first block that stays is a thinking block (`None`: none stayed yet).
    let mut first_kept: Option<bool> = None;
    for (k, b) in blocks.items.iter().enumerate() {
        if Kind::of(body, b) != Some(Kind::Object) {
            first_kept.get_or_insert(false);
            continue;
        }
        let object = plan.doc.object_at(b.clone())?;
        let (token, thinking) = match string_member(body, &object, "type").as_deref() {
            Some("thinking") => (object.get("signature"), true),
            Some("redacted_thinking") => (object.get("data"), false),
            _ => {
                first_kept.get_or_insert(false);
                continue;
            }
        };
        let token = token.map(|f| f.value.clone());
        if !cx.judge(body, token.as_ref()) {
            first_kept.get_or_insert(true);
            continue;
        }
        if thinking {
            cx.removed.thinking_blocks += 1;
        } else {
            cx.removed.redacted_thinking_blocks += 1;
        }
        list.drop_member(k);
    }
    turn.starts_with_thinking = first_kept == Some(true);
    if list.is_noop() {
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
    let object = plan.doc.object_at(span)?;
    let Some(edits) = object.unique("edits")? else {
        return Ok(());
    };
    let edits_span = object.fields[edits].value.clone();
    if Kind::of(body, &edits_span) != Some(Kind::Array) {
        return Ok(());
    }
    let items = plan.doc.array_at(edits_span)?;
    let mut list = ListEdit::new(&items.span, items.items.clone());
    let mut dropped = 0;
    for (k, item) in items.items.iter().enumerate() {
        if block_type(&plan.doc, item)?.is_some_and(|t| t.starts_with("clear_thinking")) {
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

/// Whether extended thinking is on (`enabled`, with a budget) and the request continues an
/// assistant turn that, after the edits, does not start with a thinking block: the API then
/// requires one (the turn is an assistant prefill, or the one that `tool_result`s in the last
/// message answer) and rejects the body. This holds whether the thinking block was removed here (minted by
/// another account) or the turn was answered without thinking (by an account that got this
/// tool loop with thinking off): the loop stays valid until the next plain user turn, which
/// starts a fresh assistant turn that may think again.
fn thinking_needs_disabling(plan: &Plan<'_>, turns: &[Turn]) -> Result<bool, PortableError> {
    let Some(t) = plan.field("thinking")? else {
        return Ok(false);
    };
    let span = plan.value(t);
    if plan.kind(&span) != Kind::Object {
        return Ok(false);
    }
    let object = plan.doc.object_at(span)?;
    // Only extended thinking with a budget requires the block: with adaptive thinking the
    // model may answer a tool loop step without thinking, and the API takes such a turn back
    // as it is (Claude Code's own requests carry them), so nothing needs turning off.
    if string_member(plan.body, &object, "type").as_deref() != Some("enabled") {
        return Ok(false);
    }
    let Some((last, before)) = turns.split_last() else {
        return Ok(false);
    };
    let continued = if last.assistant {
        // An assistant prefill (a prefill removed whole leaves a user turn last).
        (!last.dropped).then_some(last)
    } else if last.tool_results {
        before.iter().rev().find(|t| t.assistant && !t.dropped)
    } else {
        None
    };
    Ok(continued.is_some_and(|turn| !turn.starts_with_thinking))
}
