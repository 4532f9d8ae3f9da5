//! The AVX2 and AVX-512 masks and scans against the portable ones: same answers on every
//! input. Each test runs on the paths this CPU has.

use proptest::prelude::*;

use super::super::classify::simd::{Lanes, Wide, masks};
use super::super::string::fast_with;
use super::{Avx2, Avx512};

/// A scan on one vector path: `(b, start)` to the end of the string, as `fast_with`.
type Scan = fn(&[u8], usize) -> Option<usize>;

/// The vector paths this CPU has, as `(name, scan without UTF-8, scan with UTF-8)`.
fn scans() -> Vec<(&'static str, Scan, Scan)> {
    let mut all: Vec<(&'static str, Scan, Scan)> = Vec::new();
    if Avx2::detect().is_some() {
        all.push((
            "avx2",
            |b, s| Avx2::detect()?.fast::<false>(b, s),
            |b, s| Avx2::detect()?.fast::<true>(b, s),
        ));
    }
    if Avx512::detect().is_some() {
        all.push((
            "avx512",
            |b, s| Avx512::detect()?.fast::<false>(b, s),
            |b, s| Avx512::detect()?.fast::<true>(b, s),
        ));
    }
    all
}

/// The masks of every vector path this CPU has against the portable ones.
fn same_masks_everywhere(b: &[u8]) {
    if let Some(avx2) = Avx2::detect() {
        same_masks(avx2, b);
    }
    if let Some(avx512) = Avx512::detect() {
        same_masks(avx512, b);
    }
}

/// Bytes that matter to the scan, and the bytes around them: quotes, backslashes, escape
/// letters, control bytes, 0x7f/0x80 and the lead and continuation bytes of multi-byte UTF-8.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => prop::sample::select(
            b"\"\\ntu/bfr0aAfF \x00\x01\x1f\x20\x7f\x80\xbf\xc3\xa9\xe2\x86\x92\xf0\x9f\xff".to_vec()
        ),
        1 => any::<u8>(),
    ]
}

/// Every 64-byte window of `b` (every alignment relative to the allocation) gives the same
/// masks on both paths.
fn same_masks<L: Lanes>(l: L, b: &[u8]) {
    for at in 0..b.len().saturating_sub(63) {
        let Some(block) = b[at..].first_chunk::<64>() else {
            break;
        };
        let (w, a) = (Wide.load(block), l.load(block));
        assert_eq!(masks(Wide, block), masks(l, block), "at {at}");
        for byte in [b'"', b'\\', b'n', 0, 0x80, 0xff] {
            assert_eq!(Wide.eq(w, byte), l.eq(a, byte), "{byte} at {at}");
        }
        assert_eq!(Wide.eq2(w, b'n', b't'), l.eq2(a, b'n', b't'), "at {at}");
        assert_eq!(Wide.controls(w), l.controls(a), "at {at}");
        assert_eq!(Wide.any_control(w), l.any_control(a), "at {at}");
    }
}

