//! How the nesting changes over a stretch of a document, read from its structure alone:
//! brackets, and strings stepped over as [`skim_object`](crate::skim_object) steps over them.
//!
//! A reader that knows the depth at one end of a stretch learns it at the other without
//! reading the rest of the document. A stretch that starts and ends between tokens reads the
//! same whichever end is known: the depth at a token near the end of a large body is the
//! stretch from it to the body's end, read forwards, taken from zero. Nothing is validated:
//! in a document that is not JSON the answer means nothing, and callers only use it for a
//! document whose reader (a provider) refuses one that is not JSON.
//!
//! ```
//! use context_relay_json::{is_escaped, net_depth};
//!
//! let body = br#"{"a": {"b": ["}", 1]}, "model": "x"}"#;
//! let at = 23; // the second top-level key
//! assert_eq!(&body[at..at + 7], br#""model""#);
//! assert_eq!(net_depth(&body[..at]), Some(1));
//! assert_eq!(net_depth(&body[at + 7..]), Some(-1));
//! assert_eq!(net_depth(br#"{"open"#), None);
//! assert!(is_escaped(br#"a\"b"#, 2));
//! assert!(!is_escaped(br#"a\\"b"#, 3));
//! ```

use crate::skim::string_end;

/// The containers `json` opens minus those it closes, read from outside a string (the stretch
/// starts between two tokens); `None` when it ends inside a string.
pub fn net_depth(json: &[u8]) -> Option<isize> {
    let mut depth = 0isize;
    let mut i = 0;
    while let Some(&byte) = json.get(i) {
        match byte {
            b'"' => i = string_end(json, i + 1)?.0,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    Some(depth)
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

    /// The depth before each byte outside a string, read byte by byte from the start: the
    /// positions between tokens and their depths.
    fn depths(json: &[u8]) -> Vec<(usize, isize)> {
        let (mut depth, mut in_string, mut escaped) = (0isize, false, false);
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
            out.push((at, depth));
            match byte {
                b'"' => in_string = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth -= 1,
                _ => {}
            }
        }
        out.push((json.len(), depth));
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
        /// From any position between tokens, the stretch before it gives its depth and the
        /// stretch after it the same depth taken from the end's, in compact and spaced JSON.
        #[test]
        fn the_depth_between_tokens_is_read_from_either_end(v in value(), pretty in any::<bool>()) {
            let json = if pretty {
                serde_json::to_vec_pretty(&v).unwrap()
            } else {
                serde_json::to_vec(&v).unwrap()
            };
            for (at, depth) in depths(&json) {
                prop_assert_eq!(net_depth(&json[..at]), Some(depth));
                prop_assert_eq!(net_depth(&json[at..]), Some(-depth));
            }
        }

        /// A stretch that ends inside a string says so.
        #[test]
        fn a_stretch_cut_inside_a_string_has_no_depth(v in value()) {
            let json = serde_json::to_vec(&v).unwrap();
            let outside: Vec<usize> = depths(&json).into_iter().map(|(at, _)| at).collect();
            for at in 0..=json.len() {
                let cut_in_string = !outside.contains(&at);
                prop_assert_eq!(net_depth(&json[..at]).is_none(), cut_in_string, "{}", at);
            }
        }
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
