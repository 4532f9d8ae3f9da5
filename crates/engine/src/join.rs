//! Joining the chunks of a body kept by reference.

use bytes::{Bytes, BytesMut};

/// The chunks as one buffer of `len` bytes: no copy for zero or one chunk.
pub(crate) fn join(chunks: &[Bytes], len: usize) -> Bytes {
    match chunks {
        [] => Bytes::new(),
        [one] => one.clone(),
        many => {
            let mut all = BytesMut::with_capacity(len);
            for c in many {
                all.extend_from_slice(c);
            }
            all.freeze()
        }
    }
}
