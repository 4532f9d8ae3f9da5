//! Whether a second top-level `model` may follow the first, told from the occurrences of
//! [`MAY_REPEAT`] after it, each read where it stands rather than by reading the body.
//!
//! An occurrence matters only in a string that is `model` (the token `"model"`, or a string
//! short enough to spell it with `\u` escapes that does), and only as a key (a `:` after it)
//! at the top level. Whether it is nested is read backwards from the key to the bracket that
//! opens its object ([`json::enclosing`]): every Claude Code request names `model` in a tool's
//! schema, and sub-agent calls in its history may name one each; the bracket is a few bytes
//! back, where reading the body up to the key cost a 1 MiB turn about 160 µs. The stretches
//! read for one key are stepped over by the keys after it, so none is read again for a later
//! key. Only a body where one may be a second key is parsed whole, which refuses it.
//!
//! The answers are those of a reader of JSON: in a body that is not JSON an occurrence may be
//! misread, and such a body is refused by the provider (every byte after `model` is left to
//! it, see the [module docs](super)).

use std::borrow::Cow;
use std::ops::Range;

use context_relay_core::json;
use smallvec::SmallVec;

use super::MAY_REPEAT;

/// The token `"model"`, as [`MAY_REPEAT`] has it.
const MODEL: &[u8] = MAY_REPEAT[0];

/// The longest string that can spell `model`: five `\uXXXX` escapes.
const SPELLED: usize = 5 * 6;

/// How far around an occurrence its bytes are read: a string spelling `model` around a `\u`
/// escape, and the backslashes before its quotes.
const NEAR: usize = 2 * SPELLED + 4;

/// Whether a second top-level `model` may follow the first, whose value ends at `from`, in a
/// body of `len` bytes read by `bytes_in`: `next_of(at)` gives the first occurrence of
/// [`MAY_REPEAT`] at or after `at`, `Err` past what the search recorded (which answers yes:
/// a body dense with escaped letters is parsed whole rather than looked at in thousands of
/// places).
pub(super) fn may_follow<'b>(
    len: usize,
    bytes_in: impl Fn(Range<usize>) -> Cow<'b, [u8]>,
    mut next_of: impl FnMut(usize) -> Result<Option<usize>, ()>,
    from: usize,
) -> bool {
    // Past what the search recorded, the body is parsed whole whatever the occurrences say:
    // they are not read.
    if next_of(len).is_err() {
        return true;
    }
    let mut nested = Nested::default();
    let mut next = from;
    loop {
        let at = match next_of(next) {
            Ok(None) => return false,
            Ok(Some(at)) => at,
            Err(()) => return true,
        };
        next = at + 1;
        let start = at.saturating_sub(NEAR);
        let near = bytes_in(start..(at + NEAR).min(len));
        let here = at - start;
        // The string the occurrence is part of, as a span of `near`, when it may be `model`.
        let string = if near.get(here..here + 2) == Some(b"\\u") {
            match spelled_model(&near, here) {
                Some(string) => string,
                None => continue,
            }
        } else if json::is_escaped(&near, here) {
            continue; // the end of a longer string
        } else {
            here..here + MODEL.len()
        };
        if !is_key(&near, string.end) {
            continue;
        }
        let key = start + string.start..start + string.end;
        match nested.object_of(key.start, from, &bytes_in) {
            Some(open) => nested.keys.push(Key { key, open }),
            None => return true,
        }
    }
}

/// The nested `model` keys read so far, in the order of the body.
#[derive(Default)]
struct Nested {
    keys: SmallVec<[Key; 4]>,
}

/// A nested `model` key and the bracket that opens its object.
struct Key {
    key: Range<usize>,
    open: usize,
}

impl Nested {
    /// Where the object of the key at `key` opens, read backwards from it; `None` when it is
    /// the top-level object (that of the first `model`, which ends at `from`), or the reading
    /// fails. A key read before is stepped over with what was read for it: the stretch from
    /// its bracket to it holds no bracket left open, so none of it is read again.
    fn object_of<'b>(
        &self,
        key: usize,
        from: usize,
        bytes_in: &impl Fn(Range<usize>) -> Cow<'b, [u8]>,
    ) -> Option<usize> {
        let (mut end, mut inside) = (key, 0);
        for before in self.keys.iter().rev() {
            if before.key.end > end {
                continue; // in a stretch already stepped over
            }
            match enclosing_in(before.key.end..end, inside, bytes_in)? {
                json::Enclosing::At(at) => return Some(at),
                json::Enclosing::Outside(levels) => inside = levels,
            }
            // At that key, in its object: the same one, or one that holds it.
            match inside.checked_sub(1) {
                None => return Some(before.open),
                Some(levels) => (end, inside) = (before.open, levels),
            }
        }
        match enclosing_in(from..end, inside, bytes_in)? {
            json::Enclosing::At(at) => Some(at),
            json::Enclosing::Outside(_) => None,
        }
    }
}

