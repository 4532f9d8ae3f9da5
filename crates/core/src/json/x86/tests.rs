//! The AVX2 masks and scan against the portable ones: same answers on every input.

use proptest::prelude::*;

use super::super::classify::simd::{Lanes, Wide, masks};
use super::super::string::fast_with;
use super::Avx2;

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
fn same_masks(avx2: Avx2, b: &[u8]) {
    for at in 0..b.len().saturating_sub(63) {
        let Some(block) = b[at..].first_chunk::<64>() else {
            break;
        };
        let (w, a) = (Wide.load(block), avx2.load(block));
        assert_eq!(masks(Wide, block), masks(avx2, block), "at {at}");
        for byte in [b'"', b'\\', b'n', 0, 0x80, 0xff] {
            assert_eq!(Wide.eq(w, byte), avx2.eq(a, byte), "{byte} at {at}");
        }
        assert_eq!(Wide.eq2(w, b'n', b't'), avx2.eq2(a, b'n', b't'), "at {at}");
        assert_eq!(Wide.controls(w), avx2.controls(a), "at {at}");
        assert_eq!(Wide.any_control(w), avx2.any_control(a), "at {at}");
    }
}

/// The scan from every starting quote gives the same answer on both paths.
fn same_scans(avx2: Avx2, b: &[u8]) {
    for start in 0..b.len() {
        assert_eq!(
            fast_with(Wide, b, start),
            avx2.fast(b, start),
            "start {start} in {:?}",
            String::from_utf8_lossy(b)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn avx2_agrees_with_portable(body in prop::collection::vec(byte(), 0..300)) {
        let Some(avx2) = Avx2::detect() else {
            return Ok(());
        };
        same_masks(avx2, &body);
        let mut b = vec![b'"'];
        b.extend_from_slice(&body);
        same_scans(avx2, &b);
    }

    #[test]
    fn avx2_agrees_with_portable_on_any_bytes(body in prop::collection::vec(any::<u8>(), 0..300)) {
        let Some(avx2) = Avx2::detect() else {
            return Ok(());
        };
        same_masks(avx2, &body);
        same_scans(avx2, &body);
    }
}

#[test]
fn every_byte_value_at_every_block_position() {
    let Some(avx2) = Avx2::detect() else {
        return;
    };
    for value in 0..=255u8 {
        for at in 0..64 {
            let mut block = [b'a'; 64];
            block[at] = value;
            same_masks(avx2, &block);
        }
    }
}
