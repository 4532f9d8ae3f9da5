//! Which container a place in a document is in, read backwards from the place over the
//! structure alone: brackets, and strings stepped over from their closing quote to their
//! opening one.
//!
//! A reader that meets a key far into a large body learns whether it is nested by reading
//! back to the bracket that opens its object, usually a few bytes away, not the body before
//! it. Read in stretches ([`enclosing`] of one, then of the one before it, with what the
//! first found), a document is read backwards as it would be whole, so a caller can step over
//! a stretch whose answer it already knows. Nothing is validated: in a document that is not
//! JSON the answer means nothing, and callers only use it for a document whose reader (a
//! provider) refuses one that is not JSON.
//!
//! ```
//! use context_relay_json::{Enclosing, enclosing, is_escaped};
//!
//! let body = br#"{"a": {"b": ["}", 1], "model": 2}, "model": "x"}"#;
//! let nested = 22; // `model` in `a`'s object
//! let top = 35; // the second top-level key
//! assert_eq!(&body[top..top + 7], br#""model""#);
//! assert_eq!(enclosing(&body[..nested], 0), Some(Enclosing::At(6)));
//! assert_eq!(enclosing(&body[..top], 0), Some(Enclosing::At(0)));
//! // Read in two stretches: at the start of the second, the reader is in the array `b` holds.
//! assert_eq!(enclosing(&body[13..nested], 0), Some(Enclosing::Outside(1)));
//! assert_eq!(enclosing(&body[..13], 1), Some(Enclosing::At(6)));
//! // A stretch that starts inside a string: its closing quote has no opening one.
//! assert_eq!(enclosing(br#"open", 1"#, 0), None);
//! assert!(is_escaped(br#"a\"b"#, 2));
//! assert!(!is_escaped(br#"a\\"b"#, 3));
//! ```

use memchr::memrchr;

/// What [`enclosing`] found reading a stretch backwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enclosing {
    /// The bracket (`{` or `[`) that opens the container sought: its position in the stretch.
    At(usize),
    /// Not in the stretch: at its start the reader stands this many levels inside the
    /// container sought (to be given to the read of the stretch before it).
    Outside(usize),
}

/// Reads `json` backwards from its end, a place between two tokens, for the bracket that
/// opens the container `inside` levels out of the one the end is in (0: that one itself).
///
/// A stretch that starts between tokens too is read as the whole document reads it; `None`
/// when a string in it has no opening quote. One that starts anywhere else (inside a string,
/// say: the last bytes of a large document, read first) still gives the right bracket when it
/// finds one, since every byte from the bracket to the end was read as in the whole document;
/// otherwise its answer only says that the bracket is not in it.
pub fn enclosing(json: &[u8], mut inside: usize) -> Option<Enclosing> {
    let mut at = json.len();
    while let Some(before) = at.checked_sub(1) {
        at = before;
        match json.get(at) {
            Some(b'"') => at = string_start(json, at)?,
            Some(b'}' | b']') => inside += 1,
            Some(b'{' | b'[') => match inside.checked_sub(1) {
                Some(out) => inside = out,
                None => return Some(Enclosing::At(at)),
            },
            _ => {}
        }
    }
    Some(Enclosing::Outside(inside))
}

/// The opening quote of the string whose closing quote is at `end`: the nearest quote before
/// it that no backslash escapes.
fn string_start(json: &[u8], end: usize) -> Option<usize> {
    let mut before = end;
    loop {
        let quote = memrchr(b'"', json.get(..before)?)?;
        if !is_escaped(json, quote) {
            return Some(quote);
        }
        before = quote;
    }
}

