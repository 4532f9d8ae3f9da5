use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_core::ApiShape;
use context_relay_store::HandoffStore;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::{Capture, RequestBody, ResponseBody};
use super::future::{Pending, ResponseFuture};
use super::layer::GenerationLayer;
use super::shared::Shared;
use crate::extensions::{ComboName, SessionId, SkipRelay, Tenant};
use crate::summarizer::{BoxError, InnerSummarizer};

/// Middleware that writes a handoff in the background when the serving account crosses the
/// handoff threshold. See the [module docs](super) for where it sits and what it does.
pub struct Generation<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: Clone> Clone for Generation<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Generation<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> Generation<S> {
    pub(crate) fn from_parts(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    /// Wraps `inner` with the default configuration, writing handoffs to `store`.
    pub fn new(inner: S, store: Arc<dyn HandoffStore>) -> Self {
        use tower_layer::Layer;
        GenerationLayer::new(store).layer(inner)
    }

    /// A [`GenerationLayer`] writing handoffs to `store`.
    pub fn layer(store: Arc<dyn HandoffStore>) -> GenerationLayer {
        GenerationLayer::new(store)
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

impl<S, B, ResBody> Service<Request<B>> for Generation<S>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body + Send + 'static,
    ResBody::Data: AsRef<[u8]> + Send,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let Some(pending) = self.pending(&req) else {
            return ResponseFuture::new(self.inner.call(req.map(RequestBody::passthrough)), None);
        };
        let capture = pending.capture.clone();
        let req = req.map(|b| RequestBody::tee(b, capture));
        ResponseFuture::new(self.inner.call(req), Some(pending))
    }
}

impl<S> Generation<S> {
    /// What the response will need to decide on a summary, when the request can lead to one.
    fn pending<B, ResBody>(&self, req: &Request<B>) -> Option<Box<Pending>>
    where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body<Data = Bytes> + Send + 'static,
        ResBody: Body + Send + 'static,
        ResBody::Data: Send,
        ResBody::Error: Into<BoxError>,
    {
        let ext = req.extensions();
        if ext.get::<SkipRelay>().is_some() {
            return None;
        }
        let combo = ext.get::<ComboName>()?.clone();
        let config = self.shared.configs.for_combo_arc(&combo.0);
        if config.handoff_providers.is_empty() {
            return None;
        }
        let shape = ApiShape::from_path(req.uri().path())?;
        // Derived from the headers (or body) only when a response qualifies: most never do.
        let session = ext.get::<SessionId>().map(|s| s.0.clone());
        let tenant = ext.get::<Tenant>().map(|t| t.0.clone());
        self.shared
            .summarizer
            .get_or_init(|| Arc::new(InnerSummarizer::<S, B>::new(self.inner.clone())));
        Some(Box::new(Pending {
            shared: self.shared.clone(),
            capture: Arc::new(Capture::new(config.max_body_bytes)),
            config,
            combo,
            shape,
            uri: req.uri().clone(),
            headers: super::headers::keep(req.headers(), &self.shared.sources),
            session,
            tenant,
        }))
    }
}
