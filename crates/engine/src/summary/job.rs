//! The background summary job, once the response of a qualifying turn is complete.
//!
//! A job first reads the captured request body, once, before its first await: from then on it
//! keeps only the selection and the few request fields the summary request needs. It checks
//! the refresh gate against the store, and only then joins the queue: at most
//! `max_queued_generations` jobs wait or run (a job finding the queue full is counted as
//! skipped, `queue_full`, and frees its key), and at most `max_concurrent_generations` run.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use context_relay_core::conversation::Conversation;
use context_relay_core::extractive::extractive_handoff;
use context_relay_core::prompt::{SummarySettings, summary_prompt, summary_request_carrying};
use context_relay_core::select::Selection;
use context_relay_core::session::Opening;
use context_relay_core::touched::merge_entities;
use context_relay_core::{
    ApiShape, HandoffKey, HandoffKind, QuotaSignal, RelayConfig, decode, parse, reply, select,
};
use context_relay_store::InFlightGuard;
use http::{HeaderMap, Uri, header};
use serde_json::{Map, Value};
use tracing::Instrument;

use super::call::{CallResult, call};
use super::compaction;
use super::outcome::{self, Failure, Outcome, SUPERSEDED, Stored};
use super::{Summarizer, SummaryRequest};
use crate::events::RelayEvent;
use crate::extensions::{ComboName, ResolvedAccount, ServingModel, SessionId, Tenant};
use crate::generation::Capture;
use crate::injection::other_conversation;
use crate::metrics;
use crate::relay::Shared;

/// Everything a summary needs, taken when the response qualified.
pub(crate) struct Job {
    pub(crate) shared: Arc<Shared>,
    pub(crate) summarizer: Option<Arc<dyn Summarizer>>,
    pub(crate) config: Arc<RelayConfig>,
    pub(crate) key: HandoffKey,
    pub(crate) shape: ApiShape,
    pub(crate) uri: Uri,
    pub(crate) headers: HeaderMap,
    pub(crate) capture: Arc<Capture>,
    pub(crate) account: ResolvedAccount,
    /// The target the turn was sent to (`provider/model`), when the application told it.
    pub(crate) serving: Option<ServingModel>,
    /// The turn reached the account as the client sent it (the relay neither scrubbed nor
    /// repaired it, nor moved it to another model): a stored chain it named is the serving
    /// account's, and the summary may name it too.
    pub(crate) keeps_chain: bool,
    /// `Generated` (the account nears its limit) or `ModelSwitch` (the session moved to
    /// another model).
    pub(crate) kind: HandoffKind,
    /// The quota signal that qualified the turn (none for a model switch).
    pub(crate) signal: Option<QuotaSignal>,
    // Held until the job ends: the key is in flight for exactly that long.
    pub(crate) guard: InFlightGuard,
}

/// Extra lifetime of a distributed generation lease beyond the summary timeout, so a slow
/// store write after the summary still happens under the lease.
const LEASE_MARGIN: std::time::Duration = std::time::Duration::from_secs(10);

/// The fields of the triggering request a summary request is derived from.
const TRIGGER_FIELDS: [&str; 6] = [
    "model",
    "instructions",
    "system",
    "store",
    "stream",
    "previous_response_id",
];

/// The field of [`TRIGGER_FIELDS`] that names a chain of stored responses.
const CHAIN_FIELDS: [&str; 1] = ["previous_response_id"];

/// What a job keeps of the request: the selection, the fields the summary request needs and
/// the conversation's opening.
struct Prepared {
    selection: Selection,
    trigger: Value,
    opening: Option<Opening>,
    /// Responses `compaction` items of the request, with the digest of their blob.
    compactions: Vec<(Value, u64)>,
    /// The readable ones among them, carried before the summary prompt.
    carried: Vec<Value>,
}

impl Job {
    /// Starts the job in the background with the captured reply of this turn.
    pub(crate) fn start(self, reply: Option<String>) {
        let background = self.shared.background.clone();
        let span = tracing::info_span!(
            "context_relay.generate",
            tenant = &*self.key.tenant,
            session = &*self.key.session,
            combo = context_relay_core::parse::clamp_logged(&self.key.combo),
            account = %self.account.account(),
            kind = self.kind.as_str(),
            used = self.signal.as_ref().map(|s| s.percent_used),
        );
        background.spawn(self.run(reply).instrument(span));
    }

