//! Reading and rewriting the top-level `model` of a JSON request body without touching any
//! other byte.
//!
//! The work is bounded by the start of the body, not by its size: the members of the top-level
//! object are read up to `model` and no further (clients send it first or nearly), and the
//! rewrite splices the new name into the buffered bytes, one copy at most and none when the
//! client already sent the target's name. A body the gateway joined from several chunks has
//! spare bytes in front ([`Buffered::Joined`]): there the new name is written in place and only
//! the bytes before it move. Key order, number formatting and unknown fields reach the provider
//! exactly as the client sent them.
//!
//! What is validated is what is read: the bytes up to the end of the `model` value, and that
//! the body ends with `}` (a cut body is refused here). A body malformed elsewhere after
//! `model` is forwarded, and the provider refuses it.
//!
//! A second top-level `model` is refused, as it must be: the first one routes the request and
//! decides what the client may use, while a provider may serve the last one. The rest of the
//! body is only searched (one SIMD pass) for the text `"model"` and for `\u006`, the start of
//! the escape of each letter of `model` (a key can spell it with them); each one found is read
//! where it stands (`repeat`), and only a body where one may be a second top-level key is
//! parsed whole, which refuses it.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use context_relay_core::json::{self, JsonError, Kind};
use context_relay_core::session::BODY_ID_LITERALS;

use crate::chunks::Chunks;
use crate::collect::{Buffered, HEADROOM};

mod kept;
mod repeat;

pub(crate) use kept::{InChunks, find_model_in_chunks, rewrite_model_in_chunks};

/// Why no model could be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ModelError {
    /// The body is not a JSON object.
    #[error("expected a JSON object as request body, found {0}")]
    NotJson(String),
    /// The object has no `model` key.
    #[error("expected a \"model\" field in the request body, found none")]
    Missing,
    /// `model` is not a non-empty string.
    #[error("expected \"model\" to be a non-empty string, found {0}")]
    NotString(String),
}

/// The `model` value of a body and where its JSON text sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelField {
    /// The decoded string when the literal has escapes; `None` when the name stands in the
    /// body as it is, between the literal's quotes (read there, not copied).
    decoded: Option<String>,
    /// Byte range of the JSON string literal (quotes included).
    pub span: Range<usize>,
}

impl ModelField {
    /// The model's name. `body`: the body this field was found in (a name read from
    /// another body is empty, and never matches a route).
    pub(crate) fn value<'a>(&'a self, body: &'a [u8]) -> &'a str {
        match &self.decoded {
            Some(name) => name,
            None => body
                .get(self.span.start + 1..self.span.end.saturating_sub(1))
                .and_then(|raw| std::str::from_utf8(raw).ok())
                .unwrap_or(""),
        }
    }

    /// Whether the name is `model` (`value(body) == model`), compared as bytes: bytes equal
    /// to a `str` are UTF-8, so the name is not validated again.
    pub(crate) fn names(&self, body: &[u8], model: &str) -> bool {
        match &self.decoded {
            Some(name) => name == model,
            // An empty name is also what `value` gives for a span that holds none.
            None if model.is_empty() => self.value(body).is_empty(),
            None => {
                body.get(self.span.start + 1..self.span.end.saturating_sub(1))
                    == Some(model.as_bytes())
            }
        }
    }
}

/// The literals ComboService looks for in one pass over a request body
/// ([`Needles::find_all`](json::Needles::find_all)): those that may make a second top-level
/// `model` (see [`find_model_in`]) and the session-id keys the session reading looks for
/// ([`BODY_ID_LITERALS`]). One pass for both costs about what the `model` search alone did
/// (the perf harness's 100 KB body: 3.8 µs, against 4.0 µs for `model` and 5.5 µs more for
/// the session-id keys). The pass looks for the literals' first two bytes (`"m`, `\u`, `"p`)
/// and checks the rest where they occur ([`json::Needles::with_packed_prefix`]): they are rare
/// in a request body, and the packed search reads faster for short literals.
pub(crate) static BODY_LITERALS: LazyLock<json::Needles> = LazyLock::new(|| {
    json::Needles::with_packed_prefix(
        &[
            MAY_REPEAT[0],
            MAY_REPEAT[1],
            BODY_ID_LITERALS[0],
            BODY_ID_LITERALS[1],
        ],
        2,
    )
});

/// The literals of [`BODY_LITERALS`] that the `model` check needs ([`MAY_REPEAT`]): the pass
/// over a body whose session is named in its head, where the body's session ids are not read
/// (the head wins over the body). The two are packed by their first two bytes, a quote and
/// `m`, a backslash and `u`: one pass over a large body instead of two `memchr` passes (on the
/// perf harness's 1 MiB `xl` body 37 µs against 57 µs; see [`json::Needles`]).
pub(crate) static MODEL_LITERALS: LazyLock<json::Needles> =
    LazyLock::new(|| json::Needles::with_packed_prefix(&MAY_REPEAT, 2));

