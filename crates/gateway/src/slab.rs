//! Short header values made per request (a generated request id, a rewritten body's
//! `content-length`), cut from one shared buffer per thread instead of allocated one by one.
//!
//! A value that owns its bytes (`Bytes::from_owner`, `HeaderValue::from`) costs an allocation
//! each. A value cut from a larger buffer is a reference count on it: one buffer of
//! [`SLAB_BYTES`] (two allocations, its bytes and the count they share) serves about 25
//! requests' values, and is freed when the last value cut from it is dropped. A value that
//! outlives the others cut with it (the request id of a long stream, which the access line
//! reads at its end) keeps at most one buffer alive: [`SLAB_BYTES`] per open stream at worst,
//! a few dozen bytes each when they are opened together.

use std::cell::Cell;

use bytes::{Bytes, BytesMut};
use http::HeaderValue;

/// The size of one shared buffer: 1 KiB, about 25 requests' request id and length.
pub(crate) const SLAB_BYTES: usize = 1024;

thread_local! {
    /// The rest of this thread's current buffer.
    static SLAB: Cell<BytesMut> = Cell::new(BytesMut::new());
}

/// `text` as a header value that shares this thread's buffer (a copy of its own on a thread
/// whose locals are being torn down); `None` when `text` is not a valid header value (a
/// control byte or DEL).
pub(crate) fn header_value(text: &[u8]) -> Option<HeaderValue> {
    let bytes = SLAB
        .try_with(|slab| {
            let mut rest = slab.take();
            if rest.capacity() - rest.len() < text.len() {
                rest = BytesMut::with_capacity(SLAB_BYTES.max(text.len()));
            }
            rest.extend_from_slice(text);
            let value = rest.split().freeze();
            slab.set(rest);
            value
        })
        .unwrap_or_else(|_| Bytes::copy_from_slice(text));
    HeaderValue::from_maybe_shared(bytes).ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// A value reads as the text it was cut from, whatever was cut before it from the
        /// same buffer (and however the values before it were dropped or kept).
        #[test]
        fn a_value_is_its_text(texts in prop::collection::vec("[ -~]{0,200}", 1..40), keep in any::<u64>()) {
            let mut kept = Vec::new();
            for (i, text) in texts.iter().enumerate() {
                let value = header_value(text.as_bytes());
                prop_assert_eq!(value.as_ref().map(HeaderValue::as_bytes), Some(text.as_bytes()));
                if keep >> (i % 64) & 1 == 1 {
                    kept.push((value, text));
                }
            }
            for (value, text) in kept {
                prop_assert_eq!(value.as_ref().map(HeaderValue::as_bytes), Some(text.as_bytes()));
            }
        }
    }

    #[test]
    fn a_text_longer_than_a_buffer_gets_its_own() {
        let long = "x".repeat(SLAB_BYTES * 3);
        let value = header_value(long.as_bytes());
        assert_eq!(value.map(|v| v.len()), Some(long.len()));
        assert_eq!(
            header_value(b"42").as_ref().map(HeaderValue::as_bytes),
            Some(&b"42"[..])
        );
    }

    #[test]
    fn a_control_byte_is_no_header_value() {
        assert!(header_value(b"a\nb").is_none());
        assert!(header_value(b"a\x7fb").is_none());
        // The buffer serves the next value as usual.
        assert_eq!(
            header_value(b"ok").as_ref().map(HeaderValue::as_bytes),
            Some(&b"ok"[..])
        );
    }

    /// Values cut one after another share their buffer: one allocation of the buffer serves
    /// many of them (a value owning its bytes would be one allocation each).
    #[test]
    fn values_share_one_buffer() {
        SLAB.with(|slab| slab.set(BytesMut::new()));
        let (Some(first), Some(second)) =
            (header_value(b"0123456789"), header_value(b"abcdefghij"))
        else {
            panic!("both are header values");
        };
        let gap =
            (second.as_bytes().as_ptr() as usize).wrapping_sub(first.as_bytes().as_ptr() as usize);
        assert_eq!(gap, 10, "the second value follows the first in one buffer");
    }
}
