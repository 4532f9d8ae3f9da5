//! The in-flight count of requests, held until the response body ends: a streamed answer
//! counts for as long as it streams, not only until its head.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use metrics::Gauge;

use crate::combo::BoxError;

/// One request in flight: decrements the gauge when dropped, however the request ends.
pub(crate) struct InFlight(Gauge);

impl InFlight {
    /// Counts one more request in flight on `gauge`.
    pub(crate) fn begin(gauge: Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InFlight")
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// The body of every answer a gateway's [`HttpService`](crate::HttpService) gives: the
/// answer's own, its request counted in the requests-in-flight gauge until the body ends.
pub type ResponseBody = InFlightBody<axum::body::Body>;

pin_project_lite::pin_project! {
    /// A response body holding its request's place in the requests-in-flight gauge until its
    /// last frame, an error, or its drop (a client gone mid-stream).
    pub struct InFlightBody<B> {
        #[pin]
        inner: B,
        guard: Option<InFlight>,
    }
}

impl<B> InFlightBody<B> {
    /// `inner`, counted by `guard` while it lasts.
    pub(crate) fn new(inner: B, guard: Option<InFlight>) -> Self {
        Self { inner, guard }
    }
}

impl<B> Body for InFlightBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = axum::Error;

    // Inlined into its caller, as every wrapper of an answer's body is: hyper polls a stream's
    // body about three times per event (docs/performance.md, "The answer's wrappers inlined").
    #[inline(always)]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            this.guard.take();
        }
        Poll::Ready(frame.map(|r| r.map_err(axum::Error::new)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full, StreamBody};

    use super::*;

    #[tokio::test]
    async fn the_count_lasts_until_the_body_ends_or_is_dropped() {
        let cell = Arc::new(AtomicU64::new(0f64.to_bits()));
        let gauge = Gauge::from_arc(cell.clone());
        let count = || f64::from_bits(cell.load(Ordering::Relaxed));

        let body = InFlightBody::new(
            Full::new(Bytes::from_static(b"ok")),
            Some(InFlight::begin(gauge.clone())),
        );
        assert_eq!(body.size_hint().exact(), Some(2));
        assert!(!body.is_end_stream());
        assert_eq!(count(), 1.0);
        let mut body = std::pin::pin!(body);
        assert!(body.frame().await.is_some());
        assert_eq!(count(), 1.0, "counted while the body goes on");
        assert!(body.frame().await.is_none());
        assert_eq!(count(), 0.0, "not after its end");

        // A client gone mid-stream: the body is dropped before its end.
        let chunks = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Frame::data(
            Bytes::from_static(b"a"),
        ))]);
        let mut streamed = Box::pin(InFlightBody::new(
            StreamBody::new(chunks),
            Some(InFlight::begin(gauge)),
        ));
        assert!(streamed.frame().await.is_some());
        assert_eq!(count(), 1.0);
        drop(streamed);
        assert_eq!(count(), 0.0);
    }

    #[tokio::test]
    async fn an_error_ends_the_count_and_says_what_it_was() {
        let cell = Arc::new(AtomicU64::new(0f64.to_bits()));
        let gauge = Gauge::from_arc(cell.clone());
        let chunks = futures_util::stream::iter([
            Ok(Frame::data(Bytes::from_static(b"a"))),
            Err(std::io::Error::other("the provider went away")),
        ]);
        let body = InFlightBody::new(StreamBody::new(chunks), Some(InFlight::begin(gauge)));
        let mut body = std::pin::pin!(body);
        assert!(body.frame().await.is_some_and(|f| f.is_ok()));
        assert_eq!(f64::from_bits(cell.load(Ordering::Relaxed)), 1.0);
        let error = body
            .frame()
            .await
            .and_then(Result::err)
            .map(|e| e.to_string());
        assert_eq!(error.as_deref(), Some("the provider went away"));
        assert_eq!(f64::from_bits(cell.load(Ordering::Relaxed)), 0.0);
    }
}
