use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_engine::injection::Tee;
use context_relay_engine::{Attempt, BodyPlan, FactsExt, Relay, RequestFacts, ResolvedAccount};
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::future::ResponseFuture;
use super::read::{Read, read_body};
use super::respond::respond;
use super::retry::resend;
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
        let mut attempt = match &self.relay {
            Some(relay) => relay.attempt(
                req.uri(),
                req.headers(),
                RequestFacts::from_extensions(req.extensions()),
                req.body().size_hint().lower(),
            ),
            // The account goes on the response whatever the relay did.
            None => Attempt::pass(req.extensions().fact::<ResolvedAccount>().cloned()),
        };
        let limit = match attempt.body_plan() {
            BodyPlan::Stream { keep } => return self.stream(req, attempt, keep),
            BodyPlan::Hold { limit } => limit,
        };

        // Slow path: the ready service goes into the future, a fresh clone stays here.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let spare = self.inner.clone();
        ResponseFuture::boxed(Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let body = match read_body(body, limit).await {
                Read::Whole(raw) => {
                    let body = attempt.request_body(&mut parts.headers, raw).await;
                    RequestBody::full(body)
                }
                Read::Partial(body) => {
                    attempt.body_too_large().await;
                    body
                }
            };
            let resend = attempt.may_resend().then(|| resend(spare, &parts));
            // `inner` was polled ready by the caller (clone-and-swap above).
            let result = inner.call(Request::from_parts(parts, body)).await;
            respond(result, attempt, resend, None).await
        }))
    }
}

impl<S> Injection<S> {
    /// The body goes through untouched; when the request may have to be sent again, its frames
    /// are kept (by reference) so that a rejection of its account-bound state can be repaired.
    fn stream<B, ResBody>(
        &mut self,
        req: Request<B>,
        attempt: Attempt,
        keep: Option<Arc<Tee>>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Send,
        ResBody: Body + Send + 'static,
    {
        if !attempt.may_resend() {
            let req = req.map(RequestBody::passthrough);
            return ResponseFuture::direct(self.inner.call(req), attempt, None);
        }
        let (parts, body) = req.into_parts();
        let resend = resend(self.inner.clone(), &parts);
        let req = Request::from_parts(parts, RequestBody::teed(body, keep));
        ResponseFuture::direct(self.inner.call(req), attempt, Some(resend))
    }
}
