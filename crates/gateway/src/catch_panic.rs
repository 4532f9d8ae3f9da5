//! A panic in the service below answered with a response, and the process lives on.
//!
//! It sits inside the request metrics and the access log (see [`routes`](crate::routes)), so a
//! panic's answer is counted, logged and carries its request id like any other. The inner
//! service's body is handed on as it is: tower-http's `CatchPanic` boxes every answer's body
//! (to give a panic's answer the same type), which is one allocation per request and one
//! dynamic call on every poll of the body, and the layer above boxes the body again to name
//! the whole stack's type. Here a panic's answer is built in the inner service's own body type.
//!
//! A panic is caught in `call` and in every poll of the response future; one in the body,
//! after the head went out, is not (the connection's task ends with it, as with tower-http's).

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};

/// What answers a caught panic, given its payload.
pub(crate) type OnPanic<B> = fn(Box<dyn Any + Send + 'static>) -> Response<B>;

/// Wraps a service in [`CatchPanic`].
pub(crate) struct CatchPanicLayer<B> {
    on_panic: OnPanic<B>,
}

impl<B> CatchPanicLayer<B> {
    /// A caught panic is answered with `on_panic`'s response.
    pub(crate) fn new(on_panic: OnPanic<B>) -> Self {
        Self { on_panic }
    }
}

impl<B> Clone for CatchPanicLayer<B> {
    fn clone(&self) -> Self {
        Self {
            on_panic: self.on_panic,
        }
    }
}

impl<B> std::fmt::Debug for CatchPanicLayer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchPanicLayer").finish_non_exhaustive()
    }
}

impl<S, B> Layer<S> for CatchPanicLayer<B> {
    type Service = CatchPanic<S, B>;

    fn layer(&self, inner: S) -> Self::Service {
        CatchPanic {
            inner,
            on_panic: self.on_panic,
        }
    }
}

/// Answers a panic of the inner service (in `call` or while its future is polled) with a
/// response instead of unwinding into the server. See the [module docs](self).
pub(crate) struct CatchPanic<S, B> {
    inner: S,
    on_panic: OnPanic<B>,
}

impl<S: Clone, B> Clone for CatchPanic<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            on_panic: self.on_panic,
        }
    }
}

impl<S: std::fmt::Debug, B> std::fmt::Debug for CatchPanic<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchPanic")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for CatchPanic<S, B>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, B, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        match catch_unwind(AssertUnwindSafe(|| self.inner.call(req))) {
            Ok(future) => ResponseFuture::Polling {
                future,
                on_panic: self.on_panic,
            },
            Err(panic) => ResponseFuture::Panicked {
                answer: std::future::ready(Ok((self.on_panic)(panic))),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`CatchPanic`].
    #[project = ResponseFutureProj]
    pub(crate) enum ResponseFuture<F, B, E> {
        /// The inner service's future, each poll of it guarded.
        Polling {
            #[pin]
            future: F,
            on_panic: OnPanic<B>,
        },
        /// `call` panicked: the answer is ready.
        Panicked {
            #[pin]
            answer: std::future::Ready<Result<Response<B>, E>>,
        },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::Polling { future, on_panic } => {
                match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
                    Ok(poll) => poll,
                    Err(panic) => Poll::Ready(Ok(on_panic(panic))),
                }
            }
            ResponseFutureProj::Panicked { answer } => answer.poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::Full;
    use tower::ServiceExt;

    use super::*;

    type Answer = Response<Full<bytes::Bytes>>;

    fn five_hundred(panic: Box<dyn Any + Send + 'static>) -> Answer {
        let what = panic.downcast_ref::<&str>().copied().unwrap_or("?");
        let mut res = Response::new(Full::from(what.to_owned()));
        *res.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        res
    }

    async fn answer(
        service: impl Service<Request<()>, Response = Answer, Error = Infallible>,
    ) -> (u16, String) {
        use http_body_util::BodyExt;
        let res = match service.oneshot(Request::new(())).await {
            Ok(res) => res,
            Err(never) => match never {},
        };
        let status = res.status().as_u16();
        let body = res.into_body().collect().await.map(|b| b.to_bytes());
        let body = body.map(|b| String::from_utf8_lossy(&b).into_owned());
        (status, body.unwrap_or_default())
    }

    /// A service whose `call` panics before it returns a future.
    #[derive(Clone)]
    struct PanicsInCall;

    impl Service<Request<()>> for PanicsInCall {
        type Response = Answer;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Answer, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            panic!("in call")
        }
    }

    #[tokio::test]
    async fn a_panic_in_call_or_in_the_future_is_answered_and_an_answer_passes_as_it_is() {
        let layer = CatchPanicLayer::new(five_hundred);
        assert_eq!(
            answer(layer.layer(PanicsInCall)).await,
            (500, "in call".to_owned())
        );

        let in_future = tower::service_fn(|_: Request<()>| async {
            if true {
                panic!("in the future");
            }
            Ok::<Answer, Infallible>(Response::new(Full::default()))
        });
        assert_eq!(
            answer(layer.layer(in_future)).await,
            (500, "in the future".to_owned())
        );

        // A future that is pending first and panics on a later poll.
        let later = tower::service_fn(|_: Request<()>| async {
            tokio::task::yield_now().await;
            if true {
                panic!("later");
            }
            Ok::<Answer, Infallible>(Response::new(Full::default()))
        });
        assert_eq!(answer(layer.layer(later)).await, (500, "later".to_owned()));

        let fine = tower::service_fn(|_: Request<()>| async {
            let mut res = Response::new(Full::from("fine"));
            *res.status_mut() = http::StatusCode::ACCEPTED;
            Ok::<Answer, Infallible>(res)
        });
        assert_eq!(answer(layer.layer(fine)).await, (202, "fine".to_owned()));
    }
}
