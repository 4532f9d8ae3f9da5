//! The JSON string scan's block masks and scans against a byte-at-a-time reference, and the
//! whole-document parse against `serde_json`'s verdict, and the index (`Doc`) against the
//! scanning readers.
//!
//! `cargo +nightly fuzz run json_masks -- -max_total_time=300` (from `crates/json`).
#![no_main]

use context_relay_json::fuzzing::{block_masks, fast_scan, reference_skip, skip_string};
use context_relay_json::{Doc, Kind, array_at, object_at, parse_object, validate};
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
        assert_eq!(block_masks(block), want, "block {block:?}");
    }
    // The scan of the string opened by a quote put before the data, and of every string the
    // data itself opens (up to a bound, to keep each run short).
    let mut b = Vec::with_capacity(data.len() + 1);
    b.push(b'"');
    b.extend_from_slice(data);
    let starts = b
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c == b'"')
        .map(|(k, _)| k);
    for start in starts.take(16) {
        let want = reference_skip(&b, start);
        assert_eq!(skip_string(&b, start), want, "start {start} in {b:?}");
        // The fast path answers every well-formed string, exactly, and nothing else.
        assert_eq!(
            fast_scan(&b, start),
            want.clone().ok(),
            "start {start} in {b:?}"
        );
    }
    // The whole input as a document: accepted exactly when serde_json reads it as an object,
    // except where the scanner is documented to differ (it forwards lone surrogates in `\u`
    // escapes, and nests up to 512 levels where serde_json stops at 128).
    let ours = parse_object(data);
    match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(serde_json::Value::Object(_)) => assert!(ours.is_ok(), "{ours:?} for {data:?}"),
        Err(e)
            if !e.to_string().contains("recursion limit")
                && !data.windows(2).any(|w| w == b"\\u") =>
        {
            assert!(ours.is_err(), "accepted {data:?}: {e}")
        }
        _ => {}
    }
    // The index: the same verdict as `validate`, error included, and every object and array
    // read from its records exactly as the scanning readers read it.
    let doc = Doc::parse(data);
    assert_eq!(
        doc.as_ref().map(Doc::root).map_err(Clone::clone),
        validate(data),
        "{data:?}"
    );
    if let Ok(doc) = doc {
        assert_eq!(doc.root_object(), ours, "{data:?}");
        let mut todo = vec![doc.root()];
        while let Some(span) = todo.pop() {
            let (o, a) = (object_at(data, span.clone()), array_at(data, span.clone()));
            assert_eq!(doc.object_at(span.clone()), o, "{span:?} in {data:?}");
            assert_eq!(doc.array_at(span.clone()), a, "{span:?} in {data:?}");
            match Kind::of(data, &span) {
                Some(Kind::Object) => {
                    todo.extend(o.into_iter().flat_map(|o| o.fields).map(|f| f.value))
                }
                Some(Kind::Array) => todo.extend(a.into_iter().flat_map(|a| a.items)),
                _ => {}
            }
        }
    }
});
