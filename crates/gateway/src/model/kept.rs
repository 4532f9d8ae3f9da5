//! `model` of a body kept in the chunks it came in (see [`chunks`](crate::chunks)): read from
//! its first chunk, and written by replacing the bytes of its literal alone.

use std::sync::Arc;

use bytes::Bytes;
use context_relay_core::json;
use smallvec::SmallVec;

use super::{MAY_REPEAT, ModelField, Searched, WrittenModel, string_field};
use crate::chunks::Chunks;

/// The `model` of a body kept in chunks, every chunk of which `searched` was given as it
/// arrived (for [`MODEL_LITERALS`](super::MODEL_LITERALS) at least): read as
/// [`find_model`](super::find_model) reads it, when it stands whole in the first chunk.
/// Otherwise, when the body is anything but a clean read there (not an object, not closed,
/// `model` no string), or when a second top-level `model` may follow (the search found one of
/// [`MAY_REPEAT`] after it), the body is to be joined and read as any other, which answers the
/// same and says what is wrong: the search comes back for that reading, as far as it went.
pub(crate) fn find_model_in_chunks(chunks: &Chunks, searched: json::Pieces<'static>) -> InChunks {
    let Some(first) = chunks.iter().next() else {
        return InChunks::Join(Searched::Partly(searched));
    };
    // An object ends with `}`: a cut body is told at no cost.
    let last = chunks
        .iter()
        .rev()
        .flat_map(|chunk| chunk.iter().rev())
        .find(|b| !b.is_ascii_whitespace());
    // The members before `model` are read as in a whole body: the first chunk holds the
    // body's first bytes, and a member cut by its end is an error here, not a wrong answer.
    let member = json::find_member(first, "model");
    let (Some(b'}'), Ok(Some(member))) = (last, member) else {
        return InChunks::Join(Searched::Partly(searched));
    };
    let found = searched.finish_pushed();
    if may_repeat(chunks, &found, member.value.end) {
        return InChunks::Join(Searched::Done(found));
    }
    match string_field(first, member.value) {
        Ok(field) => InChunks::Read(field),
        Err(_) => InChunks::Join(Searched::Done(found)),
    }
}

/// The token `"model"`, as [`MAY_REPEAT`] has it.
const MODEL: &[u8] = MAY_REPEAT[0];

/// The longest string that can spell `model`: five `\uXXXX` escapes.
const SPELLED: usize = 5 * 6;

/// How far around an occurrence its bytes are read: a string spelling `model` around a `\u`
/// escape, and the backslashes before its quotes.
const NEAR: usize = 2 * SPELLED + 4;

/// Whether a second top-level `model` may follow the first, whose value ends at `from`: one
/// of the search's occurrences of [`MAY_REPEAT`] after it may be one, or the search does not
/// know them all. Each is read where it stands, not by reading the body: a `\u` escape
/// matters only in a string short enough to spell `model` that does; a `"model"` string only
/// as a key (a `:` after it) at the top level, whose depth is read from the stretch before it
/// or the one after it, whichever is shorter ([`json::net_depth`]: a Claude Code turn names
/// `model` in a tool's schema near its end). The depth is known from `from` on, so no byte
/// is read twice going forwards, and the tail is read at most once.
///
/// Answers for a body that is JSON: the full reading of a joined body refuses one that is not,
/// and here, as for every byte of a body kept in chunks, the provider does.
fn may_repeat(chunks: &Chunks, found: &json::Found<'_>, from: usize) -> bool {
    let len = chunks.len();
    // A place between tokens and the depth there; whether the tail was read.
    let (mut known, mut depth, mut tail_read) = (from, 1isize, false);
    let mut next = from;
    loop {
        let at = match found.next_of(&MAY_REPEAT, next) {
            Ok(None) => return false,
            Ok(Some(at)) => at,
            Err(_) => return true,
        };
        next = at + 1;
        let start = at.saturating_sub(NEAR);
        let near = chunks.bytes_in(start..at + NEAR);
        let here = at - start;
        if near.get(here..here + 2) == Some(b"\\u") {
            if spells_model(&near, here) {
                return true;
            }
            continue;
        }
        if json::is_escaped(&near, here) || !is_key(&near, here + MODEL.len()) {
            continue;
        }
        let end = at + MODEL.len();
        let key_depth = if !tail_read && len - end < at.saturating_sub(known) {
            tail_read = true;
            json::net_depth(&chunks.bytes_in(end..len)).map(|n| -n)
        } else {
            json::net_depth(&chunks.bytes_in(known..at)).map(|n| depth + n)
        };
        match key_depth {
            Some(d) if d != 1 => (known, depth) = (end, d),
            _ => return true,
        }
    }
}

/// Whether the `\u` at `at` of `near` is an escape in a string that spells `model` (the
/// string's quotes within [`SPELLED`] bytes of it, and `near` reaching [`SPELLED`] bytes past
/// them); also true when the string cannot be decoded.
fn spells_model(near: &[u8], at: usize) -> bool {
    if json::is_escaped(near, at) {
        return false; // `\\u`: a backslash, then `u`
    }
    let unescaped_quote = |i: &usize| near[*i] == b'"' && !json::is_escaped(near, *i);
    let Some(open) = (at.saturating_sub(SPELLED + 1)..at)
        .rev()
        .find(unescaped_quote)
    else {
        return false;
    };
    let mut i = at;
    while i < near.len().min(open + SPELLED + 2) {
        match near[i] {
            b'\\' => i += 2,
            b'"' => {
                return json::decode_str(near, open..i + 1).map_or(true, |text| text == "model");
            }
            _ => i += 1,
        }
    }
    false
}

/// Whether the token ending at `after` in `near` is a key: a `:` follows it (also when only
/// whitespace is left of `near`).
fn is_key(near: &[u8], after: usize) -> bool {
    near.get(after..)
        .unwrap_or_default()
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_none_or(|&b| b == b':')
}

/// What [`find_model_in_chunks`] made of a body kept in chunks.
pub(crate) enum InChunks {
    /// `model`, read from the first chunk: the body goes on in its chunks.
    Read(ModelField),
    /// The body is to be joined and read as any other, with what was searched of it.
    Join(Searched),
}

/// [`rewrite_model`](super::rewrite_model) of a body kept in chunks whose first chunk holds
/// `field`: the literal's bytes replaced by a chunk of their own, every other byte shared
/// with the chunks as they came (none is copied). Returns the body and where the name now is.
pub(crate) fn rewrite_model_in_chunks(
    chunks: Chunks,
    field: &ModelField,
    model: &Arc<str>,
) -> (Chunks, WrittenModel) {
    let written = |len: usize| WrittenModel {
        span: field.span.start..field.span.start + len,
        value: model.clone(),
    };
    let first = chunks.iter().next().map_or(&[][..], |c| &c[..]);
    if field.names(first, model) {
        return (chunks, written(field.span.len()));
    }
    let mut len = field.span.len();
    let edited = chunks.edit_chunk(&field.span, |chunk, span| {
        let literal = json::splice_str(&chunk.slice(span.clone()), 0..span.len(), model).ok()?;
        len = literal.len();
        let pieces: SmallVec<[Bytes; 3]> =
            [chunk.slice(..span.start), literal, chunk.slice(span.end..)]
                .into_iter()
                .collect();
        Some(pieces)
    });
    match edited {
        Some(edited) => (edited, written(len)),
        // The field is read from this body's first chunk: it holds the literal.
        None => (chunks, written(field.span.len())),
    }
}