/// The scan from every starting quote gives the same answer on every path.
fn same_scans(b: &[u8]) {
    for (name, fast, _) in scans() {
        for start in 0..b.len() {
            assert_eq!(
                fast_with::<_, false>(Wide, b, start),
                fast(b, start),
                "{name}: start {start} in {:?}",
                String::from_utf8_lossy(b)
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn vector_paths_agree_with_portable(body in prop::collection::vec(byte(), 0..300)) {
        same_masks_everywhere(&body);
        let mut b = vec![b'"'];
        b.extend_from_slice(&body);
        same_scans(&b);
    }

    #[test]
    fn vector_paths_agree_with_portable_on_any_bytes(body in prop::collection::vec(any::<u8>(), 0..300)) {
        same_masks_everywhere(&body);
        same_scans(&body);
    }
}

#[test]
fn every_byte_value_at_every_block_position() {
    for value in 0..=255u8 {
        for at in 0..64 {
            let mut block = [b'a'; 64];
            block[at] = value;
            same_masks_everywhere(&block);
        }
    }
}

/// The one-pass scan of the string opened at `b[0]` against the scan without UTF-8 and the
/// standard library's UTF-8 check of its contents. When bytes after the closing quote are
/// not UTF-8 the one-pass scan may give up (they are checked with the last block), but it
/// never accepts a string the other two refuse.
fn same_utf8_scan(b: &[u8]) {
    let want = super::super::string::skip(b, 0)
        .ok()
        .filter(|&end| std::str::from_utf8(&b[1..end - 1]).is_ok());
    for (name, _, fast_utf8) in scans() {
        let got = fast_utf8(b, 0);
        if std::str::from_utf8(b).is_ok() || got.is_some() {
            assert_eq!(got, want, "{name}: {b:?}");
        }
    }
}

/// String contents: UTF-8 sequences of every length, broken ones, escapes, quotes.
fn utf8_piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => "[a-z\\\\\"]{0,70}".prop_map(String::into_bytes),
        3 => any::<String>().prop_map(String::into_bytes),
        3 => prop::sample::select(vec![
            "é", "→", "😀", "\u{7ff}", "\u{800}", "\u{ffff}", "\u{10000}", "\u{10ffff}", "\u{d7ff}",
            "\u{e000}", "\\n", "\\\"", "\\u00e9",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        2 => prop::collection::vec(0x80u8..=0xff, 1..4),
        1 => prop::sample::select(vec![
            &b"\xc0\x80"[..], b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80",
            b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80",
            b"\xf5\x80\x80\x80", b"\xff", b"\xe2\x86", b"\xf0\x9f\x98",
        ])
        .prop_map(<[u8]>::to_vec),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn one_pass_utf8_scan_agrees(
        pieces in prop::collection::vec(utf8_piece(), 0..30),
        tail in prop::collection::vec(utf8_piece(), 0..3),
    ) {
        let mut b = vec![b'"'];
        for p in pieces {
            b.extend(p);
        }
        b.push(b'"');
        for p in tail {
            b.extend(p);
        }
        // Every alignment of the same string within its blocks.
        for lead in 0..4 {
            same_utf8_scan(&b[lead.min(b.len() - 1)..]);
        }
        same_utf8_scan(&b);
    }

    #[test]
    fn one_pass_utf8_scan_agrees_on_any_bytes(body in prop::collection::vec(byte(), 0..300)) {
        let mut b = vec![b'"'];
        b.extend(body);
        same_utf8_scan(&b);
    }

    #[test]
    fn one_pass_parse_agrees_with_two_passes(
        v in crate::json::tests::arb_value(),
        cut in any::<prop::sample::Index>(),
        byte in 0x80u8..=0xff,
    ) {
        let body = serde_json::to_vec(&serde_json::json!({"v": v, "s": "é→😀"})).unwrap();
        let whole = super::super::parse_object(&body);
        prop_assert_eq!(&whole, &super::super::parse_object_two_pass(&body));
        // Valid bodies are answered by the one-pass parse itself.
        prop_assert!(super::super::parse_object_one_pass(&body).is_some());
        prop_assert_eq!(super::super::validate(&body), Ok(0..body.len()));
        // One byte replaced: a different error or none, the same as with two passes.
        let mut broken = body.clone();
        let at = cut.index(broken.len());
        broken[at] = byte;
        prop_assert_eq!(
            super::super::parse_object(&broken),
            super::super::parse_object_two_pass(&broken)
        );
    }
}

/// Every pair of bytes at the block edges and every lead byte with every continuation
/// pattern: the one-pass scan agrees with the standard library.
#[test]
fn every_byte_pair_at_the_block_edges() {
    for at in [0usize, 1, 30, 31, 32, 33, 61, 62, 63, 64, 65, 95, 126, 127] {
        for first in 0..=255u8 {
            for second in 0..=255u8 {
                let mut b = vec![b'"'];
                b.extend(std::iter::repeat_n(b'a', at));
                b.extend_from_slice(&[first, second]);
                b.extend_from_slice(b"bc\"");
                b.extend(std::iter::repeat_n(b'z', 70));
                same_utf8_scan(&b);
            }
        }
    }
    for at in [0usize, 29, 30, 31, 61, 62, 63] {
        for lead in 0xc0..=0xffu8 {
            for conts in [
                &[0x80u8, 0x80, 0x80][..],
                &[0x8f, 0xbf, 0xbf],
                &[0x90, 0x80, 0x80],
                &[0xa0, 0x80, 0x80],
                &[0xbf, 0xbf, 0xbf],
                &[0x80, 0x80],
                &[0x80],
                &[0x80, b'"'],
            ] {
                let mut b = vec![b'"'];
                b.extend(std::iter::repeat_n(b'a', at));
                b.push(lead);
                b.extend_from_slice(conts);
                b.push(b'"');
                same_utf8_scan(&b);
                b.extend(std::iter::repeat_n(b'z', 70));
                same_utf8_scan(&b);
            }
        }
    }
}
