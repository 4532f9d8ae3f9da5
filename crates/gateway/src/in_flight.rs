//! The body every answer is handed to hyper in: it holds the in-flight count of requests
//! until the body ends (a streamed answer counts for as long as it streams, not only until its
//! head), and it hands a body's error on one poll after the frames before it.
//!
//! hyper's server queues what a body yields and writes the queue out once the body has nothing
//! more for now; an error ends the connection (HTTP/1) or resets the stream (HTTP/2) at once,
//! and whatever was still queued is lost. A provider that sends its last events and closes its
//! connection in the same instant (the events and the cut arrive together) lost the client
//! those events, its response head too when the relay had read the opening ahead. The error
//! is held for one poll: hyper writes out what it queued, then gets the error and cuts the
//! client's connection or stream as the provider cut its own, so the client still learns the
//! answer is incomplete.

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
    /// last frame, an error, or its drop (a client gone mid-stream); its inner body's error
    /// comes one poll after the frames before it (see the [module docs](self)).
    pub struct InFlightBody<B> {
        #[pin]
        inner: B,
        guard: Option<InFlight>,
        held: Option<axum::Error>,
    }
}

impl<B> InFlightBody<B> {
    /// `inner`, counted by `guard` while it lasts.
    pub(crate) fn new(inner: B, guard: Option<InFlight>) -> Self {
        Self {
            inner,
            guard,
            held: None,
        }
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
        if let Some(error) = this.held.take() {
            this.guard.take();
            return Poll::Ready(Some(Err(error)));
        }
        match std::task::ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
            Some(Err(error)) => {
                // Held for one poll: hyper writes out what it queued before it learns of it.
                *this.held = Some(axum::Error::new(error));
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            None => {
                this.guard.take();
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
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

    /// The frames before an error and the error itself, all ready at once: the error comes a
    /// poll later (the poll between says "not yet" and wakes the task at once), so a server
    /// writes out the frames before it ends the connection.
    #[test]
    fn an_error_comes_one_poll_after_the_frames_before_it() {
        let woken = Arc::new(Woken::default());
        let waker = std::task::Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let chunks = futures_util::stream::iter([
            Ok(Frame::data(Bytes::from_static(b"event: last"))),
            Err(std::io::Error::other("cut")),
        ]);
        let mut body = std::pin::pin!(InFlightBody::new(StreamBody::new(chunks), None));
        let first = body.as_mut().poll_frame(&mut cx);
        assert!(matches!(first, Poll::Ready(Some(Ok(_)))));
        assert!(body.as_mut().poll_frame(&mut cx).is_pending());
        assert_eq!(woken.0.load(Ordering::Relaxed), 1, "woken at once");
        assert!(!body.is_end_stream(), "the error is still to come");
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(Err(e))) => assert_eq!(e.to_string(), "cut"),
            _ => panic!("the held error comes on the next poll"),
        }
        assert!(body.as_mut().poll_frame(&mut cx).is_ready());
    }

    #[derive(Default)]
    struct Woken(AtomicU64);

    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}
