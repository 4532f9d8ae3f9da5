//! A response body read ahead up to a limit and then replayed whole.
//!
//! The resolver must know what an upstream error says (a quota body, a revoked key) before it
//! decides between retrying on another account and answering the client. Error bodies are a
//! few hundred bytes, but nothing guarantees it: [`peek`] reads at most `limit` bytes, and the
//! returned [`Peeked`] body yields those bytes and then whatever the upstream still sends, so
//! the client always gets every byte.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::combo::BoxError;

/// What [`peek`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Head {
    /// The whole body, which ended within the limit.
    Complete(Bytes),
    /// The first bytes of a body longer than the limit (or one that failed mid-way).
    Partial(Bytes),
}

impl Head {
    /// The body's bytes when it was read completely.
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        match self {
            Head::Complete(b) => Some(b),
            Head::Partial(_) => None,
        }
    }
}

/// A body that yields bytes read ahead, then the rest of the original body.
pub(crate) struct Peeked<B> {
    prefix: Option<Bytes>,
    trailers: Option<HeaderMap>,
    error: Option<BoxError>,
    rest: Option<Pin<Box<B>>>,
}

impl<B> std::fmt::Debug for Peeked<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peeked")
            .field("prefix", &self.prefix.as_ref().map(Bytes::len))
            .field("rest", &self.rest.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> Peeked<B> {
    /// A body of `bytes` only.
    pub(crate) fn full(bytes: Bytes) -> Self {
        Self {
            prefix: (!bytes.is_empty()).then_some(bytes),
            trailers: None,
            error: None,
            rest: None,
        }
    }
}

/// Reads `body` until it ends or more than `limit` bytes were read, and returns what was read
/// with a body replaying everything.
pub(crate) async fn peek<B>(body: B, limit: usize) -> (Head, Peeked<B>)
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut body = Box::pin(body);
    let mut buf = BytesMut::new();
    let mut trailers = None;
    let mut error = None;
    let mut ended = false;
    while buf.len() <= limit {
        match body.frame().await {
            None => {
                ended = true;
                break;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    buf.extend_from_slice(&data);
                    // hyper's own bodies say so when the last frame went out.
                    if body.is_end_stream() {
                        ended = true;
                        break;
                    }
                }
                Err(frame) => {
                    // Trailers end a body.
                    trailers = frame.into_trailers().ok();
                    ended = true;
                    break;
                }
            },
            Some(Err(e)) => {
                error = Some(e.into());
                break;
            }
        }
    }
    let bytes = buf.freeze();
    let head = if ended && error.is_none() {
        Head::Complete(bytes.clone())
    } else {
        Head::Partial(bytes.clone())
    };
    let rest = (!ended && error.is_none()).then_some(body);
    let peeked = Peeked {
        prefix: (!bytes.is_empty()).then_some(bytes),
        trailers,
        error,
        rest,
    };
    (head, peeked)
}

impl<B> Body for Peeked<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // Every field is Unpin (the inner body is boxed).
        let this = self.get_mut();
        if let Some(prefix) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        if let Some(e) = this.error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        if let Some(t) = this.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(t))));
        }
        let Some(rest) = this.rest.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = ready!(rest.as_mut().poll_frame(cx));
        if frame.is_none() {
            this.rest = None;
        }
        Poll::Ready(frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none()
            && self.error.is_none()
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |r| r.size_hint());
        let len = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        // Upper bound first: `set_lower` asserts it stays at or below the upper bound.
        let mut hint = SizeHint::new();
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(len));
        }
        hint.set_lower(rest.lower().saturating_add(len));
        hint
    }
}

#[cfg(test)]
mod tests {
    use futures_util::stream;
    use http_body_util::{Full, StreamBody};

    use super::*;

    fn chunks(parts: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = BoxError> + use<> {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p))))
            .collect();
        StreamBody::new(stream::iter(frames))
    }

    #[tokio::test]
    async fn a_short_body_is_complete_and_replayed() {
        let (head, body) = peek(chunks(&[b"ab", b"cd"]), 64).await;
        assert_eq!(head, Head::Complete(Bytes::from_static(b"abcd")));
        assert!(!body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(4));
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"abcd");
    }

    #[tokio::test]
    async fn a_long_body_is_partial_and_still_whole_for_the_client() {
        let (head, body) = peek(chunks(&[b"abc", b"def", b"ghi", b"jkl"]), 4).await;
        assert_eq!(head, Head::Partial(Bytes::from_static(b"abcdef")));
        assert_eq!(head.bytes(), None);
        assert_eq!(
            &body.collect().await.unwrap().to_bytes()[..],
            b"abcdefghijkl"
        );
    }

    #[tokio::test]
    async fn empty_and_full_bodies_end_at_once() {
        let (head, body) = peek(Full::new(Bytes::new()), 8).await;
        assert_eq!(head.bytes(), Some(&b""[..]));
        assert!(body.is_end_stream());
        let body = Peeked::<Full<Bytes>>::full(Bytes::from_static(b"x"));
        assert_eq!(body.size_hint().exact(), Some(1));
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"x");
    }

    #[tokio::test]
    async fn an_error_mid_body_is_passed_on_after_the_bytes() {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
            Ok(Frame::data(Bytes::from_static(b"ab"))),
            Err("cut".into()),
        ];
        let (head, mut body) = peek(StreamBody::new(stream::iter(frames)), 64).await;
        assert_eq!(head, Head::Partial(Bytes::from_static(b"ab")));
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), Bytes::from_static(b"ab"));
        assert!(body.frame().await.unwrap().is_err());
        assert!(body.frame().await.is_none());
    }
}

#[cfg(test)]
mod examples {
    #[tokio::test(flavor = "current_thread")]
    async fn module_example() {
        use crate::peek::peek;
        use bytes::Bytes;
        use http_body_util::{BodyExt, Full};

        let (head, body) = peek(Full::new(Bytes::from_static(b"0123456789")), 64).await;
        assert_eq!(head.bytes(), Some(&b"0123456789"[..])); // it ended within the limit
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"0123456789");
    }
}
