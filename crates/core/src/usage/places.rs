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
//! Every other member is stepped over string by string, not parsed: on the 1 KB Chat answer of
//! the perf harness the read costs about three quarters of serde's pass (4 900 against 6 600
//! instructions) and allocates nothing (serde's skipping of `choices` took a buffer for its
//! nesting). Only the structure is checked: a body that does not open with `{` (or, for
//! [`whole_body`], `[`), whose brackets do not close in order, nests deeper than 127
//! containers, is cut inside a string or has bytes after its end reports nothing. Bytes between
//! the brackets that are not JSON (a bad number, a missing comma) are not looked at, and a
//! count is a member whose value is an unsigned integer that fits in a `u64`, as
//! `serde_json::Value::as_u64` reads one (no sign, fraction or exponent).

use std::borrow::Cow;
use std::ops::Range;

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
    fn merge_into(self, seen: &mut Raw) {
        for raw in [self.message, self.response, self.usage, self.metadata]
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
    let start = skip_ws(body, 0);
    if body.get(start) != Some(&b'[') {
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
        seen.merge(read);
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
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Deepest nesting read, that of `serde_json`'s default recursion limit (127 containers, the
/// outermost counted): a body nested deeper reports nothing.
const MAX_DEPTH: u32 = 127;

/// Calls `member` with the key (decoded; empty in an array) and the value span of each member
/// of the object or array `json` holds (`open`: `{` or `[`), in order. False when `json` is not
/// one such container: it opens otherwise, a bracket or a string never closes, or bytes other
/// than whitespace follow it.
fn members(json: &[u8], open: u8, mut member: impl FnMut(Cow<'_, [u8]>, Range<usize>)) -> bool {
    let start = skip_ws(json, 0);
    if json.get(start) != Some(&open) {
        return false;
    }
    let object = open == b'{';
    let mut depth = 0u32;
    let mut arrays = 0u128;
    // The member being read at depth 1: its key (in an object), then where its value starts.
    let mut key: Range<usize> = 0..0;
    let mut key_escaped = false;
    let mut value_start: Option<usize> = None;
    let mut emit = |key: &Range<usize>, escaped: bool, from: usize, to: usize| {
        let from = skip_ws(json, from);
        let to = trim_end(json, from, to);
        let key = &json[key.clone()];
        if object || from < to {
            member(
                if escaped {
                    unescaped(key)
                } else {
                    Cow::Borrowed(key)
                },
                from..to,
            );
        }
    };
    let mut i = start;
    while i < json.len() {
        match json[i] {
            b'"' => {
                let Some((end, escaped)) = string_end(json, i + 1) else {
                    return false;
                };
                if depth == 1 && object && value_start.is_none() {
                    key = i + 1..end;
                    key_escaped = escaped;
                }
                i = end;
            }
            b':' if depth == 1 && object => value_start = Some(i + 1),
            b',' if depth == 1 => {
                if let Some(from) = value_start.take() {
                    emit(&key, key_escaped, from, i);
                }
                // A member without a key of its own (not JSON) is given no earlier one.
                (key, key_escaped) = (0..0, false);
                if !object {
                    value_start = Some(i + 1);
                }
            }
            b @ (b'{' | b'[') => {
                if depth == MAX_DEPTH {
                    return false;
                }
                // Bit `depth` of `arrays`: whether the container opened at that depth is an
                // array, so that each closing bracket is checked against its opening one.
                arrays = (arrays & !(1 << depth)) | (u128::from(b == b'[') << depth);
                depth += 1;
                if depth == 1 && !object {
                    value_start = Some(i + 1);
                }
            }
            b @ (b'}' | b']') => {
                let Some(d) = depth.checked_sub(1) else {
                    return false;
                };
                if (arrays >> d) & 1 != u128::from(b == b']') {
                    return false;
                }
                depth = d;
                if depth == 0 {
                    if let Some(from) = value_start.take() {
                        emit(&key, key_escaped, from, i);
                    }
                    return skip_ws(json, i + 1) == json.len();
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// The text (between its quotes) of a key that holds an escape, decoded.
fn unescaped(key: &[u8]) -> Cow<'_, [u8]> {
    let mut quoted = Vec::with_capacity(key.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(key);
    quoted.push(b'"');
    match serde_json::from_slice::<String>(&quoted) {
        Ok(text) => Cow::Owned(text.into_bytes()),
        // Not a JSON string: it names no member looked for.
        Err(_) => Cow::Borrowed(&[]),
    }
}

/// The offset of the quote that closes the string whose text starts at `from`, and whether
/// the string holds an escape.
///
/// Eight bytes at a time, looking for a quote or a backslash in each word at once (the usual
/// bit trick for a zero byte: the lowest flagged byte is always a true one); most strings of
/// an answer are keys and short values, for which `memchr`'s vector set-up costs more.
fn string_end(json: &[u8], from: usize) -> Option<(usize, bool)> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = ONES << 7;
    const QUOTES: u64 = ONES * b'"' as u64;
    const BACKSLASHES: u64 = ONES * b'\\' as u64;
    let mut i = from;
    let mut escaped = false;
    loop {
        while let Some(word) = json.get(i..i + 8) {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(word);
            let x = u64::from_le_bytes(bytes);
            let (q, b) = (x ^ QUOTES, x ^ BACKSLASHES);
            let flagged = ((q.wrapping_sub(ONES) & !q) | (b.wrapping_sub(ONES) & !b)) & HIGHS;
            if flagged != 0 {
                i += flagged.trailing_zeros() as usize / 8;
                break;
            }
            i += 8;
        }
        match json.get(i)? {
            b'"' => return Some((i, escaped)),
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => i += 1,
        }
    }
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

fn trim_end(json: &[u8], start: usize, mut end: usize) -> usize {
    while end > start && json[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Byte by byte, as the scan had it before reading words.
    fn string_end_bytewise(json: &[u8], from: usize) -> Option<(usize, bool)> {
        let (mut escaped, mut after_backslash) = (false, false);
        for (at, &byte) in json.iter().enumerate().skip(from) {
            if after_backslash {
                after_backslash = false;
            } else if byte == b'\\' {
                (escaped, after_backslash) = (true, true);
            } else if byte == b'"' {
                return Some((at, escaped));
            }
        }
        None
    }

    proptest! {
        /// Reading words finds the quote that reading bytes finds, wherever the quotes and
        /// backslashes stand against the word boundaries.
        #[test]
        fn strings_end_where_a_byte_by_byte_read_ends_them(
            bytes in prop::collection::vec(
                prop::sample::select(vec![b'a', b'"', b'\\', 0xC3, 0xA9, 0x80, 0xFF, 0x00, b' ']),
                0..80,
            ),
            from in 0usize..90,
        ) {
            prop_assert_eq!(string_end(&bytes, from), string_end_bytewise(&bytes, from));
        }
    }

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

    #[test]
    fn strings_end_at_their_closing_quote_past_escapes() {
        let long = format!("\"{}\\\"{}\" tail", "a".repeat(40), "b".repeat(40));
        assert_eq!(string_end(long.as_bytes(), 1), Some((long.len() - 6, true)));
        assert_eq!(string_end(br#""a\\" x"#, 1), Some((4, true)));
        assert_eq!(
            string_end(br#""plain text, past a word" x"#, 1),
            Some((24, false))
        );
        assert_eq!(string_end(br#""a\"#, 1), None);
        assert_eq!(string_end(br#""open"#, 1), None);
    }
}