/// The first window of a stretch read backwards ([`enclosing_in`]): a nested key's bracket is
/// a few dozen bytes back, as a rule.
const FIRST_WINDOW: usize = 256;

/// [`json::enclosing`] of the body's bytes at `stretch` (which starts and ends between tokens),
/// the bracket's position given in the body: read in windows that end where the stretch ends,
/// each twice as long as the one before, so that a bracket near the end is found without the
/// stretch before it being asked for (a stretch of a body kept in chunks is copied when it
/// spans two). A bracket found in a window is the stretch's; anything else is known once the
/// window is the whole stretch.
fn enclosing_in<'b>(
    stretch: Range<usize>,
    inside: usize,
    bytes_in: &impl Fn(Range<usize>) -> Cow<'b, [u8]>,
) -> Option<json::Enclosing> {
    let mut window = FIRST_WINDOW;
    loop {
        let start = stretch.end.saturating_sub(window).max(stretch.start);
        let read = json::enclosing(&bytes_in(start..stretch.end), inside);
        match read {
            Some(json::Enclosing::At(at)) => return Some(json::Enclosing::At(start + at)),
            _ if start == stretch.start => return read,
            _ => window = window.saturating_mul(2),
        }
    }
}

/// The string of `near` holding the `\u` at `at` (quotes included), when it is an escape in
/// a string that spells `model`, or may (a string that does not decode); `None` for a string
/// that does not, or is longer than any that does (its quotes are not within [`SPELLED`]
/// bytes of the escape).
fn spelled_model(near: &[u8], at: usize) -> Option<Range<usize>> {
    if json::is_escaped(near, at) {
        return None; // `\\u`: a backslash, then `u`
    }
    let unescaped_quote = |i: &usize| near[*i] == b'"' && !json::is_escaped(near, *i);
    let open = (at.saturating_sub(SPELLED + 1)..at)
        .rev()
        .find(unescaped_quote)?;
    let mut i = at;
    while i < near.len().min(open + SPELLED + 2) {
        match near[i] {
            b'\\' => i += 2,
            b'"' => {
                let spells = json::decode_str(near, open..i + 1).map_or(true, |t| t == "model");
                return spells.then_some(open..i + 1);
            }
            _ => i += 1,
        }
    }
    None
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::super::{
        BODY_LITERALS_CAP, Searched, find_model, find_model_and_literals, may_repeat,
    };
    use super::*;

    /// Keys as they stand in the body (JSON text): `model`, plain or spelt, and others that
    /// hold its letters or its token.
    const KEYS: [&str; 9] = [
        r#""model""#,
        r#""mod\u0065l""#,
        r#""\u006Dode\u006c""#,
        r#""m\u006f\u0064el""#,
        r#""mod\u0065""#,
        r#""say \"model""#,
        r#""x""#,
        r#""\\u0065""#,
        r#""caf\u00e9""#,
    ];

    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            prop::sample::select(vec!["model", "caf\u{e9}", "a\\u0065", "\"model\""])
                .prop_map(|s| serde_json::to_string(s).unwrap()),
            any::<u8>().prop_map(|n| n.to_string()),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((prop::sample::select(KEYS.to_vec()), inner), 0..4).prop_map(
                    |m| {
                        let members: Vec<String> =
                            m.into_iter().map(|(k, v)| format!("{k} : {v}")).collect();
                        format!("{{ {} }}", members.join(", "))
                    }
                ),
            ]
        })
    }

    proptest! {
        /// On any JSON object whose first member is `model`, the occurrences read where they
        /// stand say a second top-level `model` may follow exactly when a full reading finds
        /// one, and refuse those bodies, with or without the search made as a body arrives.
        #[test]
        fn a_second_model_is_found_as_a_full_reading_finds_it(
            members in prop::collection::vec((prop::sample::select(KEYS.to_vec()), value()), 0..6),
        ) {
            let rest: String = members.iter().map(|(k, v)| format!(",{k}:{v}")).collect();
            let body = format!(r#"{{"model":"a"{rest}}}"#).into_bytes();
            prop_assert!(serde_json::from_slice::<Value>(&body).is_ok());
            let twice = json::parse_object(&body).unwrap().unique("model").is_err();
            let from = find_model(b"{\"model\":\"a\"}").unwrap().span.end;
            let looks = body[from..].windows(5).filter(|w| w == b"\\u006").count()
                + body[from..].windows(7).filter(|w| *w == MODEL).count();
            if looks <= BODY_LITERALS_CAP {
                prop_assert_eq!(may_repeat(&body, from, None), twice);
            }
            for read in [
                find_model(&body).map(|_| ()),
                find_model_and_literals(&body, Searched::Not).map(|_| ()),
            ] {
                prop_assert_eq!(read.is_err(), twice, "{}", String::from_utf8_lossy(&body));
            }
        }
    }

    /// `may_follow` over `body` (its first `model` ending at `from`), and how many bytes it
    /// read.
    fn read_counting(body: &[u8], from: usize) -> (bool, usize) {
        let read = std::cell::Cell::new(0);
        let bytes_in = |r: Range<usize>| {
            read.set(read.get() + r.len());
            Cow::Borrowed(&body[r])
        };
        // Searched from `from`, as `may_repeat` searches a body.
        let rest = super::super::MODEL_LITERALS.find_all(&body[from..], BODY_LITERALS_CAP);
        let next = |at: usize| {
            let next = rest.next_of(&MAY_REPEAT, at - from);
            next.map(|n| n.map(|i| i + from)).map_err(drop)
        };
        (may_follow(body.len(), bytes_in, next, from), read.get())
    }

    /// Sub-agent calls in a long history name `model` in their input: each key is told nested
    /// from its own object, not from the history before it.
    #[test]
    fn a_key_is_read_back_to_its_object_only() {
        let calls = 30;
        let input = format!(r#"{{"prompt":"{}","model":"sonnet"}}"#, "p".repeat(200));
        let message = format!(
            r#"{{"role":"assistant","content":[{{"type":"text","text":"{}"}},{{"type":"tool_use","name":"Task","input":{input}}}]}}"#,
            "t".repeat(4_000)
        );
        let body = format!(
            r#"{{"model":"a","messages":[{}]}}"#,
            vec![message; calls].join(",")
        );
        let from = r#"{"model":"a""#.len();
        let (follows, read) = read_counting(body.as_bytes(), from);
        assert!(!follows);
        // The windows around each key, and those read back from it to its object's bracket.
        let bound = calls * (2 * NEAR + FIRST_WINDOW);
        assert!(
            read <= bound,
            "read {read} bytes of {}, more than {bound}",
            body.len()
        );
    }

    /// Keys in one object far from its bracket: each is read back to the key before it, and
    /// stepped over from there, so the body is read a few times at most (the windows of each
    /// stretch), not once for each key.
    #[test]
    fn keys_of_one_object_are_not_read_again_for_each_key() {
        let keys = 20;
        let member = format!(r#""t":"{}","model":1,"#, "t".repeat(10_000));
        for (outer, follows) in [(r#""x":{"#, false), ("", true)] {
            let close = if outer.is_empty() { "" } else { "}" };
            let body = format!(
                r#"{{"model":"a",{outer}{}"end":1{close}}}"#,
                member.repeat(keys)
            );
            let from = r#"{"model":"a""#.len();
            let (read_follows, read) = read_counting(body.as_bytes(), from);
            assert_eq!(read_follows, follows);
            let bound = 3 * body.len() + keys * (2 * NEAR + FIRST_WINDOW);
            assert!(read <= bound, "read {read} bytes of {}", body.len());
        }
    }

    /// A body dense with escapes, past what the search records, is parsed whole, and answers
    /// as before.
    #[test]
    fn past_the_search_the_body_is_parsed_whole() {
        // The escapes and one nested `model`: as many occurrences as the search records, then
        // one more. Escapes of other characters are not occurrences.
        for (escapes, whole) in [(BODY_LITERALS_CAP - 1, false), (BODY_LITERALS_CAP, true)] {
            let text = "\\u0065\\u00e9\\u001b".repeat(escapes);
            let body = format!(r#"{{"model":"a","t":"{text}","x":{{"model":1}}}}"#);
            let from = r#"{"model":"a""#.len();
            assert_eq!(may_repeat(body.as_bytes(), from, None), whole);
            assert!(find_model(body.as_bytes()).is_ok());
            // Past the cap, no occurrence is read.
            let (follows, read) = read_counting(body.as_bytes(), from);
            assert_eq!(follows, whole);
            assert_eq!(read == 0, whole, "{read} bytes read");
        }
    }
}
