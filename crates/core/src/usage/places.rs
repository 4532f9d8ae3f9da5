//! Where usage sits in a body or an event, and its counts, read from the JSON's structure:
//! brackets, strings, and the commas and colons between them. Nothing is decoded but the keys
//! of the members looked at and the counts.
//!
//! A carrier is a JSON object; its usage objects sit in `usage` (Chat, Responses and Anthropic
//! bodies, Chat's last chunk, Anthropic's `message_delta`), `message.usage` (Anthropic's
//! `message_start`), `response.usage` (Responses stream events) and `usageMetadata` or
//! `usage_metadata` (Gemini). A repeated member counts once, the last one, as a JSON reader
//! that keeps the last of repeated keys reads it; a key spelled with `\u` escapes is the key
//! it spells.
//!
//! Every other member is stepped over by its structure, not parsed
//! ([`context_relay_json::skim_object`]): on the 1 KB Chat answer of the perf harness the read
//! costs about three quarters of serde's pass (4 900 against 6 600 instructions) and allocates
//! nothing (serde's skipping of `choices` took a buffer for its nesting). Only the structure is
//! checked: a body that does not open with `{` (or, for [`whole_body`], `[`), whose brackets do
//! not close in order, nests deeper than 127 containers (`serde_json`'s limit), is cut inside
//! a string or has bytes after its end reports nothing. Bytes between the brackets that are not
//! JSON (a bad number, a missing comma) are not looked at, and a count is a member whose value
//! is an unsigned integer that fits in a `u64`, as `serde_json::Value::as_u64` reads one (no
//! sign, fraction or exponent).

use std::borrow::Cow;

use context_relay_json::{Span, skim_array, skim_object};

use super::raw::Raw;

/// The usage objects of one carrier, by place.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Places {
    message: Option<Raw>,
    response: Option<Raw>,
    usage: Option<Raw>,
    metadata: Option<Raw>,
}

impl Places {
    /// Read in place: the four places together are some 800 bytes, which a by-value array
    /// of them copied for every answer.
    fn merge_into(&self, seen: &mut Raw) {
        for raw in [&self.message, &self.response, &self.usage, &self.metadata]
            .into_iter()
            .flatten()
        {
            seen.merge(raw);
        }
    }
}

/// Reads the usage objects of the carrier `json` (an SSE event's data) into `seen`; nothing
/// when `json` is no object or its structure does not close.
pub(super) fn read_carrier(json: &[u8], seen: &mut Raw) {
    if let Some(places) = carrier(json) {
        places.merge_into(seen);
    }
}

/// Reads every carrier of a whole JSON body (an object, or an array of them: Gemini's stream
/// without SSE) into `seen`; nothing when the body, or one of its items, is no carrier.
pub(super) fn whole_body(body: &[u8], seen: &mut Raw) {
    if body.trim_ascii_start().first() != Some(&b'[') {
        read_carrier(body, seen);
        return;
    }
    let mut read = Raw::default();
    let mut all = true;
    let closed = members(body, b'[', |_, value| match carrier(&body[value]) {
        Some(places) => places.merge_into(&mut read),
        None => all = false,
    });
    if closed && all {
        seen.merge(&read);
    }
}

/// The usage objects of the object `json`.
fn carrier(json: &[u8]) -> Option<Places> {
    let mut places = Places::default();
    let mut whole = true;
    let closed = members(json, b'{', |key, value| {
        let value = &json[value];
        let (slot, read) = match &*key {
            b"usage" => (&mut places.usage, counts(value)),
            b"usageMetadata" | b"usage_metadata" => (&mut places.metadata, counts(value)),
            b"message" => (&mut places.message, nested_usage(value)),
            b"response" => (&mut places.response, nested_usage(value)),
            _ => return,
        };
        match read {
            Some(raw) => *slot = raw,
            None => whole = false,
        }
    });
    (closed && whole).then_some(places)
}

