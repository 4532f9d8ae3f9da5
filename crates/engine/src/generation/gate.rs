//! The gates of a summary: at header time, whether a request can lead to one; on its
//! response, whether it does.

use std::sync::Arc;
use std::time::SystemTime;

use context_relay_core::config::EXHAUSTION;
use context_relay_core::reply::{REPLY_CAP, ReplyCapture};
use context_relay_core::{ApiShape, HandoffKey, HandoffKind, QuotaSignal, RelayConfig, session};
use http::{HeaderMap, StatusCode, Uri, header};

use super::capture::{Capture, ReplyWatch, Trigger};
use super::kept::KeptHeaders;
use crate::action::RelayAction;
use crate::events::RelayEvent;
use crate::extensions::{ComboName, RequestFacts, ResolvedAccount, ServingModel, Tenant};
use crate::metrics;
use crate::relay::{Relay, Shared};
use crate::summary::Summarizer;
use crate::summary::job::{Job, decoded_body};

impl Relay {
    /// At header time: whether the request can lead to a summary. `None` when it cannot
    /// (marked [`SkipRelay`](crate::SkipRelay) or [`SummaryCall`](crate::SummaryCall), no
    /// combo, no API path, generation off): then nothing needs to be kept.
    ///
    /// With a ticket, push the request body's chunks into [`GenerationTicket::capture`] as
    /// they go out, then give the response head to [`GenerationTicket::response`].
    pub(crate) fn generation(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        facts: RequestFacts<'_>,
    ) -> Option<GenerationTicket> {
        if facts.skip {
            return None;
        }
        let combo = facts.combo?.clone();
        let config = self.shared.configs.for_combo_arc(&combo.0);
        if config.handoff_providers.is_empty() || !(config.account_handoff || config.model_switch) {
            return None;
        }
        let shape = ApiShape::from_path(uri.path())?;
        // The tenant and the session are derived only when a response qualifies: most never
        // do. The kept headers hold every header either derivation reads.
        Some(GenerationTicket(Box::new(Pending {
            shared: self.shared.clone(),
            summarizer: self.shared.summarizer.clone(),
            capture: Arc::new(Capture::new(config.max_body_bytes)),
            config,
            combo,
            shape,
            uri: uri.clone(),
            headers: KeptHeaders::keep(headers, &self.shared.sources),
            session: facts.session.map(|s| s.0.clone()),
            tenant: facts.tenant.cloned(),
        })))
    }
}

/// What a request that can lead to a summary leaves for its response to decide on.
///
/// One pointer: it is made for every relayed request and moved with its response future.
pub(crate) struct GenerationTicket(Box<Pending>);

/// What a [`GenerationTicket`] holds.
struct Pending {
    shared: Arc<Shared>,
    summarizer: Option<Arc<dyn Summarizer>>,
    config: Arc<RelayConfig>,
    combo: ComboName,
    shape: ApiShape,
    uri: Uri,
    headers: KeptHeaders,
    session: Option<Arc<str>>,
    /// An explicit tenant; otherwise derived from the kept credential headers.
    tenant: Option<Tenant>,
    capture: Arc<Capture>,
}

impl std::fmt::Debug for GenerationTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerationTicket")
            .field("combo", &self.0.combo)
            .field("shape", &self.0.shape)
            .finish_non_exhaustive()
    }
}

impl GenerationTicket {
    /// The copy of the request body to push the forwarded chunks into.
    pub(crate) fn capture(&self) -> &Arc<Capture> {
        &self.0.capture
    }
    /// Uses the summarizer `default` makes when the relay was built without one.
    pub(crate) fn summarizer_or(&mut self, default: impl FnOnce() -> Arc<dyn Summarizer>) {
        if self.0.summarizer.is_none() {
            self.0.summarizer = Some(default());
        }
    }

