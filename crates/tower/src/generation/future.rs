use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use context_relay_engine::{GenerationTicket, QuotaSignal, ResolvedAccount};
use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;

use crate::response_body::{EndHook, ResponseBody};

pin_project! {
    /// Response future of [`Generation`](super::Generation).
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        ticket: Option<GenerationTicket>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, ticket: Option<GenerationTicket>) -> Self {
        Self { inner, ticket }
    }
}

impl<F, ResBody, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    ResBody: Body,
    ResBody::Data: AsRef<[u8]>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        let hook = this.ticket.take().and_then(|t| {
            let ext = response.extensions();
            t.response(
                response.status(),
                response.headers(),
                ext.get::<ResolvedAccount>(),
                ext.get::<QuotaSignal>().copied(),
            )
        });
        let hook = hook.map(|w| EndHook::Reply(Box::new(w)));
        Poll::Ready(Ok(response.map(|body| ResponseBody::plain(body, hook))))
    }
}
