//! The members of a container read from its structure alone: brackets, strings, and the
//! commas and colons between them, without validating or decoding the values.
//!
//! The rest of this crate validates what it reads. A reader that wants one or two members of a
//! small document it does not forward (the usage object of a provider's answer, read to count
//! tokens) can skip that: stepping over a member by its structure costs a fraction of
//! validating it, on short keys and values where the vector scans do not pay for their set-up.
//! What is still checked is the structure: the container opens where expected, every bracket
//! closes its own kind in order, strings close, nesting stays within the caller's depth, and
//! only whitespace follows. Anything else between the brackets (a bad number, a missing comma,
//! a raw control byte or bad UTF-8 in a string) is not looked at, and a caller reads the values
//! it wants with its own checks.
//!
//! ```
//! use context_relay_json::{skim_array, skim_object};
//!
//! let body = br#"{"id": "x", "us\u0061ge": {"n": 1}, "choices": [1,,2]}"#;
//! let mut seen = Vec::new();
//! assert!(skim_object(body, 64, |key, value| seen.push((key.into_owned(), value))));
//! assert_eq!(seen[1].0, b"usage");
//! assert_eq!(&body[seen[1].1.clone()], br#"{"n": 1}"#);
//! assert!(!skim_object(br#"{"a": [1}]"#, 64, |_, _| {}));
//! assert!(!skim_object(br#"{"a": 1} x"#, 64, |_, _| {}));
//!
//! let mut items = 0;
//! assert!(skim_array(b"[{}, [], 3]", 64, |_| items += 1));
//! assert_eq!(items, 3);
//! ```

use std::borrow::Cow;

use super::Span;
use super::scan::{decode_string, skip_ws};

/// Deepest nesting a skim can follow; a caller's limit above it is lowered to it.
pub const SKIM_MAX_DEPTH: usize = 128;

