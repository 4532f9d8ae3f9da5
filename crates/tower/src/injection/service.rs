use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_engine::{Inject, Relay, Repair, RequestFacts, ResolvedAccount, Ticket};
use context_relay_store::HandoffStore;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::future::ResponseFuture;
use super::layer::InjectionLayer;
use super::read::{Read, read_body};
use super::respond::respond;
use super::retry::{Retry, resend};
use crate::request_body::RequestBody;
use crate::response_body::ResponseBody;

/// Middleware that makes a request portable and injects the session's handoff when the
/// request was resolved to a different account. See the [module docs](super).
pub struct Injection<S> {
    inner: S,
    relay: Option<Relay>,
}

impl<S: Clone> Clone for Injection<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            relay: self.relay.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Injection<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injection")
            .field("inner", &self.inner)
            .field("relay", &self.relay)
            .finish_non_exhaustive()
    }
}

impl<S> Injection<S> {
    pub(crate) fn from_parts(inner: S, relay: Option<Relay>) -> Self {
        Self { inner, relay }
    }

    /// Wraps `inner` with the default configuration, reading handoffs from `store`.
    pub fn new(inner: S, store: Arc<dyn HandoffStore>) -> Self {
        use tower_layer::Layer;
        InjectionLayer::new(store).layer(inner)
    }

    /// An [`InjectionLayer`] reading handoffs from `store`.
    pub fn layer(store: Arc<dyn HandoffStore>) -> InjectionLayer {
        InjectionLayer::new(store)
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes `self`, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, ResBody> Service<Request<B>> for Injection<S>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Send,
    ResBody: Body + Send + 'static,
    ResBody::Data: AsRef<[u8]> + Send,
    ResBody::Error: Send,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inject = match &self.relay {
            Some(relay) => relay.inject(
                req.uri(),
                req.headers(),
                RequestFacts::from_extensions(req.extensions()),
                req.body().size_hint().lower(),
            ),
            None => Inject::Pass,
        };
        let decision = match inject {
            Inject::Pass => {
                // The account goes on the response whatever the relay did.
                let account = req.extensions().get::<ResolvedAccount>().cloned();
                return self.forward(req, None, None, account);
            }
            Inject::Forward { ticket, repair } => return self.fast(req, ticket, repair),
            Inject::ReadBody(decision) => decision,
        };

        // Slow path: the ready service goes into the future, a fresh clone stays here.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let spare = self.inner.clone();
        let account = req.extensions().get::<ResolvedAccount>().cloned();
        ResponseFuture::boxed(Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let (body, ticket, repair) = match read_body(body, decision.limit()).await {
                Read::Whole(raw) => {
                    let decided = decision.decide(&mut parts.headers, raw).await;
                    (
                        RequestBody::full(decided.body),
                        decided.ticket,
                        decided.repair,
                    )
                }
                Read::Partial(body) => (body, Some(decision.too_large().await), None),
            };
            let retry = repair.map(|repair| Retry {
                repair,
                resend: resend(spare, &parts),
            });
            // `inner` was polled ready by the caller (clone-and-swap above).
            let result = inner.call(Request::from_parts(parts, body)).await;
            respond(result, ticket, retry, account).await
        }))
    }
}

impl<S> Injection<S> {
    /// The fast path: the body goes through untouched; for an API with account-bound state its
    /// frames are kept (by reference) so that a rejection of that state can be repaired.
    fn fast<B, ResBody>(
        &mut self,
        req: Request<B>,
        ticket: Ticket,
        repair: Option<Box<Repair>>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Send,
        ResBody: Body + Send + 'static,
    {
        let Some(repair) = repair else {
            return self.forward(req, Some(ticket), None, None);
        };
        let (parts, body) = req.into_parts();
        let tee = repair.tee().cloned();
        let retry = Retry {
            repair,
            resend: resend(self.inner.clone(), &parts),
        };
        let req = Request::from_parts(parts, RequestBody::teed(body, tee));
        ResponseFuture::direct(self.inner.call(req), Some(ticket), Some(retry), None)
    }

    /// The body untouched, nothing kept.
    fn forward<B, ResBody>(
        &mut self,
        req: Request<B>,
        ticket: Option<Ticket>,
        retry: Option<Retry<ResBody, S::Error>>,
        account: Option<ResolvedAccount>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
        B: Body,
        ResBody: Body,
    {
        ResponseFuture::direct(
            self.inner.call(req.map(RequestBody::passthrough)),
            ticket,
            retry,
            account,
        )
    }
}
