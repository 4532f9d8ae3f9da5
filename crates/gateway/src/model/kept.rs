//! `model` of a body kept in the chunks it came in (see [`chunks`](crate::chunks)): read from
//! its first chunk, and written by replacing the bytes of its literal alone.

use std::sync::Arc;

use bytes::Bytes;
use context_relay_core::json;
use smallvec::SmallVec;

use super::{MAY_REPEAT, ModelField, Searched, WrittenModel, repeat, string_field};
use crate::chunks::Chunks;

/// The `model` of a body kept in chunks, every chunk of which `searched` was given as it
/// arrived (for [`MODEL_LITERALS`](super::MODEL_LITERALS) at least): read as
/// [`find_model`](super::find_model) reads it, when it stands whole in the first chunk.
/// Otherwise, when the body is anything but a clean read there (not an object, not closed,
/// `model` no string), or when a second top-level `model` may follow (an occurrence of
/// [`MAY_REPEAT`] after it may be one, see [`repeat`]), the body is to be joined and read as
/// any other, which answers the same and says what is wrong: the search comes back for that
/// reading.
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
    let next = |at| found.next_of(&MAY_REPEAT, at).map_err(drop);
    if repeat::may_follow(chunks.len(), |r| chunks.bytes_in(r), next, member.value.end) {
        return InChunks::Join(Searched::Done(found));
    }
    match string_field(first, member.value) {
        Ok(field) => InChunks::Read(field),
        Err(_) => InChunks::Join(Searched::Done(found)),
    }
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
