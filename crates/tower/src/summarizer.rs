//! The summary call: who sends the summary request and returns the reply body.
//!
//! By default [`GenerationLayer`](crate::GenerationLayer) sends it through a clone of the
//! stack below it, marked [`SkipRelay`] and carrying the triggering request's combo, tenant
//! and session, so the account resolver sends it to the session's current account. A custom
//! [`Summarizer`] (for instance a dedicated summary model behind another client) replaces that.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use context_relay_core::ApiShape;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tower_service::Service;

use crate::extensions::{ComboName, SessionId, SkipRelay, Tenant};
use crate::generation::RequestBody;

/// Type-erased error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Largest summary reply body read (a summary is ~800 tokens; SSE framing multiplies it).
pub const MAX_SUMMARY_REPLY_BYTES: usize = 4 * 1024 * 1024;

/// Largest error body kept from a refused summary request.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// One summary request, in the API shape of the request that triggered it.
#[derive(Debug, Clone)]
pub struct SummaryRequest {
    /// API shape of `body`.
    pub shape: ApiShape,
    /// The JSON body (see `context_relay_core::prompt::summary_request`), derived from the
    /// triggering request.
    pub body: Bytes,
    /// URI of the triggering request (the summary goes to the same endpoint).
    pub uri: Uri,
    /// The triggering request's credential, session, API-version and account-routing headers
    /// (`authorization`, `x-api-key`, `anthropic-version`, `anthropic-beta`, `openai-beta`,
    /// `openai-organization`, `openai-project`, `chatgpt-account-id`, `originator`,
    /// `user-agent`, the session headers) and `content-type: application/json`.
    pub headers: HeaderMap,
    /// Combo of the session.
    pub combo: ComboName,
    /// Tenant of the session.
    pub tenant: Tenant,
    /// The session.
    pub session: SessionId,
}

/// Why a summary call gave no reply body.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// The upstream answered with a non-success status.
    #[error("summary request answered with status {status}, expected 2xx")]
    Status {
        /// The status.
        status: StatusCode,
        /// The start of the error body (at most [`MAX_ERROR_BODY_BYTES`]), which may name an
        /// unsupported parameter.
        body: Bytes,
    },
    /// The request could not be sent or its reply not received.
    #[error("summary request failed: {0}")]
    Transport(#[source] BoxError),
    /// The reply body failed or exceeded [`MAX_SUMMARY_REPLY_BYTES`].
    #[error("summary reply body unreadable: {0}")]
    Body(#[source] BoxError),
}

/// The future a [`Summarizer`] returns: the reply body of a 2xx answer.
///
/// A refusal is [`SummaryError::Status`] with the error body: a 400 naming an unsupported
/// parameter is retried once without it, other statuses decide the outcome (408, 429 and 5xx
/// are transient; any other is a rejection that cools the key down).
pub type SummaryFuture = Pin<Box<dyn Future<Output = Result<Bytes, SummaryError>> + Send>>;

/// Sends a summary request and returns the reply body.
///
/// Closures `Fn(SummaryRequest) -> impl Future<Output = Result<Bytes, SummaryError>>` are
/// summarizers too.
pub trait Summarizer: Send + Sync + 'static {
    /// Sends `request`; the generation timeout is applied by the caller.
    fn summarize(&self, request: SummaryRequest) -> SummaryFuture;
}

impl<F, Fut> Summarizer for F
where
    F: Fn(SummaryRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Bytes, SummaryError>> + Send + 'static,
{
    fn summarize(&self, request: SummaryRequest) -> SummaryFuture {
        Box::pin(self(request))
    }
}

/// Headers of the triggering request that must not travel with the summary request: they
/// describe the original body or pin the original turn.
const DROPPED_HEADERS: [&str; 5] = [
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "x-codex-turn-state",
    "accept",
];

impl SummaryRequest {
    /// Headers for the summary request: the triggering request's headers without the ones
    /// bound to its body or turn, with a JSON content type.
    pub fn clean_headers(mut headers: HeaderMap) -> HeaderMap {
        for name in DROPPED_HEADERS {
            headers.remove(name);
        }
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers
    }
}

/// The default summarizer: sends the request through a clone of the inner service.
pub(crate) struct InnerSummarizer<S, B> {
    // A Mutex makes a `Send` but not `Sync` service shareable; it is only held to clone.
    service: Mutex<S>,
    _body: PhantomData<fn(B)>,
}

impl<S, B> InnerSummarizer<S, B> {
    pub(crate) fn new(service: S) -> Self {
        Self {
            service: Mutex::new(service),
            _body: PhantomData,
        }
    }
}

impl<S, B, ResBody> Summarizer for InnerSummarizer<S, B>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body + Send + 'static,
    ResBody::Data: Send,
    ResBody::Error: Into<BoxError>,
{
    fn summarize(&self, request: SummaryRequest) -> SummaryFuture {
        let service = match self.service.lock() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        Box::pin(send(service, request))
    }
}

async fn send<S, B, ResBody>(mut service: S, request: SummaryRequest) -> Result<Bytes, SummaryError>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
    ResBody: Body,
    ResBody::Error: Into<BoxError>,
{
    let SummaryRequest {
        body,
        uri,
        headers,
        combo,
        tenant,
        session,
        ..
    } = request;
    let mut req = Request::new(RequestBody::full(body));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    let ext = req.extensions_mut();
    ext.insert(SkipRelay);
    ext.insert(combo);
    ext.insert(tenant);
    ext.insert(session);

    std::future::poll_fn(|cx| service.poll_ready(cx))
        .await
        .map_err(|e| SummaryError::Transport(e.into()))?;
    let response = service
        .call(req)
        .await
        .map_err(|e| SummaryError::Transport(e.into()))?;
    let status = response.status();
    if !status.is_success() {
        // The body may say which parameter the model refused; a body that cannot be read
        // within the limit says nothing.
        let body = Limited::new(response.into_body(), MAX_ERROR_BODY_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        return Err(SummaryError::Status { status, body });
    }
    let collected = Limited::new(response.into_body(), MAX_SUMMARY_REPLY_BYTES)
        .collect()
        .await
        .map_err(SummaryError::Body)?;
    Ok(collected.to_bytes())
}

/// A shared summarizer.
pub(crate) type SharedSummarizer = Arc<dyn Summarizer>;
