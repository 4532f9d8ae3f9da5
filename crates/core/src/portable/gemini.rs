//! The Gemini part of [`rewrite`](super::rewrite): thought signatures on `contents[].parts[]`.
//!
//! A thinking Gemini model returns a `thoughtSignature` (opaque base64) on some parts of its
//! answer: on the first `functionCall` of each step, else on a text part, sometimes on a part of
//! its own with empty text. Clients send them back with the history. A signature is
//! scoped to the project (account) and model family that minted it: another account answers a
//! foreign one with 400 `INVALID_ARGUMENT` ("Corrupted thought signature."). So a switch
//! removes them:
//!
//! - the `thoughtSignature` (or `thought_signature`) member goes, the rest of the part stays;
//! - a part left with no data (only `"text":""`, or nothing) goes whole: the API rejects an
//!   empty part;
//! - a `thought: true` part whose signature goes is dropped whole: the API documents that it
//!   leaves thoughts out of the model's context when their signature is not its own, and asks
//!   for either the whole thought context or none of it, so a thought without its signature is
//!   dead weight at best;
//! - Gemini 3 rejects a request whose *current turn* (the contents after the last user prompt
//!   that is not only function responses) holds a `functionCall` step without a signature
//!   (400 `Function call is missing a thought_signature`). There the signature is replaced by
//!   the placeholder the API documents for history it did not produce,
//!   [`FOREIGN_SIGNATURE`], which turns that check off; the call and its reasoning chain are
//!   gone either way. Earlier turns are not checked and simply lose the member. The
//!   placeholder itself is nobody's state and is never removed;
//! - a `contents` entry left without parts is removed.
//!
//! The token of a signature for [`digest`](super::digest) is its text in the URL-safe base64
//! alphabet without padding: the `google-genai` SDK decodes the signature it receives and
//! encodes it again in that alphabet, so one signature reaches the relay spelled two ways.

use super::{Cx, PortableError, digest, string_member};
use crate::inject::{Plan, json_string};
use crate::json::{self, Doc, Kind, ListEdit, Object, Span};

/// The signature the Gemini API accepts on a `functionCall` part it did not produce: it skips
/// the signature check of the current turn.
pub const FOREIGN_SIGNATURE: &str = "skip_thought_signature_validator";

/// The two spellings of the signature member (the API reads proto JSON names either way).
const SIGNATURE_KEYS: [&str; 2] = ["thoughtSignature", "thought_signature"];

/// Whether `bytes` may hold a signature member (a byte scan, no parse).
fn has_signature(bytes: &[u8]) -> bool {
    SIGNATURE_KEYS
        .iter()
        .any(|k| memchr::memmem::find(bytes, k.as_bytes()).is_some())
}

/// What happens to one part.
enum PartEdit {
    Keep,
    /// Remove the signature member at this field index.
    DropMember(usize),
    /// Replace the signature value by [`FOREIGN_SIGNATURE`].
    Placeholder(Span),
    /// Remove the whole part.
    DropPart,
}

pub(super) fn gemini(plan: &mut Plan<'_>, cx: &mut Cx<'_>) -> Result<(), PortableError> {
    let body = plan.body;
    let Some(i) = plan.field("contents")? else {
        return Ok(());
    };
    let span = plan.value(i);
    if plan.kind(&span) != Kind::Array {
        return Ok(());
    }
    // Most requests carry no signature at all: skip the per-content parse.
    if !has_signature(&body[span.clone()]) {
        return Ok(());
    }
    let contents = plan.doc.array_at(span)?;
    let turn_start = current_turn_start(&plan.doc, &contents.items)?;
    let mut list = ListEdit::new(&contents.span, contents.items.clone());
    for (k, item) in contents.items.iter().enumerate() {
        // Only contents that may hold a signature are parsed.
        if plan.kind(item) != Kind::Object || !has_signature(&body[item.clone()]) {
            continue;
        }
        let object = plan.doc.object_at(item.clone())?;
        let current = turn_start.is_none_or(|t| k > t);
        if scrub_content(plan, &object, current, cx)? {
            list.drop_member(k);
            cx.removed.empty_messages += 1;
        }
    }
    if !list.is_noop() {
        list.finish(&mut plan.edits);
    }
    Ok(())
}

/// The parts array of a content, if it has one.
fn parts_of(doc: &Doc<'_>, content: &Object<'_>) -> Result<Option<json::Array>, PortableError> {
    match content.get("parts") {
        Some(f) if Kind::of(doc.body(), &f.value) == Some(Kind::Array) => {
            Ok(Some(doc.array_at(f.value.clone())?))
        }
        _ => Ok(None),
    }
}