    /// The response head is known: the gates that need no store. A 2xx, served by an account
    /// whose provider gets handoffs, with usage in [threshold, 95 %), of a known session that
    /// is neither cooling down nor being summarised already (the refresh gate is the job's).
    ///
    /// The first successful response on a new model (the injection side labelled it
    /// `x-context-relay: model-switch`, see [`RelayAction`]) qualifies whatever the usage, when
    /// the combo has `model_switch` on: the same gates then lead to a handoff of kind
    /// `model-switch` (kept apart from the account-switch one), unless the session has a fresh
    /// one already.
    ///
    /// `served_by` is the account that served (the response's [`ResolvedAccount`]); `signal`
    /// a quota signal the application computed, which wins over the relay's
    /// [`QuotaSource`](crate::QuotaSource). `None` when no summary follows (skips are counted
    /// in [`GENERATIONS_SKIPPED`](crate::metrics::GENERATIONS_SKIPPED)); otherwise push the
    /// reply's chunks into the returned watch.
    pub(crate) fn response(
        self,
        status: StatusCode,
        headers: &HeaderMap,
        served_by: Option<&ResolvedAccount>,
        serving: Option<&ServingModel>,
        signal: Option<QuotaSignal>,
    ) -> Option<ReplyWatch> {
        let t = self.0;
        // Gate 1: the serving account is known. Only a successful turn is summarised: an error
        // reply is no conversation to continue from.
        if !status.is_success() {
            return None;
        }
        let Some(served_by) = served_by else {
            no_account_once();
            return None;
        };
        let allowed = t.config.generates_for(served_by.provider());
        // Gate 2: a service's own signal wins over header parsing.
        let now = SystemTime::now();
        let signal = signal.or_else(|| {
            let provider = served_by.provider();
            t.shared.quota_signal(provider, status, headers, now)
        });
        let used = signal.as_ref().map_or(f64::NAN, |s| s.percent_used);
        let kind = if used >= t.config.handoff_threshold && t.config.account_handoff {
            HandoffKind::Generated
        } else if t.config.model_switch && RelayAction::from_headers(headers).model_switch {
            // The first response on a new model.
            HandoffKind::ModelSwitch
        } else {
            return None;
        };
        // Gate 3: only counted when the turn would otherwise qualify, so that the pass-through
        // path records nothing.
        if !allowed {
            skipped(&t.shared, "provider", None, served_by);
            return None;
        }
        // Gate 4: never spend a summary call on an account about to be cut off.
        if used >= EXHAUSTION {
            skipped(&t.shared, "exhausted", None, served_by);
            return None;
        }
        let kept = t.headers.into_map();
        let sources = &t.shared.sources;
        let tenant = Some(t.shared.tenants.tenant(t.tenant.as_ref(), &kept, &t.uri));
        let mut id = session::identify(&kept, None, sources, t.session, tenant);
        if id.session.is_none() {
            // Clients that send no session header: the session comes from the body.
            let body = decoded_body(&t.capture, &kept, t.config.max_body_bytes);
            if let Some(body) = body {
                id = session::identify(&kept, Some(&body), sources, None, Some(id.tenant));
            }
        }
        let keyless = crate::tenant::keyless(t.tenant.as_ref(), &kept, &t.uri);
        let named = crate::tenant::may_key(id.source.as_ref(), keyless);
        let Some(key) = id.key(t.combo.0).filter(|_| named) else {
            skipped(&t.shared, "no_session", None, served_by);
            return None;
        };
        // Gate 5.
        if t.shared.cooldown.is_cooling(&key, now) {
            skipped(&t.shared, "cooling_down", Some(&key), served_by);
            return None;
        }
        // Gate 6: at most one generation per key.
        let Some(guard) = t.shared.inflight.try_begin(&key) else {
            skipped(&t.shared, "in_flight", Some(&key), served_by);
            return None;
        };
        let is_sse = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let encoding = headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        Some(ReplyWatch::new(Trigger {
            reply: ReplyCapture::encoded(is_sse, REPLY_CAP, encoding),
            job: Job {
                shared: t.shared,
                summarizer: t.summarizer,
                config: t.config,
                key,
                shape: t.shape,
                uri: t.uri,
                headers: kept,
                capture: t.capture,
                account: served_by.clone(),
                serving: serving.cloned(),
                keeps_chain: {
                    let acted = RelayAction::from_headers(headers);
                    !(acted.scrubbed || acted.repaired || acted.model_switch)
                },
                kind,
                // The account's reset bounds an account-switch handoff only.
                signal: signal.filter(|_| kind == HandoffKind::Generated),
                guard,
            },
        }))
    }
}

/// Counts a qualifying turn that starts no summary, and tells the event sink.
fn skipped(
    shared: &Shared,
    reason: &'static str,
    key: Option<&HandoffKey>,
    account: &ResolvedAccount,
) {
    ::metrics::counter!(metrics::GENERATIONS_SKIPPED, "reason" => reason).increment(1);
    shared.tell(|| {
        let event = RelayEvent::new("skipped").reason(reason).account(account);
        match key {
            Some(k) => event.key(k),
            None => event,
        }
    });
}

/// Warns, once per process, of a successful response that reached the generation layer without
/// the account that served it: an application whose resolver sets no [`ResolvedAccount`] gets
/// no handoff at all, and would otherwise never learn why.
fn no_account_once() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "a response reached the generation layer without the account that served it (no ResolvedAccount on the response or its request): no handoff is written for such responses; the account resolver must set one (docs/embedding.md)"
        );
    });
}
