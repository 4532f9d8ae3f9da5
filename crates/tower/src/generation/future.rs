use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::SystemTime;

use context_relay_core::config::EXHAUSTION;
use context_relay_core::reply::{REPLY_CAP, ReplyCapture};
use context_relay_core::{ApiShape, HandoffKey, QuotaSignal, RelayConfig, session};
use http::{HeaderMap, Response, Uri, header};
use pin_project_lite::pin_project;

use super::body::{Capture, ResponseBody, Trigger};
use super::headers::KeptHeaders;
use super::shared::Shared;
use super::task::{Job, decoded_body};
use crate::extensions::{ComboName, ResolvedAccount};
use crate::metrics;

pin_project! {
    /// Response future of [`Generation`](super::Generation).
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        pending: Option<Box<Pending>>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, pending: Option<Box<Pending>>) -> Self {
        Self { inner, pending }
    }
}

impl<F, ResBody, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    ResBody: http_body::Body,
{
    type Output = Result<Response<ResponseBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        let trigger = this.pending.take().and_then(|p| p.qualify(&response));
        Poll::Ready(Ok(response.map(|body| ResponseBody::new(body, trigger))))
    }
}

/// What a relay-eligible request left for its response to decide on.
pub(crate) struct Pending {
    pub(crate) shared: Arc<Shared>,
    pub(crate) config: Arc<RelayConfig>,
    pub(crate) combo: ComboName,
    pub(crate) shape: ApiShape,
    pub(crate) uri: Uri,
    pub(crate) headers: KeptHeaders,
    pub(crate) session: Option<Arc<str>>,
    pub(crate) tenant: Option<Arc<str>>,
    pub(crate) capture: Arc<Capture>,
}

impl Pending {
    /// The gates that need no store: a 2xx of a listed provider, usage in [threshold, 95 %),
    /// a session, no cool-down, no generation in flight (the refresh gate is the job's).
    fn qualify<B>(self, response: &Response<B>) -> Option<Trigger> {
        // Gate 1: the serving account is known. Only a successful turn is summarised: an error
        // reply is no conversation to continue from.
        if !response.status().is_success() {
            return None;
        }
        let account = response.extensions().get::<ResolvedAccount>()?.clone();
        // Gate 2.
        if !self.config.generates_for(&account.provider) {
            return None;
        }
        // Gate 3: a service's own signal wins over header parsing.
        let now = SystemTime::now();
        let signal = match response.extensions().get::<QuotaSignal>() {
            Some(s) => *s,
            None => self
                .shared
                .quota
                .signal(response.status(), response.headers(), now)?,
        };
        if signal.percent_used.is_nan() || signal.percent_used < self.config.handoff_threshold {
            return None;
        }
        // Gate 4: never spend a summary call on an account about to be cut off.
        if signal.percent_used >= EXHAUSTION {
            skipped("exhausted");
            return None;
        }
        let headers = self.headers.into_map();
        let session = match self.session {
            Some(s) => s,
            None => {
                let Some(s) = derive_session(&self.shared, &self.config, &self.capture, &headers)
                else {
                    skipped("no_session");
                    return None;
                };
                s
            }
        };
        let tenant = self
            .tenant
            .unwrap_or_else(|| Arc::from(session::tenant(&headers)));
        let key = HandoffKey {
            tenant,
            session,
            combo: self.combo.0,
        };
        // Gate 6.
        if self.shared.cooldown.is_cooling(&key, now) {
            skipped("cooling_down");
            return None;
        }
        // Gate 7: at most one generation per key.
        let Some(guard) = self.shared.inflight.try_begin(&key) else {
            skipped("in_flight");
            return None;
        };
        let is_sse = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let encoding = response
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        Some(Trigger {
            reply: ReplyCapture::encoded(is_sse, REPLY_CAP, encoding),
            job: Job {
                shared: self.shared,
                config: self.config,
                key,
                shape: self.shape,
                uri: self.uri,
                headers,
                capture: self.capture,
                account,
                signal,
                guard,
            },
        })
    }
}

/// The session id from the headers, else from the request body (clients that send no session
/// header).
fn derive_session(
    shared: &Shared,
    config: &RelayConfig,
    capture: &Capture,
    headers: &HeaderMap,
) -> Option<Arc<str>> {
    let sources = &shared.sources;
    if let Some(m) = session::session_id(headers, None, sources) {
        return Some(Arc::from(m.id));
    }
    let body = decoded_body(capture, headers, config.max_body_bytes)?;
    session::session_id(headers, Some(&body), sources).map(|m| Arc::from(m.id))
}

fn skipped(reason: &'static str) {
    ::metrics::counter!(metrics::GENERATIONS_SKIPPED, "reason" => reason).increment(1);
}
