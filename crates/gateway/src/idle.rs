//! A body wrapper that fails when no frame arrives for a while: a stalled stream is cut
//! instead of holding a connection (and its buffers) forever.
//!
//! Unlike a plain timeout it resets on every frame, so a long SSE stream that keeps sending is
//! never cut. The wait counts only while the body has to wait: a body whose frames are already
//! there (a buffered JSON answer) never polls the runtime's timer, and the timer is moved on
//! only when it fires before the current wait is over, not at every frame. It forwards
//! `is_end_stream` and `size_hint`, so `content-length` and end of stream are seen through it
//! exactly as without it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use crate::combo::BoxError;
use crate::timer::Timer;

/// The error of an [`IdleTimeoutBody`] that waited too long.
#[derive(Debug, thiserror::Error)]
#[error("no data for {0:?}: the stream was cut")]
pub(crate) struct IdleTimeout(pub Duration);

pin_project_lite::pin_project! {
    /// See the [module docs](self).
    pub struct IdleTimeoutBody<B> {
        #[pin]
        inner: B,
        #[pin]
        timer: Timer,
        idle: Duration,
        // When the current wait began (`None` while frames come). `timer` may be due earlier
        // (an earlier wait set it): it is moved on only when it fires, so a stream's frames
        // cost no timer update each.
        waiting_since: Option<Instant>,
    }
}

impl<B> IdleTimeoutBody<B> {
    /// `inner`, failing after `idle` without a frame.
    pub(crate) fn new(inner: B, idle: Duration) -> Self {
        Self {
            inner,
            timer: Timer::at(Instant::now() + idle),
            idle,
            waiting_since: None,
        }
    }
}

impl<B> Body for IdleTimeoutBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    // Inlined into its caller, as every wrapper of an answer's body is: hyper polls a stream's
    // body about three times per event (docs/performance.md, "The answer's wrappers inlined").
    #[inline(always)]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => {
                *this.waiting_since = None;
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                let due = *this.waiting_since.get_or_insert_with(Instant::now) + *this.idle;
                loop {
                    if this.timer.as_mut().poll_elapsed(cx).is_pending() {
                        return Poll::Pending;
                    }
                    if this.timer.deadline() >= due {
                        return Poll::Ready(Some(Err(Box::new(IdleTimeout(*this.idle)))));
                    }
                    // Set by an earlier wait: this one has time left.
                    this.timer.as_mut().reset(due);
                }
            }
        }
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
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, StreamBody};

    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_fails_and_a_busy_one_does_not() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|f| (f, rx)) },
            );
        let mut body = std::pin::pin!(IdleTimeoutBody::new(
            StreamBody::new(stream),
            Duration::from_secs(5),
        ));
        let feeder = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                tx.send(Ok(Frame::data(Bytes::from_static(b"x"))))
                    .await
                    .ok();
            }
            // Then stall with the sender alive.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(tx);
        });
        for _ in 0..3 {
            let f = body.as_mut().frame().await.unwrap().unwrap();
            assert_eq!(f.into_data().unwrap(), "x");
        }
        let err = body.as_mut().frame().await.unwrap().unwrap_err();
        assert!(err.is::<IdleTimeout>(), "{err}");
        feeder.abort();
    }

    /// The wait counts from when the body is polled and has nothing, not from the last frame:
    /// a consumer that took its time between two polls does not cut the stream.
    #[tokio::test(start_paused = true)]
    async fn the_timer_runs_only_while_the_body_waits() {
        let idle = Duration::from_secs(5);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|f| (f, rx)) },
            );
        let mut body = std::pin::pin!(IdleTimeoutBody::new(StreamBody::new(stream), idle));
        tx.send(Ok(Frame::data(Bytes::from_static(b"a"))))
            .await
            .ok();
        assert!(body.as_mut().frame().await.unwrap().is_ok());
        // The consumer is busy for twice the idle time, then polls; the next frame comes
        // within the idle time of that poll.
        tokio::time::sleep(idle * 2).await;
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(idle / 2).await;
            tx.send(Ok(Frame::data(Bytes::from_static(b"b"))))
                .await
                .ok();
            tx
        });
        let frame = body.as_mut().frame().await.unwrap();
        assert_eq!(frame.unwrap().into_data().unwrap(), "b");
        // Then a real stall is still cut.
        let _tx = feeder.await.unwrap();
        let err = body.as_mut().frame().await.unwrap().unwrap_err();
        assert!(err.is::<IdleTimeout>(), "{err}");
    }
}

#[cfg(test)]
mod examples {
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn module_example() {
        use crate::idle::IdleTimeoutBody;
        use bytes::Bytes;
        use http_body::Body;
        use http_body_util::{BodyExt, Full};
        use std::time::Duration;
        let body =
            IdleTimeoutBody::new(Full::new(Bytes::from_static(b"hi")), Duration::from_secs(1));
        assert_eq!(body.size_hint().exact(), Some(2));
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"hi");
    }
}
