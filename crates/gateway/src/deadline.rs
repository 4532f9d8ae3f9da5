//! The whole-request deadline (`request_timeout_secs`): a layer that bounds a proxied request
//! from its head to the end of its response body, whatever each phase's own timeout allows.
//!
//! The per-phase bounds (client body, provider head, provider idle) reset with progress, so a
//! provider that trickles one byte a minute, or a retry loop across many accounts, could hold
//! a request for ever. At the deadline a request with no response head yet is answered 504 in
//! the error shape of its API; a response body still streaming is cut (the client sees the
//! stream end with an error, the provider's stream is dropped). Both are counted in
//! `context_relay_gateway_request_deadline_total`, by phase.
//!
//! Like [`IdleTimeoutBody`](crate::idle::IdleTimeoutBody), the body's timer is armed only when
//! the body has to wait: a buffered answer never touches the runtime's timer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use tokio::time::Instant;
use tower::{Layer, Service};

use crate::combo::BoxError;
use crate::error::{ErrorKind, ErrorShape, error_response_as};
use crate::timer::Timer;

/// The error of a response body cut at the deadline.
#[derive(Debug, thiserror::Error)]
#[error("the request took longer than {0:?} (request_timeout_secs): the stream was cut")]
pub(crate) struct DeadlineExceeded(pub Duration);

/// Bounds every request of the wrapped service by one deadline (see the [module docs](self)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeadlineLayer {
    limit: Duration,
}

impl DeadlineLayer {
    /// Requests last at most `limit`.
    pub(crate) fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline {
            inner,
            limit: self.limit,
        }
    }
}

/// The service of [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub(crate) struct Deadline<S> {
    inner: S,
    limit: Duration,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Deadline<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shape = ErrorShape::for_path(req.uri().path());
        let deadline = Instant::now() + self.limit;
        ResponseFuture {
            inner: self.inner.call(req),
            sleep: Timer::at(deadline),
            deadline,
            limit: self.limit,
            shape,
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`Deadline`].
    pub(crate) struct ResponseFuture<F> {
        #[pin]
        inner: F,
        // Polled only when it may have fired (`Timer`): the head is pending a few times per
        // request while the provider answers.
        #[pin]
        sleep: Timer,
        deadline: Instant,
        limit: Duration,
        shape: ErrorShape,
    }
}

impl<F, ResB, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    ResB: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(result) = this.inner.poll(cx) {
            let (deadline, limit) = (*this.deadline, *this.limit);
            return Poll::Ready(result.map(|res| {
                res.map(|body| {
                    Body::new(UnsyncBoxBody::new(DeadlineBody::new(body, deadline, limit)))
                })
            }));
        }
        ready!(this.sleep.poll_elapsed(cx));
        metrics::counter!("context_relay_gateway_request_deadline_total", "phase" => "head")
            .increment(1);
        tracing::warn!(limit = ?this.limit, "no response head within request_timeout_secs: 504");
        let shape = *this.shape;
        Poll::Ready(Ok(error_response_as(
            shape,
            StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::UpstreamTimeout.name(shape),
            &format!(
                "the request took longer than {:?} (request_timeout_secs)",
                this.limit
            ),
            Body::from,
        )))
    }
}

pin_project_lite::pin_project! {
    /// A response body cut at the request's deadline.
    pub(crate) struct DeadlineBody<B> {
        #[pin]
        inner: B,
        // Made the first time the body waits.
        timer: Option<Pin<Box<Timer>>>,
        deadline: Instant,
        limit: Duration,
    }
}

impl<B> DeadlineBody<B> {
    /// `inner`, failing at `deadline` (`limit` after the request's head).
    pub(crate) fn new(inner: B, deadline: Instant, limit: Duration) -> Self {
        Self {
            inner,
            timer: None,
            deadline,
            limit,
        }
    }
}

impl<B> http_body::Body for DeadlineBody<B>
where
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    // The router's error: boxed as the router's body (`Body::new` takes such a box as it is,
    // and wraps any other body in an error-mapping layer, one more call on every poll).
    type Error = axum::Error;

    // Inlined into its caller, as every wrapper of an answer's body is: hyper polls a stream's
    // body about three times per event (docs/performance.md, "The answer's wrappers inlined").
    #[inline(always)]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(axum::Error::new)));
        }
        let deadline = *this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(Timer::at(deadline)));
        ready!(timer.as_mut().poll_elapsed(cx));
        metrics::counter!("context_relay_gateway_request_deadline_total", "phase" => "body")
            .increment(1);
        tracing::warn!(limit = ?this.limit, "response still streaming at request_timeout_secs: cut");
        Poll::Ready(Some(Err(axum::Error::new(DeadlineExceeded(*this.limit)))))
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
    use http_body::Body as _;
    use http_body_util::{BodyExt, Full, StreamBody};
    use tower::ServiceExt;

    type Item = Result<Frame<Bytes>, BoxError>;

    fn trickle() -> (
        tokio::sync::mpsc::Sender<Item>,
        StreamBody<impl futures_util::Stream<Item = Item>>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|f| (f, rx)) },
            );
        (tx, StreamBody::new(stream))
    }

    /// A provider that never answers gets a 504 in the request's error shape at the deadline.
    #[tokio::test(start_paused = true)]
    async fn no_head_by_the_deadline_is_a_504_in_the_apis_shape() {
        let limit = Duration::from_secs(30);
        let svc = DeadlineLayer::new(limit).layer(tower::service_fn(|_req: Request<()>| async {
            std::future::pending::<Result<Response<Full<Bytes>>, std::convert::Infallible>>().await
        }));
        let started = Instant::now();
        let req = Request::post("/v1/messages").body(()).unwrap();
        let res = svc.oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(started.elapsed(), limit);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "timeout_error");
    }

    /// A stream that keeps trickling (so no idle timeout fires) is cut at the deadline,
    /// counted from the request's head; a stream that ends before it is untouched.
    #[tokio::test(start_paused = true)]
    async fn a_trickling_stream_is_cut_at_the_deadline_counted_from_the_head() {
        let limit = Duration::from_secs(60);
        let (tx, body) = trickle();
        let body = std::sync::Mutex::new(Some(body));
        let svc = DeadlineLayer::new(limit).layer(tower::service_fn(move |_req: Request<()>| {
            let body = body.lock().unwrap().take().unwrap();
            async move {
                // The head takes 20 s of the minute.
                tokio::time::sleep(Duration::from_secs(20)).await;
                Ok::<_, std::convert::Infallible>(Response::new(body))
            }
        }));
        let started = Instant::now();
        let res = svc
            .oneshot(Request::post("/v1/responses").body(()).unwrap())
            .await
            .unwrap();
        let feeder = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                if tx
                    .send(Ok(Frame::data(Bytes::from_static(b"x"))))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        let mut body = std::pin::pin!(res.into_body());
        let mut frames = 0;
        let err = loop {
            match body.as_mut().frame().await.unwrap() {
                Ok(_) => frames += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(started.elapsed(), limit);
        assert_eq!(frames, 7, "frames at 25, 30, … 55 s");
        assert!(err.to_string().contains("request_timeout_secs"), "{err}");
        feeder.abort();

        let done = DeadlineBody::new(Full::new(Bytes::from_static(b"ok")), Instant::now(), limit);
        assert_eq!(done.size_hint().exact(), Some(2));
        assert_eq!(&done.collect().await.unwrap().to_bytes()[..], b"ok");
    }
}