/// The index of the last user prompt: a content of role `user` (or without a role) with a
/// part that is not a function response. Model contents after it form the current turn (all
/// of them when there is none).
fn current_turn_start(doc: &Doc<'_>, contents: &[Span]) -> Result<Option<usize>, PortableError> {
    let body = doc.body();
    for (k, item) in contents.iter().enumerate().rev() {
        if Kind::of(body, item) != Some(Kind::Object) {
            continue;
        }
        let content = doc.object_at(item.clone())?;
        let role = string_member(body, &content, "role");
        if role.as_deref().is_some_and(|r| r != "user") {
            continue;
        }
        let Some(parts) = parts_of(doc, &content)? else {
            continue;
        };
        for p in &parts.items {
            if Kind::of(body, p) != Some(Kind::Object) {
                continue;
            }
            let part = doc.object_at(p.clone())?;
            if part.get("functionResponse").is_none() && part.get("function_response").is_none() {
                return Ok(Some(k));
            }
        }
    }
    Ok(None)
}

/// Plans the edits of one content; whether the whole content must go instead (every part
/// went).
fn scrub_content(
    plan: &mut Plan<'_>,
    content: &Object<'_>,
    current_turn: bool,
    cx: &mut Cx<'_>,
) -> Result<bool, PortableError> {
    let body = plan.body;
    let Some(parts) = parts_of(&plan.doc, content)? else {
        return Ok(false);
    };
    // Most contents carry no signature: skip their member scan.
    if !has_signature(&body[parts.span.clone()]) {
        return Ok(false);
    }
    let model = string_member(body, content, "role").as_deref() == Some("model");
    let mut list = ListEdit::new(&parts.span, parts.items.clone());
    // Edits inside kept parts, applied only when the content itself stays.
    let mut dropped_members = Vec::new();
    let mut placeholders = Vec::new();
    for (k, p) in parts.items.iter().enumerate() {
        if Kind::of(body, p) != Some(Kind::Object) {
            continue;
        }
        let part = plan.doc.object_at(p.clone())?;
        match judge_part(body, &part, model && current_turn, cx) {
            PartEdit::Keep => {}
            PartEdit::DropPart => list.drop_member(k),
            PartEdit::DropMember(f) => {
                let mut members = ListEdit::new(&part.span, part.members());
                members.drop_member(f);
                dropped_members.push(members);
            }
            PartEdit::Placeholder(value) => placeholders.push(value),
        }
    }
    if list.len_after() == 0 && !list.is_noop() {
        return Ok(true);
    }
    for members in dropped_members {
        members.finish(&mut plan.edits);
    }
    let placeholder = json_string(FOREIGN_SIGNATURE).into_bytes();
    for value in placeholders {
        plan.edits.replace(value, placeholder.clone());
    }
    if !list.is_noop() {
        list.finish(&mut plan.edits);
    }
    Ok(false)
}

/// What goes of one part, counted in `cx`.
fn judge_part(
    body: &[u8],
    part: &Object<'_>,
    current_model_turn: bool,
    cx: &mut Cx<'_>,
) -> PartEdit {
    let Some((index, field)) = part
        .fields
        .iter()
        .enumerate()
        .rev()
        .find(|(_, f)| SIGNATURE_KEYS.contains(&f.key.as_ref()))
    else {
        return PartEdit::Keep;
    };
    // The placeholder is nobody's state: nothing to remove, nothing to remember.
    let raw = &body[field.value.clone()];
    if raw.len() == FOREIGN_SIGNATURE.len() + 2
        && &raw[1..raw.len() - 1] == FOREIGN_SIGNATURE.as_bytes()
    {
        return PartEdit::Keep;
    }
    let d = signature_digest(body, &field.value);
    cx.seen.push(d);
    if !cx.scope.strips(Some(d)) {
        return PartEdit::Keep;
    }
    cx.removed.thought_signatures += 1;
    let thought = part
        .get("thought")
        .is_some_and(|f| &body[f.value.clone()] == b"true");
    if thought || !has_data(body, part, index) {
        cx.removed.thought_parts += 1;
        return PartEdit::DropPart;
    }
    if current_model_turn
        && (part.get("functionCall").is_some() || part.get("function_call").is_some())
    {
        return PartEdit::Placeholder(field.value.clone());
    }
    PartEdit::DropMember(index)
}

/// Whether the part holds something besides its signature (field `signature`) and the
/// `thought` flag: an empty `text` is nothing.
fn has_data(body: &[u8], part: &Object<'_>, signature: usize) -> bool {
    part.fields.iter().enumerate().any(|(i, f)| {
        i != signature
            && !SIGNATURE_KEYS.contains(&f.key.as_ref())
            && f.key != "thought"
            && !(f.key == "text" && &body[f.value.clone()] == b"\"\"")
    })
}

/// The digest of a signature value: of its decoded text in the URL-safe base64 alphabet
/// without padding (see the module docs); of the raw bytes when it is not a string.
fn signature_digest(body: &[u8], value: &Span) -> u64 {
    let Ok(text) = json::decode_str(body, value.clone()) else {
        return digest(&body[value.clone()]);
    };
    let text = text.trim_end_matches('=');
    if text.contains(['+', '/']) {
        digest(text.replace('+', "-").replace('/', "_").as_bytes())
    } else {
        digest(text.as_bytes())
    }
}

#[cfg(test)]
mod tests;
