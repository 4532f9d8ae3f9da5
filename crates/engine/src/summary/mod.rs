//! The summary call and job: who sends the summary request, how a refusal is retried, and the
//! background job that turns a qualifying turn into a stored handoff.
//!
//! A transport adapter supplies the [`Summarizer`] (the tower layers send the request through
//! the stack below them, marked [`SummaryCall`](crate::SummaryCall) and naming the account and
//! target that served the turn, so the account resolver sends it there); a custom one (for
//! instance a dedicated summary model
//! behind another client) can be given to the [`RelayBuilder`](crate::RelayBuilder).

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use context_relay_core::ApiShape;
use http::{HeaderMap, HeaderValue, StatusCode, Uri, header};

use crate::extensions::{ComboName, ResolvedAccount, ServingModel, SessionId, Tenant};

pub(crate) mod call;
pub(crate) mod chained;
mod compaction;
pub(crate) mod job;
mod outcome;
mod store;

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
    /// The account that served the turn: the summary must go to it, since the request may
    /// carry state only that account can read (a gateway's resolver sends it there, and
    /// nowhere else).
    pub account: ResolvedAccount,
    /// The target of the call (`provider/model`), when the application told the one the turn
    /// was sent to: that target, or its provider with the provider's own summary model when
    /// one is configured (the call's usage is that model's).
    pub serving: Option<ServingModel>,
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
