use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_engine::{
    BoxError, FactsExt, Relay, RequestFacts, Summarizer, Turn, relay_skips,
};
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::future::ResponseFuture;
use crate::request_body::RequestBody;
use crate::response_body::ResponseBody;
use crate::summarizer::InnerSummarizer;

/// Middleware that writes a handoff in the background when the serving account crosses the
/// handoff threshold. See the [module docs](super) for where it sits and what it does.
pub struct Generation<S> {
    inner: S,
    relay: Option<Relay>,
    /// The summarizer sending through a clone of `inner`, made on first use (its type depends
    /// on the request body type, only known in `call`).
    default_summarizer: Arc<OnceLock<Arc<dyn Summarizer>>>,
}

impl<S: Clone> Clone for Generation<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            relay: self.relay.clone(),
            default_summarizer: self.default_summarizer.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Generation<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("inner", &self.inner)
            .field("relay", &self.relay)
            .finish_non_exhaustive()
    }
}

impl<S> Generation<S> {
    pub(crate) fn from_parts(inner: S, relay: Option<Relay>) -> Self {
        Self {
            inner,
            relay,
            default_summarizer: Arc::default(),
        }
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
    B::Error: Send,
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
        let turn = self.relay.as_ref().map(|relay| {
            let ext = req.extensions();
            // The generation side reads neither the account nor the model (which are set
            // below it): two look-ups fewer on every request.
            let facts = RequestFacts {
                combo: ext.fact(),
                session: ext.fact(),
                tenant: ext.fact(),
                skip: relay_skips(ext),
                ..RequestFacts::default()
            };
            relay.turn(req.uri(), req.headers(), facts)
        });
        let Some(mut turn) = turn.filter(Turn::is_active) else {
            return ResponseFuture::new(self.inner.call(req.map(RequestBody::passthrough)), None);
        };
        turn.summarizer_or(|| {
            self.default_summarizer
                .get_or_init(|| Arc::new(InnerSummarizer::<S, B>::new(self.inner.clone())))
                .clone()
        });
        let req = match turn.take_capture() {
            Some(capture) => req.map(|b| RequestBody::captured(b, capture)),
            None => req.map(RequestBody::passthrough),
        };
        ResponseFuture::new(self.inner.call(req), Some(turn))
    }
}
