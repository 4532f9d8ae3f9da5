use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_store::Claim;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::shared::Shared;
use crate::metrics;

pin_project! {
    /// The request body [`Injection`](super::Injection) hands to the inner service.
    pub struct RequestBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        // The client's body, untouched (the fast path).
        Passthrough { #[pin] inner: B },
        // A body the layer rewrote (or read whole and forwards as it was).
        Full { data: Option<Bytes> },
        // Frames the layer read before giving up on a rewrite (too large, trailers), then the
        // rest of the client's body.
        Replay {
            buffered: VecDeque<Frame<Bytes>>,
            rest: Pin<Box<B>>,
            rest_done: bool,
        },
    }
}

impl<B> RequestBody<B> {
    pub(crate) fn passthrough(inner: B) -> Self {
        Self {
            kind: Kind::Passthrough { inner },
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    pub(crate) fn replay(
        buffered: VecDeque<Frame<Bytes>>,
        rest: Pin<Box<B>>,
        rest_done: bool,
    ) -> Self {
        Self {
            kind: Kind::Replay {
                buffered,
                rest,
                rest_done,
            },
        }
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Passthrough { inner } => inner.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Replay {
                buffered,
                rest,
                rest_done,
            } => {
                if let Some(frame) = buffered.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                if *rest_done {
                    return Poll::Ready(None);
                }
                let polled = rest.as_mut().poll_frame(cx);
                if let Poll::Ready(None) = polled {
                    *rest_done = true;
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passthrough { inner } => inner.is_end_stream(),
            Kind::Full { data } => data.is_none(),
            Kind::Replay {
                buffered,
                rest,
                rest_done,
            } => buffered.is_empty() && (*rest_done || rest.is_end_stream()),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passthrough { inner } => inner.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Replay {
                buffered,
                rest,
                rest_done,
            } => {
                let buffered_len: u64 = buffered
                    .iter()
                    .filter_map(|f| f.data_ref())
                    .map(|d| d.len() as u64)
                    .sum();
                if *rest_done {
                    return SizeHint::with_exact(buffered_len);
                }
                let r = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(r.lower().saturating_add(buffered_len));
                if let Some(upper) = r.upper() {
                    hint.set_upper(upper.saturating_add(buffered_len));
                }
                hint
            }
        }
    }
}

pin_project! {
    /// The response body [`Injection`](super::Injection) returns.
    ///
    /// When the request carried a claimed handoff, the handoff is deleted as soon as the body
    /// ends successfully, and given back (released) when the body fails or is dropped early.
    pub struct ResponseBody<B> {
        #[pin]
        inner: B,
        hook: Option<ClaimHook>,
    }
}

impl<B: Body> ResponseBody<B> {
    pub(crate) fn new(inner: B, mut hook: Option<ClaimHook>) -> Self {
        // An empty body may never be polled: the request has already succeeded.
        if inner.is_end_stream()
            && let Some(h) = hook.take()
        {
            h.complete();
        }
        Self { inner, hook }
    }
}

impl<B: Body> Body for ResponseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => {
                // The consumer may never poll again after the last frame.
                if this.inner.is_end_stream()
                    && let Some(h) = this.hook.take()
                {
                    h.complete();
                }
            }
            Poll::Ready(None) => {
                if let Some(h) = this.hook.take() {
                    h.complete();
                }
            }
            // Dropping the hook releases the claim.
            Poll::Ready(Some(Err(_))) => drop(this.hook.take()),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A claimed handoff riding on a successful response: completed when the body ends, released
/// when it is dropped first.
pub(crate) struct ClaimHook {
    shared: Arc<Shared>,
    claim: Option<Claim>,
}

impl ClaimHook {
    pub(crate) fn new(shared: Arc<Shared>, claim: Claim) -> Self {
        Self {
            shared,
            claim: Some(claim),
        }
    }

    fn complete(mut self) {
        if let Some(claim) = self.claim.take() {
            let store = self.shared.store.clone();
            self.shared.background.spawn(async move {
                match store.complete(&claim).await {
                    Ok(_) => {
                        ::metrics::counter!(metrics::CONSUMED).increment(1);
                        tracing::info!(session = %claim.record.session, "handoff consumed");
                    }
                    Err(e) => metrics::store_error("complete", &e),
                }
            });
        }
    }
}

impl Drop for ClaimHook {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            release(&self.shared, claim);
        }
    }
}

/// Gives a claimed handoff back so that the next attempt gets it again.
pub(crate) fn release(shared: &Shared, claim: Claim) {
    let store = shared.store.clone();
    shared.background.spawn(async move {
        match store.release(&claim).await {
            Ok(()) => {
                ::metrics::counter!(metrics::RELEASED).increment(1);
                tracing::info!(session = %claim.record.session, "handoff released for a later attempt");
            }
            Err(e) => metrics::store_error("release", &e),
        }
    });
}