/// Whether the byte of `json` at `at` is escaped: preceded by an odd run of backslashes
/// (false past the end).
pub fn is_escaped(json: &[u8], at: usize) -> bool {
    json.get(..at)
        .is_some_and(|before| before.iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    /// The places between tokens, each with the brackets open there (their positions, the
    /// outermost first), read byte by byte from the start.
    fn places(json: &[u8]) -> Vec<(usize, Vec<usize>)> {
        let (mut open, mut in_string, mut escaped) = (Vec::new(), false, false);
        let mut out = Vec::new();
        for (at, &byte) in json.iter().enumerate() {
            if in_string {
                match (escaped, byte) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            out.push((at, open.clone()));
            match byte {
                b'"' => in_string = true,
                b'{' | b'[' => open.push(at),
                b'}' | b']' => {
                    open.pop();
                }
                _ => {}
            }
        }
        out.push((json.len(), open));
        out
    }

    fn value() -> impl Strategy<Value = Value> {
        let text = prop::collection::vec(
            prop::sample::select(vec![
                'a', '"', '\\', '{', '}', '[', ']', ':', ',', 'é', '\n',
            ]),
            0..12,
        )
        .prop_map(|c| c.into_iter().collect::<String>());
        let leaf = prop_oneof![
            text.clone().prop_map(Value::from),
            any::<i32>().prop_map(Value::from)
        ];
        leaf.prop_recursive(5, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::vec((text.clone(), inner), 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// From any place between tokens, back to any place before it, the bracket found is the
        /// one a forward reading has open there, `inside` levels out; when it is not in the
        /// stretch, the levels left are those between the stretch's start and that bracket. In
        /// compact and spaced JSON.
        #[test]
        fn the_enclosing_bracket_is_the_one_a_forward_reading_has_open(
            v in value(),
            pretty in any::<bool>(),
            pick in any::<prop::sample::Index>(),
        ) {
            let json = if pretty {
                serde_json::to_vec_pretty(&v).unwrap()
            } else {
                serde_json::to_vec(&v).unwrap()
            };
            let places = places(&json);
            for (end, (at, open)) in places.iter().enumerate() {
                let (from, open_from) = &places[pick.index(end + 1)];
                for (from, open_from) in [(0, &Vec::new()), (*from, open_from)] {
                    // The brackets opened in the stretch and still open at its end.
                    let own: Vec<usize> = open.iter().copied().filter(|&b| b >= from).collect();
                    for inside in 0..3 {
                        let expected = match own.len().checked_sub(inside + 1) {
                            Some(i) => Enclosing::At(own[i] - from),
                            None => Enclosing::Outside(inside + open_from.len() - open.len()),
                        };
                        prop_assert_eq!(
                            enclosing(&json[from..*at], inside),
                            Some(expected),
                            "{}..{} of {}", from, at, String::from_utf8_lossy(&json)
                        );
                    }
                }
                // Cut anywhere, inside a string or a backslash's escape: the bracket is found
                // when the cut leaves it in, else none is.
                let cut = pick.index(*at + 1);
                for inside in 0..3 {
                    let bracket = open.len().checked_sub(inside + 1).map(|i| open[i]);
                    let found = match enclosing(&json[cut..*at], inside) {
                        Some(Enclosing::At(b)) => Some(cut + b),
                        _ => None,
                    };
                    prop_assert_eq!(
                        found,
                        bracket.filter(|&b| b >= cut),
                        "{}..{} of {}", cut, at, String::from_utf8_lossy(&json)
                    );
                }
            }
        }
    }

    #[test]
    fn a_stretch_that_starts_inside_a_string_is_told() {
        assert_eq!(enclosing(br#"ab", 1"#, 0), None);
        assert_eq!(enclosing(br#"a\", 1"#, 0), None);
        assert_eq!(enclosing(br#"\"a", 1"#, 0), None);
        assert_eq!(enclosing(br#""a", 1"#, 0), Some(Enclosing::Outside(0)));
    }

    #[test]
    fn escapes_are_counted_back_to_the_first_backslash() {
        assert!(!is_escaped(b"\"", 0));
        assert!(is_escaped(b"\\\"", 1));
        assert!(!is_escaped(b"\\\\\"", 2));
        assert!(is_escaped(b"\\\\\\\"", 3));
        assert!(!is_escaped(b"\\\\\\", 9));
    }
}