/// How many occurrences [`BODY_LITERALS`] records before it leaves the rest of the body to its
/// readers' own searches. Each `model` after the first is read where it stands, for a few
/// dozen bytes, and a long agent session may name one in every sub-agent call; past the cap
/// (a body made of `"model"` tokens or of escaped letters) the `model` check parses the body
/// whole instead, without reading any of them.
pub(crate) const BODY_LITERALS_CAP: usize = 256;

/// The literals after the first `model` that may make a second one: the token `"model"`, and
/// the start of a `\u` escape that can spell one of its letters in a key (`m`, `o`, `d`, `e`
/// and `l` are `\u006d`, `\u006f`, `\u0064`, `\u0065` and `\u006c`; the short escapes
/// stand for none of them). Text outside ASCII, which a client may escape (`\u00e9`,
/// `\u2713`), and the control characters of terminal output (`\u001b`) are not searched for.
const MAY_REPEAT: [&[u8]; 2] = [b"\"model\"", b"\\u006"];

/// Finds the first top-level `model` string of `body`, reading the body up to the end of that
/// value only (a body without one is read, and validated, whole).
pub(crate) fn find_model(body: &[u8]) -> Result<ModelField, ModelError> {
    read_model(body, Literals::Ignore).map(|(field, _)| field)
}

/// [`find_model`], which also records where [`BODY_LITERALS`] occur in `body` (the pass that
/// looks for a second `model` finds them all), for the session reading to use. `searched`:
/// that pass as far as it was made while the body arrived (it may look for fewer literals:
/// [`MODEL_LITERALS`]); a body refused before the pass (not JSON, no `model`, not closed) is
/// not searched at all.
pub(crate) fn find_model_and_literals(
    body: &[u8],
    searched: Searched,
) -> Result<(ModelField, Option<json::Found<'static>>), ModelError> {
    read_model(body, Literals::Record(searched))
}

/// How much of the pass for [`BODY_LITERALS`] (or [`MODEL_LITERALS`]) was made over a body
/// while it arrived.
#[derive(Debug)]
pub(crate) enum Searched {
    /// None of it: the body came in one chunk.
    Not,
    /// Up to its last few bytes: a body joined from its chunks.
    Partly(json::Pieces<'static>),
    /// All of it: a body kept in its chunks, joined after all.
    Done(json::Found<'static>),
}

/// What [`read_model`] does about [`BODY_LITERALS`].
enum Literals {
    /// Nothing: only the `model` is wanted.
    Ignore,
    /// Records them: searches the body, or completes the search made as it arrived.
    Record(Searched),
}

fn read_model(
    body: &[u8],
    literals: Literals,
) -> Result<(ModelField, Option<json::Found<'static>>), ModelError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ModelError::NotJson("an empty body".into()));
    }
    let field = json::find_member(body, "model")
        .map_err(|e| match e {
            JsonError::WrongKind { found, .. } => {
                ModelError::NotJson(format!("{} instead of an object", found.described()))
            }
            e => ModelError::NotJson(format!("invalid JSON ({e})")),
        })?
        .ok_or(ModelError::Missing)?;
    // A cut body (the common malformed one) is told at no cost: an object ends with `}`.
    let last = body.iter().rev().find(|b| !b.is_ascii_whitespace());
    if last != Some(&b'}') {
        return Err(ModelError::NotJson(
            "invalid JSON (the object is not closed)".into(),
        ));
    }
    let span = field.value;
    let found = match literals {
        Literals::Ignore => None,
        Literals::Record(Searched::Partly(searched)) => Some(searched.finish(body)),
        Literals::Record(Searched::Done(found)) => Some(found),
        Literals::Record(Searched::Not) => Some(BODY_LITERALS.find_all(body, BODY_LITERALS_CAP)),
    };
    if may_repeat(body, span.end, found.as_ref()) {
        // Duplicate keys are ambiguous: providers disagree on which one wins.
        let invalid =
            |e: &dyn std::fmt::Display| ModelError::NotJson(format!("invalid JSON ({e})"));
        let object = json::parse_object(body).map_err(|e| invalid(&e))?;
        object.unique("model").map_err(|e| invalid(&e))?;
    }
    Ok((string_field(body, span)?, found))
}

/// The field of the `model` value at `span` of `body`: a non-empty string.
fn string_field(body: &[u8], span: Range<usize>) -> Result<ModelField, ModelError> {
    let not_string =
        || ModelError::NotString(truncate(&String::from_utf8_lossy(&body[span.clone()])));
    if Kind::of(body, &span) != Some(Kind::String) {
        return Err(not_string());
    }
    match json::decode_str(body, span.clone()) {
        Ok(v) if !v.trim().is_empty() => Ok(ModelField {
            decoded: match v {
                Cow::Borrowed(_) => None,
                Cow::Owned(name) => Some(name),
            },
            span,
        }),
        _ => Err(not_string()),
    }
}

/// Whether the body after the first `model` value (which ends at `from`) may hold a second
/// top-level `model` ([`repeat::may_follow`]), from the occurrences of [`MAY_REPEAT`] `found`
/// recorded, or searched for here.
fn may_repeat(body: &[u8], from: usize, found: Option<&json::Found<'_>>) -> bool {
    let bytes_in = |r: Range<usize>| Cow::Borrowed(body.get(r).unwrap_or_default());
    if let Some(found) = found {
        let next = |at| found.next_of(&MAY_REPEAT, at).map_err(drop);
        return repeat::may_follow(body.len(), bytes_in, next, from);
    }
    // Positions counted from `from`.
    let rest = MODEL_LITERALS.find_all(body.get(from..).unwrap_or_default(), BODY_LITERALS_CAP);
    let next = |at: usize| {
        let next = rest.next_of(&MAY_REPEAT, at.saturating_sub(from));
        next.map(|n| n.map(|i| i + from)).map_err(drop)
    };
    repeat::may_follow(body.len(), bytes_in, next, from)
}

/// `body` with the string at `field.span` replaced by the JSON string `model` (the same
/// `Bytes`, not copied, when it already names `model`); `None` when the span is not a string
/// of `body` (a field found in another body).
pub(crate) fn replace_model(body: &Bytes, field: &ModelField, model: &str) -> Option<Bytes> {
    if field.names(body, model) {
        return Some(body.clone());
    }
    // The field was read from this body and names another model: its literal is written over
    // without being decoded again.
    let span = field.span.clone();
    quoted(body, &span)
        .then(|| json::write_str(body, span, model))
        .flatten()
}

/// Whether `span` lies within `bytes` with a quote at each end: how a field read from one body
/// is told to be a string literal of the body about to be written (a field of another body
/// is not written over).
fn quoted(bytes: &[u8], span: &Range<usize>) -> bool {
    span.len() >= 2
        && bytes.get(span.start) == Some(&b'"')
        && bytes.get(span.end - 1) == Some(&b'"')
}

/// Where ComboService wrote `model` into the body it forwards, and the name it wrote. Carried
/// in [`RouteTargets`](crate::combo::RouteTargets): the account resolver gives a later target
/// its model from it, so the body is searched for `model` once per request, by ComboService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrittenModel {
    /// Byte range of the string literal in the forwarded body (quotes included).
    span: Range<usize>,
    /// The name written there.
    value: Arc<str>,
}

