//! The fast string path against the exact one: same answer on every input, errors included.

use proptest::prelude::*;

use super::*;
use crate::fuzzing::reference_skip as naive;

/// What `Scanner` did before the fast path existed: the exact scan, with plain runs crossed
/// by `memchr2` when the input holds no control byte.
fn reference(b: &[u8], start: usize) -> Result<usize, JsonError> {
    exact(b, start, control_free(&b[start..]))
}

fn agree(b: &[u8]) {
    let got = skip(b, 0);
    assert_eq!(got, reference(b, 0), "{:?}", String::from_utf8_lossy(b));
    assert_eq!(got, exact(b, 0, false), "{:?}", String::from_utf8_lossy(b));
}

/// Pieces of string contents: escapes of every kind, broken ones, raw control bytes,
/// multi-byte UTF-8 and plain runs of lengths around the 64-byte blocks.
fn piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => "[a-z ]{0,70}".prop_map(String::into_bytes),
        1 => (0usize..140).prop_map(|n| vec![b'x'; n]),
        1 => (1usize..9).prop_map(|n| vec![b'\\'; n]),
        4 => prop::sample::select(vec![
            "\\n", "\\t", "\\\"", "\\\\", "\\/", "\\r", "\\b", "\\f", "\\u00e9", "\\uD83D\\uDE00",
            "\\u12", "\\u12x4", "\\q", "\\ ", "\\\u{e9}", "\"", "\u{1}", "\n", "\t", "\u{1f}",
            "\u{e9}", "\u{2192}", "\u{1f600}", "\\\n", " ", "\u{7f}",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => any::<u8>().prop_map(|b| vec![b]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn fast_agrees_with_exact_on_pieces(pieces in prop::collection::vec(piece(), 0..40), close in any::<bool>()) {
        let mut b = vec![b'"'];
        for p in pieces {
            b.extend(p);
        }
        if close {
            b.push(b'"');
        }
        agree(&b);
    }

    #[test]
    fn fast_agrees_with_exact_on_any_bytes(body in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut b = vec![b'"'];
        b.extend(body);
        agree(&b);
    }

    #[test]
    fn fast_agrees_with_exact_on_escape_heavy_bytes(
        body in prop::collection::vec(prop::sample::select(b"\\\"nu0aZ \x01\xc3\xa9".to_vec()), 0..300),
    ) {
        let mut b = vec![b'"'];
        b.extend(body);
        agree(&b);
    }
}

#[test]
fn every_special_at_every_block_position() {
    let specials: [&[u8]; 12] = [
        b"\\n",
        b"\\\"",
        b"\\\\",
        b"\\\\\\\"",
        b"\\u00e9",
        b"\\r",
        b"\\/",
        b"\x01",
        b"\\q",
        b"\\u12x4",
        b"\"",
        b"\\",
    ];
    for lead in 0..140 {
        for special in specials {
            for tail in [
                &b""[..],
                b"\"",
                b"abc\"",
                &[b'y'; 70][..],
                b"\\\\\"",
                b"\\\"",
            ] {
                let mut b = vec![b'"'];
                b.extend(std::iter::repeat_n(b'a', lead));
                b.extend_from_slice(special);
                b.extend_from_slice(tail);
                agree(&b);
                b.push(b'"');
                agree(&b);
            }
        }
    }
}

#[test]
fn backslash_runs_across_blocks() {
    for lead in 0..70 {
        for run in 1..140 {
            let mut b = vec![b'"'];
            b.extend(std::iter::repeat_n(b'a', lead));
            b.extend(std::iter::repeat_n(b'\\', run));
            b.extend_from_slice(b"\"tail\"");
            b.extend(std::iter::repeat_n(b'z', 70));
            agree(&b);
            let end = skip(&b, 0);
            // An even run leaves the first quote closing the string; an odd run escapes it.
            let expect = if run % 2 == 0 {
                1 + lead + run + 1
            } else {
                1 + lead + run + 6
            };
            assert_eq!(end, Ok(expect), "lead {lead} run {run}");
            // Valid strings are answered by the fast path itself.
            assert_eq!(fast(&b, 0), Some(expect));
        }
    }
}

#[test]
fn long_plain_runs_are_checked_for_control_bytes() {
    for run in (100..400).step_by(7) {
        for at in [0, run / 2, run - 1] {
            let mut b = vec![b'"'];
            b.extend(std::iter::repeat_n(b'a', run));
            b.extend_from_slice(b"\\n\"");
            let end = b.len();
            assert_eq!(fast(&b, 0), Some(end), "run {run}");
            b[1 + at] = b'\t';
            assert_eq!(fast(&b, 0), None, "run {run} at {at}");
            assert_eq!(
                skip(&b, 0),
                Err(JsonError::ControlCharacter {
                    at: 1 + at,
                    byte: b'\t'
                })
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]
    #[test]
    fn skip_agrees_with_naive(
        body in prop::collection::vec(prop::sample::select(b"\\\"nu0aZ \x01\xc3\xa9qF".to_vec()), 0..300),
    ) {
        let mut b = vec![b'"'];
        b.extend(body);
        prop_assert_eq!(skip(&b, 0), naive(&b, 0), "{:?}", String::from_utf8_lossy(&b));
    }
    #[test]
    fn skip_ok_agrees_with_naive_ok(
        body in prop::collection::vec(prop::sample::select(b"\\\"nu0aZ \x01\xc3\xa9qF".to_vec()), 0..300),
    ) {
        let mut b = vec![b'"'];
        b.extend(body);
        prop_assert_eq!(skip(&b, 0).ok(), naive(&b, 0).ok(), "{:?}", String::from_utf8_lossy(&b));
    }
}

#[test]
fn control_before_invalid_escape_in_one_block() {
    let mut b = vec![b'"'];
    b.extend_from_slice(b"ab\x01cd\\q");
    b.extend(std::iter::repeat_n(b'x', 80));
    b.push(b'"');
    assert_eq!(skip(&b, 0), naive(&b, 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]
    #[test]
    fn pieces_ok_agree_with_naive(pieces in prop::collection::vec(piece(), 0..60)) {
        let mut b = vec![b'"'];
        for p in pieces { b.extend(p); }
        b.push(b'"');
        let n = naive(&b, 0);
        let s = skip(&b, 0);
        prop_assert_eq!(s.is_ok(), n.is_ok());
        if n.is_ok() { prop_assert_eq!(s, n); }
    }
}
