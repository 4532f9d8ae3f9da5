//! The JSON string scan's block masks and scans: every vector path against the portable one
//! and against a byte-at-a-time reference.
//!
//! `cargo +nightly fuzz run json_masks -- -max_total_time=300` (from the repository root).
#![no_main]

use context_relay_core::json::fuzzing::{
    block_masks, fast_scans, fast_utf8_scans, parse_object_both, reference_skip, skip_string,
};
use libfuzzer_sys::fuzz_target;

/// The masks of a block, one byte at a time.
fn reference_masks(block: &[u8; 64]) -> (u64, u64, u64, u64, bool) {
    let mark = |f: &dyn Fn(u8) -> bool| {
        block
            .iter()
            .enumerate()
            .filter(|&(_, &c)| f(c))
            .fold(0u64, |m, (k, _)| m | 1 << k)
    };
    let controls = mark(&|c| c < 0x20);
    (
        mark(&|c| c == b'"'),
        mark(&|c| c == b'\\'),
        controls,
        mark(&|c| c == b'n' || c == b't'),
        controls != 0,
    )
}

fuzz_target!(|data: &[u8]| {
    // Every 64-byte window, so every alignment of every byte is tried.
    for window in data.windows(64).take(256) {
        let block: &[u8; 64] = window.try_into().unwrap();
        let want = reference_masks(block);
        for got in block_masks(block) {
            assert_eq!(got, want, "block {block:?}");
        }
    }
    // The scan of the string opened by a quote put before the data, and of every string the
    // data itself opens (up to a bound, to keep each run short).
    let mut b = Vec::with_capacity(data.len() + 1);
    b.push(b'"');
    b.extend_from_slice(data);
    let starts = b.iter().enumerate().filter(|&(_, &c)| c == b'"').map(|(k, _)| k);
    for start in starts.take(16) {
        let want = reference_skip(&b, start);
        assert_eq!(skip_string(&b, start), want, "start {start} in {b:?}");
        for fast in fast_scans(&b, start) {
            // The fast paths answer every well-formed string, exactly, and nothing else.
            assert_eq!(fast, want.clone().ok(), "start {start} in {b:?}");
        }
        let scans = fast_scans(&b, start);
        assert!(scans.windows(2).all(|w| w[0] == w[1]), "{scans:?} in {b:?}");
        // With UTF-8 checked in the scan: never a string the reference or the standard
        // library refuses, and every valid one when the whole input is UTF-8 (bytes after
        // the closing quote are checked with its block, so invalid ones may make it give up).
        let want_utf8 = want
            .clone()
            .ok()
            .filter(|&end| std::str::from_utf8(&b[start + 1..end - 1]).is_ok());
        for got in fast_utf8_scans(&b, start) {
            if got.is_some() || std::str::from_utf8(&b).is_ok() {
                assert_eq!(got, want_utf8, "start {start} in {b:?}");
            }
        }
    }
    // The whole input as a document: the one-pass parse answers as the two-pass one.
    let [one, two] = parse_object_both(data);
    assert_eq!(one, two, "{data:?}");
});
