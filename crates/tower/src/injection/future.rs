use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use context_relay_engine::{ResolvedAccount, Ticket};
use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;

use super::respond::{finish_plain, needs_a_look, respond};
use super::retry::{BoxFuture, Retry};
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
        // The fast path: the inner future, polled in place.
        Direct {
            #[pin]
            inner: F,
            ticket: Option<Ticket>,
            retry: Option<Retry<B, E>>,
            // Labels the response when there is no ticket.
            account: Option<ResolvedAccount>,
        },
        // The slow path (body read and rewritten), or a response that needs a look first.
        Boxed { fut: BoxFuture<Result<Response<ResponseBody<B>>, E>> },
    }
}

impl<F, B: Body, E> ResponseFuture<F, B, E> {
    pub(crate) fn direct(
        inner: F,
        ticket: Option<Ticket>,
        retry: Option<Retry<B, E>>,
        account: Option<ResolvedAccount>,
    ) -> Self {
        Self {
            kind: Kind::Direct {
                inner,
                ticket,
                retry,
                account,
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
                ticket,
                retry,
                account,
            } => {
                let result = ready!(inner.poll(cx));
                let look = match (&result, retry.as_ref()) {
                    (Ok(response), Some(r)) => needs_a_look(response, r),
                    _ => false,
                } || ticket.as_ref().is_some_and(Ticket::carries_handoff);
                if !look {
                    // Nothing to release: a claimed ticket takes `respond`.
                    return Poll::Ready(
                        result.map(|r| finish_plain(r, ticket.take(), account.take())),
                    );
                }
                Box::pin(respond(result, ticket.take(), retry.take(), account.take()))
            }
        };
        self.as_mut().project().kind.set(Kind::Boxed { fut: next });
        match self.project().kind.project() {
            KindProj::Boxed { fut } => fut.as_mut().poll(cx),
            KindProj::Direct { .. } => Poll::Pending,
        }
    }
}
