use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use context_relay_engine::{FactsExt, QuotaSignal, ResolvedAccount, ServingModel, Turn};
use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;

use crate::response_body::{EndHook, ResponseBody};

pin_project! {
    /// Response future of [`Generation`](super::Generation).
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        turn: Option<Turn>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, turn: Option<Turn>) -> Self {
        Self { inner, turn }
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
        let hook = this.turn.take().and_then(|mut turn| {
            let ext = response.extensions();
            turn.response(
                response.status(),
                response.headers(),
                ext.fact::<ResolvedAccount>(),
                ext.fact::<ServingModel>(),
                ext.fact::<QuotaSignal>().copied(),
            );
            turn.watches_reply().then_some(EndHook::Turn(turn))
        });
        Poll::Ready(Ok(response.map(|body| ResponseBody::plain(body, hook))))
    }
}