/// Calls `member` with the key (decoded when it holds an escape; a key that does not decode
/// is empty) and the span of the value (whitespace trimmed) of each member of the object
/// `json` holds, in order. False when `json` is not one object by its structure (see the
/// module docs) or nests deeper than `max_depth` containers, the outermost counted.
pub fn skim_object(json: &[u8], max_depth: usize, member: impl FnMut(Cow<'_, [u8]>, Span)) -> bool {
    skim(json, true, max_depth, member)
}

/// Calls `item` with the span of each item of the array `json` holds, in order; false as for
/// [`skim_object`].
pub fn skim_array(json: &[u8], max_depth: usize, mut item: impl FnMut(Span)) -> bool {
    skim(json, false, max_depth, |_, span| item(span))
}

fn skim(
    json: &[u8],
    object: bool,
    max_depth: usize,
    mut member: impl FnMut(Cow<'_, [u8]>, Span),
) -> bool {
    let start = skip_ws(json, 0);
    if json.get(start) != Some(if object { &b'{' } else { &b'[' }) {
        return false;
    }
    let max_depth = max_depth.min(SKIM_MAX_DEPTH);
    let mut depth = 0usize;
    // Bit `d`: whether the container opened at depth `d` is an array, so that each closing
    // bracket is checked against its opening one.
    // Two words rather than a `u128`, whose shifts by a variable amount cost several
    // instructions each; `depth` stays below `SKIM_MAX_DEPTH` (128), so the word is 0 or 1.
    let mut arrays = [0u64; 2];
    // The member being read at depth 1: its key (in an object), then where its value starts.
    let mut key: Span = 0..0;
    let mut key_escaped = false;
    let mut value_start: Option<usize> = None;
    let mut emit = |key: &Span, escaped: bool, from: usize, to: usize| {
        let from = skip_ws(json, from);
        let to = trim_end(json, from, to);
        if !object && from == to {
            return;
        }
        let name = if escaped {
            // The span of the key with its quotes.
            match decode_string(json, key.start - 1..key.end + 1) {
                Ok(text) => Cow::Owned(text.into_owned().into_bytes()),
                Err(_) => Cow::Borrowed(&[][..]),
            }
        } else {
            Cow::Borrowed(&json[key.clone()])
        };
        member(name, from..to);
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
                if depth == max_depth {
                    return false;
                }
                let (word, bit) = (depth / 64, depth % 64);
                arrays[word] = (arrays[word] & !(1 << bit)) | (u64::from(b == b'[') << bit);
                depth += 1;
                if depth == 1 && !object {
                    value_start = Some(i + 1);
                }
            }
            b @ (b'}' | b']') => {
                let Some(d) = depth.checked_sub(1) else {
                    return false;
                };
                if (arrays[d / 64] >> (d % 64)) & 1 != u64::from(b == b']') {
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

/// The offset of the quote that closes the string whose text starts at `from`, and whether
/// the string holds an escape.
///
/// Eight bytes at a time, looking for a quote or a backslash in each word at once (the usual
/// bit trick for a zero byte: the lowest flagged byte is always a true one); most strings of
/// an answer are keys and short values, for which `memchr`'s vector set-up costs more.
pub(crate) fn string_end(json: &[u8], from: usize) -> Option<(usize, bool)> {
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

fn trim_end(json: &[u8], start: usize, mut end: usize) -> usize {
    while end > start && matches!(json[end - 1], b' ' | b'\n' | b'\r' | b'\t') {
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

    proptest! {
        /// Any bytes after an opening bracket: an answer, never a panic, and every span
        /// handed out lies inside the input.
        #[test]
        fn any_bytes_are_skimmed_without_panic(
            tail in prop::collection::vec(
                prop::sample::select(b"{}[]\":,\\ a1".to_vec()),
                0..64,
            ),
            array in any::<bool>(),
            depth in 0usize..6,
        ) {
            let mut body = vec![if array { b'[' } else { b'{' }];
            body.extend(tail);
            let len = body.len();
            let mut inside = true;
            let mut check = |span: Span| inside &= span.start <= span.end && span.end <= len;
            if array {
                skim_array(&body, depth, &mut check);
            } else {
                skim_object(&body, depth, |_, span| check(span));
            }
            prop_assert!(inside);
        }
    }

    proptest! {
        /// Nestings of up to the deepest a skim follows, objects and arrays mixed: a closing
        /// bracket of the wrong kind at any depth (across the bitset's two words too) is
        /// refused, the right ones accepted.
        #[test]
        fn every_closing_bracket_is_checked_at_any_depth(
            arrays in prop::collection::vec(any::<bool>(), 0..SKIM_MAX_DEPTH),
            flip in any::<prop::sample::Index>(),
        ) {
            // The outermost container is an object; `arrays[d]` says what opens at depth d + 1.
            let kinds: Vec<bool> = std::iter::once(false).chain(arrays).collect();
            let mut body = String::new();
            for &array in &kinds {
                body.push_str(if array { "[" } else { "{\"k\":" });
            }
            body.push('1');
            let close = |&array: &bool| if array { ']' } else { '}' };
            let closing: Vec<char> = kinds.iter().rev().map(close).collect();
            let whole: String = body.chars().chain(closing.iter().copied()).collect();
            let skims = |json: &str| skim_object(json.as_bytes(), SKIM_MAX_DEPTH, |_, _| ());
            prop_assert!(skims(&whole), "refused: {}", whole);
            let mut wrong = closing.clone();
            let at = flip.index(wrong.len());
            wrong[at] = if wrong[at] == ']' { '}' } else { ']' };
            let broken: String = body.chars().chain(wrong).collect();
            prop_assert!(!skims(&broken), "accepted: {}", broken);
        }
    }

    #[test]
    fn the_structure_is_checked_and_nothing_else() {
        let skims = |body: &[u8], depth: usize| skim_object(body, depth, |_, _| {});
        assert!(skims(br#"{"a": [1,,oops], "b": {"c": tru}}"#, 8));
        for broken in [
            &br#"{"a": [1}]"#[..],
            br#"{"a": 1]"#,
            br#"{"a": "open}"#,
            br#"{"a": 1} x"#,
            br#"{"a": 1}}"#,
            br#"["a"]"#,
            b"",
        ] {
            assert!(!skims(broken, 8), "{}", String::from_utf8_lossy(broken));
        }
        assert!(skims(br#"{"a": [[1]]}"#, 3));
        assert!(!skims(br#"{"a": [[1]]}"#, 2));
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(!skim_object(deep.as_bytes(), usize::MAX, |_, _| {}));
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
