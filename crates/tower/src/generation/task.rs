//! The background summary job: DESIGN §4.2–§4.5 once the response of a qualifying turn ended.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use context_relay_core::conversation::Conversation;
use context_relay_core::{ApiShape, HandoffKey, HandoffRecord, QuotaSignal, RelayConfig};
use context_relay_core::{decode, parse, prompt, reply, select};
use context_relay_store::InFlightGuard;
use http::{HeaderMap, Uri, header};
use tracing::Instrument;

use super::body::Capture;
use super::shared::Shared;
use crate::extensions::{ComboName, ResolvedAccount, SessionId, Tenant};
use crate::metrics;
use crate::summarizer::SummaryRequest;

/// Everything a summary needs, taken when the response qualified.
pub(crate) struct Job {
    pub(crate) shared: Arc<Shared>,
    pub(crate) config: Arc<RelayConfig>,
    pub(crate) key: HandoffKey,
    pub(crate) shape: ApiShape,
    pub(crate) uri: Uri,
    pub(crate) headers: HeaderMap,
    pub(crate) capture: Arc<Capture>,
    pub(crate) account: ResolvedAccount,
    pub(crate) signal: QuotaSignal,
    // Held until the job ends: the key is in flight for exactly that long.
    pub(crate) guard: InFlightGuard,
}

/// Extra lifetime of a distributed generation lease beyond the summary timeout, so a slow
/// store write after the summary still happens under the lease.
const LEASE_MARGIN: std::time::Duration = std::time::Duration::from_secs(10);

/// How a generation ended (DESIGN §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Generated,
    Unavailable,
    Unparseable,
    /// Nothing to do: a live handoff is recent enough (gate 5, `fresh`), or another gateway
    /// replica is summarising this key (`in_flight_elsewhere`).
    Skipped(&'static str),
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Generated => "generated",
            Self::Unavailable => "unavailable",
            Self::Unparseable => "unparseable",
            Self::Skipped(_) => "skipped",
        }
    }
}

impl Job {
    /// Starts the job in the background with the captured reply of this turn.
    pub(crate) fn start(self, reply: Option<String>) {
        let background = self.shared.background.clone();
        let span = tracing::info_span!(
            "context_relay.generate",
            tenant = %self.key.tenant,
            session = %self.key.session,
            combo = %self.key.combo,
            account = %self.account.account,
            used = self.signal.percent_used,
        );
        background.spawn(self.run(reply).instrument(span));
    }

    async fn run(self, reply: Option<String>) {
        let started = Instant::now();
        let outcome = self.generate(reply).await;
        let shared = &self.shared;
        if let Outcome::Skipped(reason) = outcome {
            ::metrics::counter!(metrics::GENERATIONS_SKIPPED, "reason" => reason).increment(1);
        } else {
            ::metrics::counter!(metrics::GENERATIONS, "outcome" => outcome.as_str()).increment(1);
            ::metrics::histogram!(metrics::GENERATION_SECONDS, "outcome" => outcome.as_str())
                .record(started.elapsed().as_secs_f64());
        }
        match outcome {
            Outcome::Generated => shared.cooldown.clear(&self.key),
            Outcome::Unparseable => {
                let wait = shared.cooldown.fail(&self.key, SystemTime::now());
                tracing::warn!(cool_down_secs = wait.as_secs(), "summary reply unparseable");
            }
            Outcome::Unavailable | Outcome::Skipped(_) => {}
        }
        drop(self.guard);
    }