    async fn run(mut self, reply: Option<String>) {
        let started = Instant::now();
        let outcome = self.generate(reply).await;
        self.shared.tell(|| {
            let event = RelayEvent::new(outcome.label())
                .key(&self.key)
                .account(&self.account)
                .handoff(self.kind);
            match outcome {
                Outcome::Skipped(reason) => event.reason(reason),
                Outcome::Extractive(f) => event.reason(f.as_str()),
                _ => event,
            }
        });
        if let Outcome::Skipped(reason) = outcome {
            skipped(reason);
        } else {
            let (label, kind) = (outcome.label(), metrics::kind_label(self.kind));
            ::metrics::counter!(metrics::GENERATIONS, "outcome" => label, "kind" => kind)
                .increment(1);
            ::metrics::histogram!(metrics::GENERATION_SECONDS, "outcome" => label, "kind" => kind)
                .record(started.elapsed().as_secs_f64());
        }
        let shared = &self.shared;
        match outcome.failure() {
            None if outcome == Outcome::Generated => shared.cooldown.clear(&self.key),
            Some(f @ (Failure::Rejected | Failure::Unparseable)) => {
                let wait = shared.cooldown.fail(&self.key, SystemTime::now());
                tracing::warn!(
                    outcome = outcome.label(),
                    why = f.as_str(),
                    cool_down_secs = wait.as_secs(),
                    "no model handoff"
                );
            }
            Some(f) => {
                tracing::info!(
                    outcome = outcome.label(),
                    why = f.as_str(),
                    "no model handoff"
                )
            }
            None => {}
        }
        drop(self.guard);
    }

    async fn generate(&mut self, reply: Option<String>) -> Outcome {
        let Some(prepared) = self.prepare(reply) else {
            return Outcome::Failed(Failure::Unavailable);
        };
        if prepared.selection.is_empty() {
            return Outcome::Skipped("empty");
        }
        let shared = self.shared.clone();
        let message_count = u32::try_from(prepared.selection.source_count).unwrap_or(u32::MAX);
        // A conversation other than the session's primary one has its own handoff.
        self.key = conversation_key(&shared, self.key.clone(), prepared.opening).await;
        let mut prepared = prepared;
        // The compacted context reaches the summary when the serving account can read it.
        let covers_compaction = self.readable_compactions(&mut prepared).await;

        // Refresh gate: a live model handoff written fewer than `refresh_after_messages`
        // messages ago is still good enough. An extractive one never is. A model switch looks
        // at the freshest handoff of either kind: that is what a later switch would inject.
        let existing = match self.kind {
            HandoffKind::ModelSwitch => shared.store.freshest(&self.key).await,
            _ => shared.store.get(&self.key).await,
        };
        let existing = match existing {
            Ok(existing) => existing,
            Err(e) => {
                // Fail open: summarise anyway; the upsert will tell whether the store is back.
                metrics::store_error("get", &e);
                None
            }
        };
        // An account handoff written on another provider (before a model switch) is not fresh
        // for this one's accounts: theirs must cover the work done on the new model.
        // A chained turn (its chain kept) sends a few items: what such turns added since the
        // handoff was written is counted instead of the turn's own items.
        let chained = prepared.trigger.get("previous_response_id").is_some();
        if let Some(h) = &existing
            && h.kind != HandoffKind::Extractive
            && (self.kind == HandoffKind::ModelSwitch
                || *h.from_provider == **self.account.provider())
        {
            let new = match chained {
                true => shared.chained.add(&self.key, message_count),
                false => message_count.saturating_sub(h.message_count),
            };
            if new < self.config.refresh_after_messages {
                return Outcome::Skipped("fresh");
            }
        }

        // The queue: a waiting job holds only its selection.
        let Ok(_slot) = shared.queue.clone().try_acquire_owned() else {
            tracing::warn!("summary queue full; skipping this turn");
            return Outcome::Skipped("queue_full");
        };
        let Ok(_permit) = shared.semaphore.acquire().await else {
            return Outcome::Failed(Failure::Unavailable);
        };
        // Across gateway replicas (redis backend) one replica summarises a key at a time; the
        // process-local registry already guards this one.
        let lease = match shared
            .store
            .begin_generation(&self.key, self.config.summary_timeout * 2 + LEASE_MARGIN)
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
        let mut outcome = self
            .summarise(&prepared, message_count, covers_compaction)
            .await;
        if chained && outcome == Outcome::Generated {
            // Counted again from the handoff just written (a failed summary keeps the count:
            // the next turn in the band tries again, as for any client).
            shared.chained.reset(&self.key);
        }
        // An extractive handoff stands in for an account switch's only: a model switch has
        // the freshest handoff, or the note, to inject.
        if let Outcome::Failed(why) = outcome
            && self.kind == HandoffKind::Generated
            && existing
                .as_ref()
                .is_none_or(|h| h.kind == HandoffKind::Extractive)
            && let Some(handoff) = extractive_handoff(&prepared.selection)
        {
            let stored = self
                .store(
                    handoff,
                    HandoffKind::Extractive,
                    message_count,
                    String::new(),
                    prepared.opening.map(|o| o.digest),
                    false,
                )
                .await;
            // Superseded or failed, the summary's own failure stands (its cool-down too).
            if stored == Stored::Yes {
                outcome = Outcome::Extractive(why);
            }
        }
        if let Some(lease) = lease
            && let Err(e) = shared.store.end_generation(&lease).await
        {
            metrics::store_error("end_generation", &e);
        }
        outcome
    }

