use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use context_relay_store::Claim;
use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;

use super::body::{ClaimHook, ResponseBody, release};
use super::shared::Shared;
use crate::extensions::ResolvedAccount;
use crate::metrics;

/// The boxed future of the slow path: the inner response plus what to do with it.
pub(crate) type Prepared<T> = Pin<Box<dyn Future<Output = (T, Option<After>)> + Send>>;

pin_project! {
    /// Response future of [`Injection`](super::Injection).
    pub struct ResponseFuture<F>
    where
        F: Future,
    {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F>
    where
        F: Future,
    {
        // The fast path: the inner future, polled in place.
        Direct {
            #[pin]
            inner: F,
            after: Option<After>,
        },
        // The slow path: body read, possibly rewritten, then the inner future.
        Prepared { fut: Prepared<F::Output> },
    }
}

impl<F: Future> ResponseFuture<F> {
    pub(crate) fn direct(inner: F, after: Option<After>) -> Self {
        Self {
            kind: Kind::Direct { inner, after },
        }
    }

    pub(crate) fn prepared(fut: Prepared<F::Output>) -> Self {
        Self {
            kind: Kind::Prepared { fut },
        }
    }
}

impl<F, ResBody, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    ResBody: Body,
{
    type Output = Result<Response<ResponseBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (result, after) = match self.project().kind.project() {
            KindProj::Direct { inner, after } => {
                let result = ready!(inner.poll(cx));
                (result, after.take())
            }
            KindProj::Prepared { fut } => ready!(fut.as_mut().poll(cx)),
        };
        match result {
            Ok(mut response) => {
                let hook = after.and_then(|a| a.on_response(&mut response));
                Poll::Ready(Ok(response.map(|b| ResponseBody::new(b, hook))))
            }
            // The inner error is returned unchanged; a claim it carried is given back.
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// What to do once the response head of a relayed request arrives.
pub(crate) struct After {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tenant: Arc<str>,
    pub(crate) session: Option<Arc<str>>,
    pub(crate) account: ResolvedAccount,
    /// The session's affinity differs from (or is unknown to be) the serving account.
    pub(crate) record_affinity: bool,
    pub(crate) claim: Option<Claim>,
}

impl After {
    fn on_response<B>(mut self, response: &mut Response<B>) -> Option<ClaimHook> {
        if response.extensions().get::<ResolvedAccount>().is_none() {
            response.extensions_mut().insert(self.account.clone());
        }
        let claim = self.claim.take();
        if !response.status().is_success() {
            // The next attempt (e.g. the resolver's retry on another account) gets it again.
            if let Some(claim) = claim {
                release(&self.shared, claim);
            }
            return None;
        }
        if self.record_affinity
            && let Some(session) = self.session.clone()
        {
            {
                let store = self.shared.store.clone();
                let tenant = self.tenant.clone();
                let account = self.account.clone();
                self.shared.background.spawn(async move {
                    if let Err(e) = store
                        .set_affinity(&tenant, &session, &account.provider, &account.account)
                        .await
                    {
                        metrics::store_error("set_affinity", &e);
                    }
                });
            }
        }
        claim.map(|c| ClaimHook::new(self.shared.clone(), c))
    }
}

impl Drop for After {
    fn drop(&mut self) {
        // Inner error or cancelled future: the claim goes back.
        if let Some(claim) = self.claim.take() {
            release(&self.shared, claim);
        }
    }
}
