//! The body every answer is handed to hyper in: it holds the in-flight count of requests
//! until the body ends (a streamed answer counts for as long as it streams, not only until its
//! head), and it hands a body's error on [`ERROR_HOLD`] after the frames before it.
//!
//! hyper's server queues what a body yields and writes the queue out once the body has nothing
//! more for now; an error ends the connection (HTTP/1) or resets the stream (HTTP/2: the
//! stream's queued frames are dropped with it) at once, and whatever was still queued is lost.
//! A provider that sends its last events and closes its connection in the same instant (the
//! events and the cut arrive together) lost the client those events, its response head too
//! when the relay had read the opening ahead. The error is held a moment: hyper (on HTTP/2, its
//! connection's task) writes out what it queued, then gets the error and cuts the client's
//! connection or stream as the provider cut its own, so the client still learns the answer is
//! incomplete. What a client does not take within the moment (it stopped reading, its HTTP/2
//! window is shut) is lost with the cut, as it would be without the hold.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use metrics::Gauge;
use tokio::time::Sleep;

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
    /// comes [`ERROR_HOLD`] after the frames before it (see the [module docs](self)).
    pub struct InFlightBody<B> {
        #[pin]
        inner: B,
        guard: Option<InFlight>,
        held: Option<Box<Held>>,
    }
}

/// How long a body's error is held back after the frames before it (see the
/// [module docs](self)).
pub(crate) const ERROR_HOLD: Duration = Duration::from_millis(50);

/// A body's error, held until its time is up.
struct Held {
    error: axum::Error,
    until: Pin<Box<Sleep>>,
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
        if let Some(held) = this.held.as_mut() {
            std::task::ready!(held.until.as_mut().poll(cx));
            this.guard.take();
            return Poll::Ready(this.held.take().map(|held| Err(held.error)));
        }
        match std::task::ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
            Some(Err(error)) => {
                let error = axum::Error::new(error);
                // The access line, written with the head, said the status that was sent.
                metrics::counter!("context_relay_gateway_answers_cut_total").increment(1);
                tracing::warn!(
                    %error,
                    "an answer broke off after its head was sent; the client's connection (HTTP/1) or stream (HTTP/2) is cut"
                );
                // Held: hyper writes out what it queued before it learns of it.
                let mut held = Box::new(Held {
                    error,
                    until: Box::pin(tokio::time::sleep(ERROR_HOLD)),
                });
                // Polled once, so that the timer wakes the task when it is up.
                if held.until.as_mut().poll(cx).is_ready() {
                    this.guard.take();
                    return Poll::Ready(Some(Err(held.error)));
                }
                *this.held = Some(held);
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

    /// The frames before an error and the error itself, all ready at once: the error comes
    /// [`ERROR_HOLD`] later (the polls between say "not yet"), so that a server writes out the
    /// frames before it ends the connection or the stream.
    #[tokio::test(start_paused = true)]
    async fn an_error_comes_a_moment_after_the_frames_before_it() {
        let (waker, woken) = context_relay_testkit::waker::CountingWaker::new();
        let mut cx = Context::from_waker(&waker);
        let chunks = futures_util::stream::iter([
            Ok(Frame::data(Bytes::from_static(b"event: last"))),
            Err(std::io::Error::other("cut")),
        ]);
        let mut body = std::pin::pin!(InFlightBody::new(StreamBody::new(chunks), None));
        let first = body.as_mut().poll_frame(&mut cx);
        assert!(matches!(first, Poll::Ready(Some(Ok(_)))));
        let started = tokio::time::Instant::now();
        // The cut is counted when the body fails, once.
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let page = recorder.handle();
        let polled = metrics::with_local_recorder(&recorder, || body.as_mut().poll_frame(&mut cx));
        assert!(polled.is_pending());
        assert!(
            page.render()
                .contains("context_relay_gateway_answers_cut_total 1"),
            "{}",
            page.render()
        );
        assert!(
            body.as_mut().poll_frame(&mut cx).is_pending(),
            "held, not for one poll only"
        );
        assert!(!body.is_end_stream(), "the error is still to come");
        tokio::time::advance(ERROR_HOLD).await;
        assert_eq!(woken.wakes(), 1, "woken when the hold is over");
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(Err(e))) => assert_eq!(e.to_string(), "cut"),
            _ => panic!("the held error comes once the hold is over"),
        }
        assert!(started.elapsed() >= ERROR_HOLD);
        assert!(body.as_mut().poll_frame(&mut cx).is_ready());
    }
}
