//! Holding a request body back in `request_body_filter` until it is whole.
//!
//! pingora streams a request body upstream chunk by chunk as it arrives, and the only way to
//! rewrite it is to hold every chunk (the filter replaces it with an empty one, which pingora
//! does not write) and to emit the rewritten body with the last one. The upstream request
//! headers have been written by then, so the framing is decided before the body is seen:
//! `upstream_request_filter` drops `content-length` and asks for chunked encoding.
//!
//! A body larger than the limit is never held whole: what was held is released at once and the
//! rest streams through untouched.
//!
//! ```
//! use bytes::Bytes;
//! use context_relay_pingora_example::held::{Held, Hold};
//!
//! let mut held = Held::new(1024);
//! assert!(matches!(held.push(Some(Bytes::from_static(b"{\"a\":")), false), Hold::Holding));
//! match held.push(Some(Bytes::from_static(b"1}")), true) {
//!     Hold::Whole(body) => assert_eq!(body, "{\"a\":1}"),
//!     other => panic!("{other:?}"),
//! }
//!
//! let mut small = Held::new(4);
//! assert!(matches!(small.push(Some(Bytes::from_static(b"abc")), false), Hold::Holding));
//! match small.push(Some(Bytes::from_static(b"def")), false) {
//!     Hold::TooLarge(released) => assert_eq!(released, "abcdef"),
//!     other => panic!("{other:?}"),
//! }
//! ```

use bytes::{Bytes, BytesMut};

/// A request body being held.
#[derive(Debug)]
pub struct Held {
    buf: BytesMut,
    limit: usize,
}

/// What to do with the chunk just pushed.
#[derive(Debug)]
pub enum Hold {
    /// Keep holding: send nothing upstream for now.
    Holding,
    /// The body ended: here it is, whole.
    Whole(Bytes),
    /// The body outgrew the limit: send these bytes (all that was held, this chunk included)
    /// and let the rest through untouched.
    TooLarge(Bytes),
}

impl Held {
    /// Holds at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            limit,
        }
    }

    /// The most bytes held.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Adds `chunk`; `end` is pingora's `end_of_stream`.
    pub fn push(&mut self, chunk: Option<Bytes>, end: bool) -> Hold {
        if let Some(chunk) = chunk {
            self.buf.extend_from_slice(&chunk);
        }
        if self.buf.len() > self.limit {
            Hold::TooLarge(std::mem::take(&mut self.buf).freeze())
        } else if end {
            Hold::Whole(std::mem::take(&mut self.buf).freeze())
        } else {
            Hold::Holding
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_body_ends_empty() {
        let mut held = Held::new(8);
        assert!(matches!(held.push(None, true), Hold::Whole(b) if b.is_empty()));
    }

    #[test]
    fn the_limit_itself_is_held() {
        let mut held = Held::new(4);
        assert!(matches!(
            held.push(Some(Bytes::from_static(b"abcd")), false),
            Hold::Holding
        ));
        assert!(matches!(held.push(None, true), Hold::Whole(b) if b == "abcd"));
    }

    #[test]
    fn a_body_past_the_limit_at_its_end_is_released_too() {
        let mut held = Held::new(4);
        assert!(matches!(
            held.push(Some(Bytes::from_static(b"abcde")), true),
            Hold::TooLarge(b) if b == "abcde"
        ));
    }
}
