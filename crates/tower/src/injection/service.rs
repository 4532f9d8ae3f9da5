use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use context_relay_core::portable::{ForeignSet, TURN_STATE_HEADER};
use context_relay_core::{ApiShape, HandoffKey, session};
use context_relay_store::{Affinity, HandoffStore};
use http::{Request, Response, header};
use http_body::Body;
use tower_service::Service;

use super::after::After;
use super::body::{RequestBody, ResponseBody, Tee};
use super::future::ResponseFuture;
use super::layer::InjectionLayer;
use super::prepare::{Prepare, prepare};
use super::respond::respond;
use super::retry::{Remember, Retry, Sent, resend};
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
        let ext = req.extensions();
        let (Some(combo), Some(account)) = (ext.get::<ComboName>(), ext.get::<ResolvedAccount>())
        else {
            return self.passthrough(req, None, None);
        };
        if ext.get::<SkipRelay>().is_some() {
            return self.passthrough(req, None, None);
        }
        let Some(shape) = ApiShape::from_path(req.uri().path()) else {
            return self.passthrough(req, None, None);
        };
        let combo = combo.0.clone();
        let account = account.clone();
        let tenant = self.shared.tenants.tenant(ext, req.headers());
        let header_session: Option<Arc<str>> = match ext.get::<SessionId>() {
            Some(s) => Some(s.0.clone()),
            None => session::session_id(req.headers(), None, &self.shared.sources)
                .map(|m| Arc::from(m.id)),
        };

        // Fast path: the store's in-memory index says no handoff, and the affinity cache says
        // the session is on this account with nothing foreign to remove; the body is not read.
        if let Some(session) = &header_session {
            let key = HandoffKey {
                tenant: tenant.clone(),
                session: session.clone(),
                combo: combo.clone(),
            };
            if let Some(affinity) = self.shared.store.cached_affinity(&key) {
                let stays = match &affinity {
                    None => true,
                    Some(a) => {
                        a.is(&account.provider, &account.account)
                            && a.foreign_at(SystemTime::now()).is_none()
                    }
                };
                if stays && !self.shared.store.may_contain(&key) {
                    let mut after = After::new(self.shared.clone(), account);
                    if affinity.is_none() {
                        let a = Affinity::new(
                            after.account.provider.clone(),
                            after.account.account.clone(),
                        );
                        after.record = Some((key.clone(), a));
                    }
                    return self.fast(req, shape, key, after);
                }
            }
        }

        // Slow path: the ready service goes into the future, a fresh clone stays here.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let spare = self.inner.clone();
        let shared = self.shared.clone();
        ResponseFuture::boxed(Box::pin(async move {
            let (result, after, retry) = prepare(Prepare {
                shared,
                inner,
                spare,
                request: req,
                shape,
                combo,
                tenant,
                header_session,
                account,
            })
            .await;
            respond(result, after, retry).await
        }))
    }
}

impl<S> Injection<S> {
    /// The fast path: the body goes through untouched; for an API with account-bound state its
    /// frames are kept (by reference) so that a rejection of that state can be repaired.
    fn fast<B, ResBody>(
        &mut self,
        req: Request<B>,
        shape: ApiShape,
        key: HandoffKey,
        after: After,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Send,
        ResBody: Body + Send + 'static,
    {
        let config = self.shared.configs.for_combo_arc(&key.combo);
        let limit = config.max_body_bytes;
        let bound = matches!(shape, ApiShape::Responses | ApiShape::AnthropicMessages);
        if !bound || req.body().size_hint().lower() > limit as u64 {
            return self.passthrough(req, Some(after), None);
        }
        let (parts, body) = req.into_parts();
        let tee = Tee::new(limit);
        let retry = Retry {
            shape,
            slot: config.injection_slot_responses,
            sent: Sent::Tee {
                tee: tee.clone(),
                encoding: parts.headers.get(header::CONTENT_ENCODING).cloned(),
                limit,
            },
            turn_state: parts.headers.contains_key(TURN_STATE_HEADER),
            resend: resend(self.inner.clone(), &parts),
            remember: Some(Remember {
                key,
                foreign: ForeignSet::default(),
                ttl: config.ttl,
            }),
        };
        let req = Request::from_parts(parts, RequestBody::passthrough(body, Some(tee)));
        ResponseFuture::direct(self.inner.call(req), Some(after), Some(retry))
    }

    fn passthrough<B, ResBody>(
        &mut self,
        req: Request<B>,
        after: Option<After>,
        retry: Option<Retry<ResBody, S::Error>>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
        B: Body,
        ResBody: Body,
    {
        ResponseFuture::direct(
            self.inner
                .call(req.map(|b| RequestBody::passthrough(b, None))),
            after,
            retry,
        )
    }
}