    /// Reads the captured request once; what is kept is the selection and the trigger fields.
    fn prepare(&mut self, reply: Option<String>) -> Option<Prepared> {
        let capture = std::mem::replace(&mut self.capture, Arc::new(Capture::new(0)));
        let Some(body) = decoded_body(&capture, &self.headers, self.config.max_body_bytes) else {
            tracing::warn!("request body not available for a summary");
            return None;
        };
        drop(capture);
        let opening = context_relay_core::session::opening(&body);
        let value: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "request body is not JSON");
                return None;
            }
        };
        drop(body);
        let conversation = match Conversation::from_value(self.shape, &value) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "no conversation to summarise");
                return None;
            }
        };
        let selection = select::select(
            &conversation,
            reply.as_deref(),
            self.config.relay_mode,
            self.config.max_messages_for_summary,
        );
        let compactions = compaction::items(self.shape, &value);
        let mut trigger = Map::new();
        if let Value::Object(mut obj) = value {
            for k in TRIGGER_FIELDS {
                // A chain the relay took out of the turn (minted elsewhere) is not the serving
                // account's to read.
                if !self.keeps_chain && CHAIN_FIELDS.contains(&k) {
                    continue;
                }
                if let Some(v) = obj.remove(k) {
                    trigger.insert(k.to_owned(), v);
                }
            }
        }
        Some(Prepared {
            selection,
            trigger: Value::Object(trigger),
            opening,
            compactions,
            carried: Vec::new(),
        })
    }

    /// Puts the request's `compaction` items the serving account can read aside, for the
    /// summary request to carry before its prompt; whether there was any.
    async fn readable_compactions(&self, prepared: &mut Prepared) -> bool {
        let items = std::mem::take(&mut prepared.compactions);
        prepared.carried = compaction::readable(&self.shared, &self.key, items).await;
        !prepared.carried.is_empty()
    }

    /// The summary settings for the serving provider, with the configured overrides: the
    /// provider's own summary model, else the relay's `handoff_model`. Without a summary model
    /// configured, the model that served the turn writes it (the request as
    /// it reached the relay may name another target's model, the combo having fallen through).
    fn settings(&self) -> SummarySettings {
        let shared = &self.shared;
        let mut settings = shared
            .settings_for(self.account.provider())
            .cloned()
            .unwrap_or_default();
        // The relay-wide model, for a provider that names no summary model of its own (one
        // it names is one it serves).
        if settings.model.is_none() && !self.config.handoff_model.trim().is_empty() {
            settings.model = Some(self.config.handoff_model.clone());
        }
        if settings.model.is_none() {
            settings.model = self
                .serving
                .as_ref()
                .and_then(|s| s.model_of(self.account.provider()))
                .map(str::to_owned);
        }
        if settings.stream.is_none() && shared.stream_summaries_for(self.account.provider()) {
            settings.stream = Some(true);
        }
        settings
    }

    async fn summarise(
        &self,
        prepared: &Prepared,
        message_count: u32,
        covers_compaction: bool,
    ) -> Outcome {
        let shared = &self.shared;
        let Some(summarizer) = &self.summarizer else {
            return Outcome::Failed(Failure::Unavailable);
        };
        let settings = self.settings();
        let prompt = summary_prompt(&prepared.selection.text, &prepared.selection.touched_files);
        let mut body = summary_request_carrying(
            self.shape,
            &prepared.trigger,
            &prepared.carried,
            &prompt,
            &settings,
        );
        drop(prompt);
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .or_else(|| prepared.trigger.get("model").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned();
        shared
            .dropped
            .apply(self.account.provider(), &model, &mut body);
        // The provider's own summary model (`[providers.summary] model`) is the target of the
        // call, on the same account: the usage of the call is that model's. (A relay-wide
        // `handoff_model` is not one the provider is known to serve: the target stays the
        // turn's.)
        let provider = self.account.provider();
        let own = shared
            .settings_for(provider)
            .and_then(|s| s.model.as_deref())
            .is_some_and(|m| m == model);
        let serving = match &self.serving {
            Some(s) if own && s.model_of(provider) != Some(model.as_str()) => {
                Some(ServingModel::new(format!("{provider}/{model}")))
            }
            other => other.clone(),
        };
        let make = |bytes: Bytes| SummaryRequest {
            shape: self.shape,
            body: bytes,
            uri: self.uri.clone(),
            headers: SummaryRequest::clean_headers(self.headers.clone()),
            combo: ComboName(self.key.combo.clone()),
            tenant: Tenant(self.key.tenant.clone()),
            session: SessionId(self.key.session.clone()),
            account: self.account.clone(),
            serving: serving.clone(),
        };
        let reply_body = match call(
            summarizer,
            &shared.dropped,
            self.account.provider(),
            &model,
            body,
            make,
            self.config.summary_timeout,
        )
        .await
        {
            CallResult::Reply(b) => b,
            CallResult::Rejected => return Outcome::Failed(Failure::Rejected),
            CallResult::Unavailable => return Outcome::Failed(Failure::Unavailable),
        };
        let Some(mut handoff) =
            reply::summary_text(&reply_body).and_then(|t| parse::parse_handoff(&t))
        else {
            // Cut, or failed in band for a reason that passes: no reason to cool down.
            let why = outcome::unreadable(&reply_body);
            tracing::warn!(
                reply_bytes = reply_body.len(),
                why = why.as_str(),
                "summary reply holds no handoff"
            );
            return Outcome::Failed(why);
        };
        handoff.active_entities =
            merge_entities(&handoff.active_entities, &prepared.selection.touched_files);
        let stored = self
            .store(
                handoff,
                self.kind,
                message_count,
                model,
                prepared.opening.map(|o| o.digest),
                covers_compaction,
            )
            .await;
        match stored {
            Stored::Yes => Outcome::Generated,
            Stored::Superseded => Outcome::Skipped(SUPERSEDED),
            Stored::Failed => Outcome::Failed(Failure::Unavailable),
        }
    }
}

/// The key a summary of the conversation opening with `opening` is stored under: the
/// session's own for its primary conversation (or when the session recorded none), else the
/// conversation's (see the injection side's conversation rule).
async fn conversation_key(
    shared: &Shared,
    key: HandoffKey,
    opening: Option<Opening>,
) -> HandoffKey {
    let Some(opening) = opening else {
        return key;
    };
    let primary = shared.affinity(&key).await.and_then(|a| a.conversation());
    other_conversation(&key, primary, opening).unwrap_or(key)
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

fn skipped(reason: &'static str) {
    ::metrics::counter!(metrics::GENERATIONS_SKIPPED, "reason" => reason).increment(1);
}
