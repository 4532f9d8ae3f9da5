use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use context_relay_engine::{Attempt, ResponsePlan};
use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;

use super::respond::{finish, respond};
use super::retry::{BoxFuture, Resend};
use crate::response_body::ResponseBody;

pin_project! {
    /// Response future of [`Injection`](super::Injection).
    pub struct ResponseFuture<F, B: Body, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B: Body, E> {
        // The body went through untouched: the inner future, polled in place.
        Direct {
            #[pin]
            inner: F,
            attempt: Option<Attempt>,
            resend: Option<Resend<B, E>>,
        },
        // The slow path (body read and rewritten), or a response that must wait (a claim to
        // give back, a look ahead).
        Boxed { fut: BoxFuture<Result<Response<ResponseBody<B>>, E>> },
    }
}

impl<F, B: Body, E> ResponseFuture<F, B, E> {
    pub(crate) fn direct(inner: F, attempt: Attempt, resend: Option<Resend<B, E>>) -> Self {
        Self {
            kind: Kind::Direct {
                inner,
                attempt: Some(attempt),
                resend,
            },
        }
    }

    pub(crate) fn boxed(fut: BoxFuture<Result<Response<ResponseBody<B>>, E>>) -> Self {
        Self {
            kind: Kind::Boxed { fut },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body + Send + 'static,
    B::Data: AsRef<[u8]> + Send,
    B::Error: Send,
    E: Send + 'static,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let next = match self.as_mut().project().kind.project() {
            KindProj::Boxed { fut } => return fut.as_mut().poll(cx),
            KindProj::Direct {
                inner,
                attempt,
                resend,
            } => {
                let result = ready!(inner.poll(cx));
                let Some(mut a) = attempt.take() else {
                    // Polled again after it completed.
                    return Poll::Pending;
                };
                let plan = match &result {
                    Ok(r) => a.response_head_now(r.status(), r.headers()),
                    Err(_) => None,
                };
                if let (Some(ResponsePlan::Forward), Ok(_)) = (plan, &result) {
                    return Poll::Ready(result.map(|r| finish(r, a)));
                }
                Box::pin(respond(result, a, resend.take(), plan))
            }
        };
        self.as_mut().project().kind.set(Kind::Boxed { fut: next });
        match self.project().kind.project() {
            KindProj::Boxed { fut } => fut.as_mut().poll(cx),
            KindProj::Direct { .. } => Poll::Pending,
        }
    }
}