/// The `usage` member of `value` when it is an object (the last one, read as counts);
/// `Some(None)` for a value of another kind or an object without it, `None` when its structure
/// does not close.
fn nested_usage(value: &[u8]) -> Option<Option<Raw>> {
    if value.first() != Some(&b'{') {
        return Some(None);
    }
    let mut found = Some(None);
    let closed = members(value, b'{', |key, inner| {
        if *key == *b"usage" {
            found = counts(&value[inner]);
        }
    });
    if closed { found } else { None }
}

/// A usage object read into its counts (what `Raw::of` reads from its `Value`): `Some(None)`
/// for a value of another kind, `None` when its structure does not close.
pub(super) fn counts(value: &[u8]) -> Option<Option<Raw>> {
    if value.first() != Some(&b'{') {
        return Some(None);
    }
    let mut raw = Raw::default();
    // Chat's details win over Responses' whatever their order, as in `Raw::of`.
    let (mut prompt_details, mut input_details) = (None, None);
    let (mut completion_details, mut output_details) = (None, None);
    let mut whole = true;
    let closed = members(value, b'{', |key, span| {
        let value = &value[span];
        let (slot, detail) = match &*key {
            b"prompt_tokens" => (&mut raw.prompt, None),
            b"completion_tokens" => (&mut raw.completion, None),
            b"input_tokens" => (&mut raw.input, None),
            b"output_tokens" => (&mut raw.output, None),
            b"cache_read_input_tokens" => (&mut raw.cache_read, None),
            b"cache_creation_input_tokens" => (&mut raw.cache_creation, None),
            b"promptTokenCount" => (&mut raw.prompt_count, None),
            b"candidatesTokenCount" => (&mut raw.candidates_count, None),
            b"cachedContentTokenCount" => (&mut raw.cached_count, None),
            b"thoughtsTokenCount" => (&mut raw.thoughts_count, None),
            b"prompt_tokens_details" => (&mut prompt_details, Some(&b"cached_tokens"[..])),
            b"input_tokens_details" => (&mut input_details, Some(&b"cached_tokens"[..])),
            b"completion_tokens_details" => {
                (&mut completion_details, Some(&b"reasoning_tokens"[..]))
            }
            b"output_tokens_details" => (&mut output_details, Some(&b"reasoning_tokens"[..])),
            _ => return,
        };
        *slot = match detail {
            None => count(value),
            Some(name) => match detail_count(value, name) {
                Some(found) => found,
                None => {
                    whole = false;
                    None
                }
            },
        };
    });
    raw.cached = prompt_details.or(input_details);
    raw.reasoning = completion_details.or(output_details);
    (closed && whole).then_some(Some(raw))
}

/// The count `name` of the details object `value` (the last one); `Some(None)` when `value`
/// is no object or the count is absent or no count, `None` when its structure does not close.
fn detail_count(value: &[u8], name: &[u8]) -> Option<Option<u64>> {
    if value.first() != Some(&b'{') {
        return Some(None);
    }
    let mut found = None;
    let closed = members(value, b'{', |key, span| {
        if *key == *name {
            found = count(&value[span]);
        }
    });
    closed.then_some(found)
}

/// One count: an unsigned integer (digits only) that fits in a `u64`; `None` for any other
/// value.
fn count(value: &[u8]) -> Option<u64> {
    crate::digits::decimal_u64(value)
}

/// Deepest nesting read, that of `serde_json`'s default recursion limit (127 containers, the
/// outermost counted): a body nested deeper reports nothing.
const MAX_DEPTH: usize = 127;

/// [`skim_object`] to `serde_json`'s depth, for `{`, or [`skim_array`], for `[`.
fn members(json: &[u8], open: u8, mut member: impl FnMut(Cow<'_, [u8]>, Span)) -> bool {
    match open {
        b'{' => skim_object(json, MAX_DEPTH, member),
        _ => skim_array(json, MAX_DEPTH, |span| member(Cow::Borrowed(&[][..]), span)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_unsigned_integers_only() {
        for (text, expected) in [
            ("0", Some(0)),
            ("42", Some(42)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("-0", None),
            ("-3", None),
            ("1.0", None),
            ("1e3", None),
            ("\"7\"", None),
            ("null", None),
            ("[1]", None),
            ("", None),
        ] {
            assert_eq!(count(text.as_bytes()), expected, "{text}");
        }
    }
}