impl WrittenModel {
    /// The body for a target named `model`: `body` itself (not copied) when it already names
    /// it, else `body` with the literal at the known place replaced (the chunk that holds it
    /// copied: the whole body, as a rule; the literal alone in a body kept in chunks). `None`
    /// when that place holds no string literal of `body` (a body changed since it was written).
    pub(crate) fn retarget(&self, body: &Chunks, model: &str) -> Option<Chunks> {
        if *self.value == *model {
            return Some(body.clone());
        }
        body.edit_chunk(&self.span, |chunk, span| {
            let spliced = json::splice_str(chunk, span, model).ok()?;
            Some(std::iter::once(spliced).collect())
        })
    }
}

/// [`replace_model`] on a body as the gateway read it, consuming it: a joined body is
/// rewritten in place when the new name fits in the spare bytes, so that only the bytes before
/// `model` move; otherwise the body is copied once, as by [`replace_model`]. Returns the body
/// and where the name now is.
pub(crate) fn rewrite_model(
    body: Buffered,
    field: &ModelField,
    model: &Arc<str>,
) -> (Bytes, WrittenModel) {
    let before = body.as_slice().len();
    let out = rewrite(body, field, model);
    // Every byte after the literal is kept, so its end is as far from the body's end as it was;
    // the bytes before it are kept too, so it starts where it did.
    let span = field.span.start
        ..out
            .len()
            .saturating_sub(before.saturating_sub(field.span.end));
    let written = WrittenModel {
        span,
        // The route's own name, shared: no copy per request.
        value: model.clone(),
    };
    (out, written)
}

fn rewrite(body: Buffered, field: &ModelField, model: &str) -> Bytes {
    let renamed = !field.names(body.as_slice(), model);
    let buf = match body {
        Buffered::Joined(buf) if renamed => buf,
        other => {
            let bytes = other.into_bytes();
            return replace_model(&bytes, field, model).unwrap_or(bytes);
        }
    };
    let (start, end) = (HEADROOM + field.span.start, HEADROOM + field.span.end);
    // Serialising a `str` does not fail; were it to, the copy below is made instead.
    let literal = serde_json::to_string(model).unwrap_or_default();
    // The new literal ends where the old one did; what precedes it moves left or right by the
    // difference in length.
    let Some(from) = (end.checked_sub(literal.len()))
        .and_then(|at| at.checked_sub(field.span.start))
        .filter(|_| {
            // The span is a string literal of this body, and the new one is one.
            !literal.is_empty() && quoted(&buf, &(start..end))
        })
    else {
        let bytes = Buffered::Joined(buf).into_bytes();
        return replace_model(&bytes, field, model).unwrap_or(bytes);
    };
    let mut buf = buf;
    buf.copy_within(HEADROOM..start, from);
    let at = end - literal.len();
    buf[at..end].copy_from_slice(literal.as_bytes());
    Bytes::from(buf).slice(from..)
}

fn truncate(text: &str) -> String {
    let mut s: String = text.chars().take(60).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests;
