use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_core::{ApiShape, HandoffKey, session};
use context_relay_store::HandoffStore;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::{RequestBody, ResponseBody};
use super::future::{After, ResponseFuture};
use super::layer::InjectionLayer;
use super::prepare::{Prepare, prepare};
use super::shared::Shared;
use crate::extensions::{ComboName, ResolvedAccount, SessionId, SkipRelay};

/// Middleware that makes a request portable and injects the session's handoff when the
/// request was resolved to a different account. See the [module docs](super).
pub struct Injection<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: Clone> Clone for Injection<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Injection<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injection")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> Injection<S> {
    pub(crate) fn from_parts(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
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
    ResBody: Body + Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let ext = req.extensions();
        let (Some(combo), Some(account)) = (ext.get::<ComboName>(), ext.get::<ResolvedAccount>())
        else {
            return self.passthrough(req, None);
        };
        if ext.get::<SkipRelay>().is_some() {
            return self.passthrough(req, None);
        }
        let Some(shape) = ApiShape::from_path(req.uri().path()) else {
            return self.passthrough(req, None);
        };
        let combo = combo.0.clone();
        let account = account.clone();
        let tenant = self.shared.tenants.tenant(ext, req.headers());
        let header_session: Option<Arc<str>> = match ext.get::<SessionId>() {
            Some(s) => Some(s.0.clone()),
            None => session::session_id(req.headers(), None, &self.shared.sources)
                .map(|m| Arc::from(m.id)),
        };

        // Fast path (DESIGN §9): the store's in-memory index says no handoff and the affinity
        // cache says no switch; the body is not touched at all.
        if let Some(session) = &header_session
            && let Some(affinity) = self.shared.store.cached_affinity(&tenant, session)
        {
            {
                let same = affinity.as_ref().is_some_and(|a| {
                    a.provider == account.provider && a.account == account.account
                });
                let switch = affinity.is_some() && !same;
                let key = HandoffKey {
                    tenant: tenant.clone(),
                    session: session.clone(),
                    combo: combo.clone(),
                };
                if !switch && !self.shared.store.may_contain(&key) {
                    let after = After {
                        shared: self.shared.clone(),
                        tenant,
                        session: Some(session.clone()),
                        account,
                        record_affinity: !same,
                        claim: None,
                    };
                    return self.passthrough(req, Some(after));
                }
            }
        }

        // Slow path: the ready service goes into the future, a fresh clone stays here.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::prepared(Box::pin(prepare(Prepare {
            shared: self.shared.clone(),
            inner,
            request: req,
            shape,
            combo,
            tenant,
            header_session,
            account,
        })))
    }
}

impl<S> Injection<S> {
    fn passthrough<B>(&mut self, req: Request<B>, after: Option<After>) -> ResponseFuture<S::Future>
    where
        S: Service<Request<RequestBody<B>>>,
    {
        ResponseFuture::direct(self.inner.call(req.map(RequestBody::passthrough)), after)
    }
}
