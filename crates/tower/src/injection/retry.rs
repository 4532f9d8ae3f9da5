//! Sending a request again, once, to the same account: what a repair needs of the request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use std::time::Duration;

use context_relay_core::config::InjectionSlot;
use context_relay_core::decode;
use context_relay_core::portable::ForeignSet;
use context_relay_core::portable::{self, TURN_STATE_HEADER};
use context_relay_core::{ApiShape, HandoffKey};
use http::{HeaderValue, Request, Response, header};
use http_body::Body;
use tower_service::Service;

use super::body::{RequestBody, Tee};

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Sends a new body with the request's method, URI, headers and extensions to a fresh clone of
/// the inner service.
pub(crate) type Resend<B, E> = Box<dyn FnOnce(Bytes) -> BoxFuture<Result<Response<B>, E>> + Send>;

/// What a repair needs: the body that went out, a way to send another, and where to remember
/// that the state it strips is foreign to the serving account.
pub(crate) struct Retry<B, E> {
    pub(crate) shape: ApiShape,
    pub(crate) slot: InjectionSlot,
    pub(crate) sent: Sent,
    pub(crate) resend: Resend<B, E>,
    pub(crate) remember: Option<Remember>,
    /// The request carried an `x-codex-turn-state` header.
    pub(crate) turn_state: bool,
}

impl<B, E> Retry<B, E> {
    /// Whether a repair could change anything: the request may carry account-bound state.
    pub(crate) fn may_repair(&self) -> bool {
        self.turn_state || self.sent.may_be_bound()
    }
}

/// The session a repair belongs to: the state it strips is recorded as foreign to the serving
/// account, so that the next turns are scrubbed instead of rejected again.
pub(crate) struct Remember {
    pub(crate) key: HandoffKey,
    /// The live foreign digests of the session's affinity.
    pub(crate) foreign: ForeignSet,
    /// How long the record is kept (the handoff TTL).
    pub(crate) ttl: Duration,
}

/// The body that went out.
pub(crate) enum Sent {
    /// Read (and possibly rewritten) by the layer: JSON, not compressed.
    Body(Bytes),
    /// Passed through, kept as it went out, possibly compressed with `encoding`.
    Tee {
        tee: Arc<Tee>,
        encoding: Option<HeaderValue>,
        limit: usize,
    },
}

impl Sent {
    /// Whether the body that went out may carry account-bound state: without any, a rejection
    /// cannot be repaired, and a stream need not be held back.
    pub(crate) fn may_be_bound(&self) -> bool {
        let scan = |b: &[u8]| portable::may_carry_bound_state(b);
        match self {
            Sent::Body(b) => scan(b),
            // Compressed: cannot tell without decoding; assume it may.
            Sent::Tee {
                encoding: Some(_), ..
            } => true,
            Sent::Tee { tee, .. } => tee.may_be_bound(),
        }
    }

    /// The JSON that went out, when all of it is known.
    pub(crate) fn json(self) -> Option<Bytes> {
        match self {
            Sent::Body(b) => Some(b),
            Sent::Tee {
                tee,
                encoding,
                limit,
            } => {
                let raw = tee.whole()?;
                match encoding {
                    None => Some(raw),
                    Some(enc) => decode::decode(enc.to_str().ok()?, &raw, limit)
                        .ok()
                        .map(Bytes::from),
                }
            }
        }
    }
}

/// A [`Resend`] for the request whose head is `parts`, through a clone of `inner`.
pub(crate) fn resend<S, B, ResBody>(
    inner: S,
    parts: &http::request::Parts,
) -> Resend<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body + Send + 'static,
    B::Error: Send,
{
    let method = parts.method.clone();
    let uri = parts.uri.clone();
    let version = parts.version;
    let headers = parts.headers.clone();
    let extensions = parts.extensions.clone();
    Box::new(move |body: Bytes| {
        Box::pin(async move {
            let mut headers = headers;
            // A stripped body is forwarded uncompressed, and carries no account-bound state.
            headers.remove(header::CONTENT_ENCODING);
            headers.remove(TURN_STATE_HEADER);
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
            let mut req = Request::new(RequestBody::full(body));
            *req.method_mut() = method;
            *req.uri_mut() = uri;
            *req.version_mut() = version;
            *req.headers_mut() = headers;
            *req.extensions_mut() = extensions;
            let mut inner = inner;
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(req).await
        }) as BoxFuture<_>
    })
}