    async fn generate(&self, reply: Option<String>) -> Outcome {
        let shared = &self.shared;
        let Ok(_permit) = shared.semaphore.acquire().await else {
            return Outcome::Unavailable;
        };
        let Some(body) = self.request_body() else {
            tracing::debug!("request body not available for a summary");
            return Outcome::Unavailable;
        };
        let conversation = match Conversation::from_slice(self.shape, &body) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "no conversation to summarise");
                return Outcome::Unavailable;
            }
        };
        let selection = select::select(
            &conversation,
            reply.as_deref(),
            self.config.relay_mode,
            self.config.max_messages_for_summary,
        );
        if selection.text.is_empty() {
            tracing::debug!("empty history: nothing to summarise");
            return Outcome::Unavailable;
        }
        let message_count = u32::try_from(selection.source_count).unwrap_or(u32::MAX);

        // Gate 5: a live handoff written fewer than `refresh_after_messages` messages ago is
        // still good enough.
        match shared.store.get(&self.key).await {
            Ok(Some(existing))
                if message_count.saturating_sub(existing.message_count)
                    < self.config.refresh_after_messages =>
            {
                return Outcome::Skipped("fresh");
            }
            Ok(_) => {}
            // Fail open: summarise anyway; the upsert will tell whether the store is back.
            Err(e) => metrics::store_error("get", &e),
        }

        // Across gateway replicas (redis backend) one replica summarises a key at a time; the
        // process-local registry already guards this one.
        let lease = match shared
            .store
            .begin_generation(&self.key, self.config.summary_timeout + LEASE_MARGIN)
            .await
        {
            Ok(Some(lease)) => Some(lease),
            Ok(None) => return Outcome::Skipped("in_flight_elsewhere"),
            // The store is known to be down (its circuit breaker is open): a summary could not
            // be stored, so none is paid for until it is back.
            Err(context_relay_store::StoreError::Unavailable { .. }) => {
                return Outcome::Skipped("store_unavailable");
            }
            Err(e) => {
                metrics::store_error("begin_generation", &e);
                None
            }
        };
        let outcome = self.summarise(&body, &selection, message_count).await;
        if let Some(lease) = lease
            && let Err(e) = shared.store.end_generation(&lease).await
        {
            metrics::store_error("end_generation", &e);
        }
        outcome
    }

    async fn summarise(
        &self,
        body: &Bytes,
        selection: &select::Selection,
        message_count: u32,
    ) -> Outcome {
        let shared = &self.shared;
        let model = if self.config.handoff_model.is_empty() {
            request_model(body).unwrap_or_default()
        } else {
            self.config.handoff_model.clone()
        };
        let stream = shared.stream_summaries_for(&self.account.provider);
        let request = SummaryRequest {
            shape: self.shape,
            body: Bytes::from(prompt::summary_request(
                self.shape,
                &model,
                &selection.text,
                stream,
            )),
            uri: self.uri.clone(),
            headers: SummaryRequest::clean_headers(self.headers.clone()),
            combo: ComboName(self.key.combo.clone()),
            tenant: Tenant(self.key.tenant.clone()),
            session: SessionId(self.key.session.clone()),
        };
        let Some(summarizer) = shared.summarizer.get() else {
            return Outcome::Unavailable;
        };
        let reply_body =
            match tokio::time::timeout(self.config.summary_timeout, summarizer.summarize(request))
                .await
            {
                Ok(Ok(body)) => body,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "summary call failed");
                    return Outcome::Unavailable;
                }
                Err(_) => {
                    tracing::warn!(
                        timeout_secs = self.config.summary_timeout.as_secs(),
                        "summary call timed out"
                    );
                    return Outcome::Unavailable;
                }
            };
        let Some(handoff) = reply::summary_text(&reply_body).and_then(|t| parse::parse_handoff(&t))
        else {
            return Outcome::Unparseable;
        };

        let now = SystemTime::now();
        let ttl_end = now + self.config.ttl;
        let expires_at = match self.signal.resets_at {
            Some(reset) if reset > now && reset < ttl_end => reset,
            _ => ttl_end,
        };
        let record = HandoffRecord {
            version: context_relay_core::handoff::RECORD_VERSION,
            tenant: self.key.tenant.clone(),
            session: self.key.session.clone(),
            combo: self.key.combo.clone(),
            from_provider: self.account.provider.to_string(),
            from_account: self.account.account.to_string(),
            handoff,
            message_count,
            model,
            threshold: self.config.handoff_threshold,
            generated_at: now,
            expires_at,
        };
        match shared.store.upsert(record).await {
            Ok(()) => {
                tracing::info!(messages = message_count, "handoff stored");
                Outcome::Generated
            }
            Err(e) => {
                metrics::store_error("upsert", &e);
                Outcome::Unavailable
            }
        }
    }

    fn request_body(&self) -> Option<Bytes> {
        decoded_body(&self.capture, &self.headers, self.config.max_body_bytes)
    }
}

/// The captured request body, decoded when the client compressed it.
pub(crate) fn decoded_body(capture: &Capture, headers: &HeaderMap, max: usize) -> Option<Bytes> {
    let raw = capture.bytes()?;
    match headers.get(header::CONTENT_ENCODING) {
        None => Some(raw),
        Some(enc) => {
            let enc = enc.to_str().ok()?;
            match decode::decode(enc, &raw, max) {
                Ok(decoded) => Some(Bytes::from(decoded)),
                Err(e) => {
                    tracing::debug!(error = %e, "request body not decodable");
                    None
                }
            }
        }
    }
}

/// The `model` of a request body, for a summary that names no model of its own.
fn request_model(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ModelOnly {
        model: Option<String>,
    }
    serde_json::from_slice::<ModelOnly>(body).ok()?.model
}
