//! Usage accounting: the tokens providers report in their answers, counted per client,
//! provider, account, model and kind of traffic.
//!
//! Every successful answer of a provider is read as it streams back to the client
//! ([`MeteredBody`], with [`UsageReader`](context_relay_core::usage::UsageReader)): its usage
//! (JSON, or the stream's usage events; cached and reasoning tokens where the provider sends
//! them) is counted when the body ends, and also when it is cut or dropped: what arrived is
//! counted. Labels:
//!
//! - `client`: the `[[clients]]` name (an open gateway counts all its callers as `open`);
//! - `provider`, `account`: the account that answered;
//! - `model`: the model the request was sent for (the target's). A direct `provider/model`
//!   route lets a client name any model: a provider's label takes at most
//!   [`MAX_MODELS_PER_PROVIDER`] distinct names of at most [`MAX_MODEL_LABEL_CHARS`] characters
//!   over a process's life; any other is counted as [`OTHER_MODEL`] (a warning is logged the
//!   first time), so that a provider that answers any name cannot grow the metrics and the
//!   ledger without bound;
//! - `kind`: `client` for client traffic, `summary` for the relay's own summary calls (what
//!   the relay costs).
//!
//! Metrics (counters): `context_relay_gateway_tokens_total{client,provider,account,model,kind,type}`
//! with `type` one of `input`, `cached_input`, `cache_write_input`, `output`,
//! `reasoning_output` (`input` includes the cached and cache-write tokens, `output` the
//! reasoning ones), and `context_relay_gateway_usage_responses_total{client,provider,account,model,kind}`,
//! the answers that reported usage. The same totals are kept in memory for the console and
//! `GET /admin/usage`.

mod body;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use context_relay_core::usage::Usage;
use context_relay_tower::{FactsExt, ResolvedAccount, ServingModel, SummaryCall, Tenant};
use foldhash::HashMap;
use http::Extensions;
use metrics::Counter;
use serde::Serialize;

pub(crate) use body::MeteredBody;

/// Distinct `model` label values kept per provider; later names are counted as
/// [`OTHER_MODEL`].
pub(crate) const MAX_MODELS_PER_PROVIDER: usize = 100;
/// Longest model name kept as a label, in characters; a longer one is counted as
/// [`OTHER_MODEL`].
pub(crate) const MAX_MODEL_LABEL_CHARS: usize = 200;
/// The `model` label of the names past [`MAX_MODELS_PER_PROVIDER`] or
/// [`MAX_MODEL_LABEL_CHARS`].
pub(crate) const OTHER_MODEL: &str = "(other)";

/// Token counts, by type, as the `type` label names them.
const TYPES: [&str; 5] = [
    "input",
    "cached_input",
    "cache_write_input",
    "output",
    "reasoning_output",
];

/// Client traffic, or the relay's own summary calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Traffic {
    /// A client's request.
    Client,
    /// A summary call of the relay.
    Summary,
}

impl Traffic {
    fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Summary => "summary",
        }
    }
}

/// Who one answer's usage is counted for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Labels {
    pub(crate) client: Arc<str>,
    pub(crate) provider: Arc<str>,
    pub(crate) account: Arc<str>,
    /// The target, `provider/model` (shared with the request: no copy per answer).
    pub(crate) serving: Arc<str>,
    pub(crate) kind: Traffic,
}

impl Labels {
    /// The model of the target.
    pub(crate) fn model(&self) -> &str {
        self.serving
            .split_once('/')
            .map_or(&*self.serving, |(_, model)| model)
    }
}

/// The running totals of one label set.
struct Entry {
    labels: Labels,
    responses: AtomicU64,
    tokens: [AtomicU64; 5],
    responses_counter: Counter,
    counters: [Counter; 5],
}

impl Entry {
    fn new(labels: Labels) -> Self {
        let l = &labels;
        let counter = |kind: &'static str| {
            metrics::counter!(
                "context_relay_gateway_tokens_total",
                "client" => l.client.to_string(),
                "provider" => l.provider.to_string(),
                "account" => l.account.to_string(),
                "model" => l.model().to_owned(),
                "kind" => l.kind.as_str(),
                "type" => kind
            )
        };
        let counters = TYPES.map(counter);
        let responses_counter = metrics::counter!(
            "context_relay_gateway_usage_responses_total",
            "client" => l.client.to_string(),
            "provider" => l.provider.to_string(),
            "account" => l.account.to_string(),
            "model" => l.model().to_owned(),
            "kind" => l.kind.as_str()
        );
        Self {
            labels,
            responses: AtomicU64::new(0),
            tokens: Default::default(),
            responses_counter,
            counters,
        }
    }

    fn add(&self, usage: &Usage) {
        let counts = [
            usage.input,
            usage.cached_input,
            usage.cache_write_input,
            usage.output,
            usage.reasoning_output,
        ];
        self.responses.fetch_add(1, Ordering::Relaxed);
        self.responses_counter.increment(1);
        for ((total, counter), n) in self.tokens.iter().zip(&self.counters).zip(counts) {
            total.fetch_add(n, Ordering::Relaxed);
            counter.increment(n);
        }
    }
}

/// One row of [`UsageLedger::rows`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct UsageRow {
    pub(crate) client: String,
    pub(crate) provider: String,
    pub(crate) account: String,
    pub(crate) model: String,
    pub(crate) kind: Traffic,
    /// Answers that reported usage.
    pub(crate) responses: u64,
    pub(crate) input: u64,
    pub(crate) cached_input: u64,
    pub(crate) cache_write_input: u64,
    pub(crate) output: u64,
    pub(crate) reasoning_output: u64,
}

/// The usage counted by a gateway; clones share it (it outlives configuration reloads).
#[derive(Clone, Default)]
pub(crate) struct UsageLedger(Arc<Inner>);

struct Inner {
    /// The gateway has no `[[clients]]`: callers are counted as `open`.
    open: AtomicBool,
    /// The `client` label of an open gateway's callers, made once.
    open_client: Arc<str>,
    /// The label of what is unknown, made once.
    unknown: Arc<str>,
    entries: Mutex<HashMap<Labels, Arc<Entry>>>,
    /// The model labels given per provider (taken inside `entries`' lock, on a new label set
    /// only).
    models: Mutex<HashMap<Arc<str>, foldhash::HashSet<Box<str>>>>,
    /// Whether a model was counted as [`OTHER_MODEL`] yet (warned about once).
    folded: AtomicBool,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            open: AtomicBool::new(false),
            open_client: Arc::from("open"),
            unknown: Arc::from("-"),
            entries: Mutex::default(),
            models: Mutex::default(),
            folded: AtomicBool::new(false),
        }
    }
}

impl std::fmt::Debug for UsageLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageLedger").finish_non_exhaustive()
    }
}

impl UsageLedger {
    /// Whether the gateway runs without `[[clients]]` (set again on a reload).
    pub(crate) fn set_open(&self, open: bool) {
        self.0.open.store(open, Ordering::Relaxed);
    }

    /// The labels of an upstream attempt (its request's extensions), or `None` when it was
    /// not routed to an account.
    pub(crate) fn labels(&self, extensions: &Extensions) -> Option<Labels> {
        let account = extensions.fact::<ResolvedAccount>()?;
        let serving = extensions
            .fact::<ServingModel>()
            .map_or_else(|| self.0.unknown.clone(), |m| m.0.clone());
        // With `[[clients]]` the tenant is the client's name; an open gateway's tenants are
        // keyed hashes, one per credential, which would make a label per caller.
        let client = if self.0.open.load(Ordering::Relaxed) {
            self.0.open_client.clone()
        } else {
            extensions
                .fact::<Tenant>()
                .map_or_else(|| self.0.unknown.clone(), |t| t.0.clone())
        };
        let internal = extensions.get::<SummaryCall>().is_some();
        Some(Labels {
            client,
            provider: account.provider().clone(),
            account: account.account().clone(),
            serving,
            kind: if internal {
                Traffic::Summary
            } else {
                Traffic::Client
            },
        })
    }

    /// Records the models `config` names (its combos' targets, its providers' summary models):
    /// they keep their `model` label whatever names clients sent first (see
    /// [`MAX_MODELS_PER_PROVIDER`]). Called at start and at each reload; a model a reload
    /// removes keeps its label.
    pub(crate) fn know_models(&self, config: &crate::config::Config) {
        let mut models = self.0.models.lock().unwrap_or_else(PoisonError::into_inner);
        let targets = config
            .combos
            .iter()
            .flat_map(|c| &c.targets)
            .map(|t| (t.provider.as_str(), t.model.as_str()));
        let summaries = config
            .providers
            .iter()
            .filter_map(|p| Some((p.name.as_str(), p.summary.as_ref()?.model.as_deref()?)));
        for (provider, model) in targets.chain(summaries) {
            models
                .entry(Arc::from(provider))
                .or_default()
                .insert(model.into());
        }
    }

    /// Counts one answer's usage.
    pub(crate) fn record(&self, labels: Labels, usage: &Usage) {
        let entry = {
            let mut entries = self
                .0
                .entries
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match entries.get(&labels) {
                Some(e) => e.clone(),
                None => {
                    let labels = self.bounded(labels);
                    entries
                        .entry(labels)
                        .or_insert_with_key(|l| Arc::new(Entry::new(l.clone())))
                        .clone()
                }
            }
        };
        entry.add(usage);
    }

    /// `labels`, with its model counted as [`OTHER_MODEL`] when its provider has had
    /// [`MAX_MODELS_PER_PROVIDER`] other names already, or the name is too long for a label.
    fn bounded(&self, mut labels: Labels) -> Labels {
        let mut models = self.0.models.lock().unwrap_or_else(PoisonError::into_inner);
        let known = models.entry(labels.provider.clone()).or_default();
        let model = labels.model();
        if known.contains(model) {
            return labels;
        }
        if known.len() < MAX_MODELS_PER_PROVIDER && model.chars().count() <= MAX_MODEL_LABEL_CHARS {
            known.insert(model.into());
            return labels;
        }
        if !self.0.folded.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                provider = &*labels.provider,
                "usage: a model name past the label limits ({MAX_MODELS_PER_PROVIDER} names per provider, {MAX_MODEL_LABEL_CHARS} characters) is counted as model {OTHER_MODEL:?}, as every later one"
            );
        }
        labels.serving = Arc::from(format!("{}/{OTHER_MODEL}", labels.provider));
        labels
    }

    /// Every label set counted so far with its totals, ordered by client, provider, account,
    /// model and kind.
    pub(crate) fn rows(&self) -> Vec<UsageRow> {
        let entries: Vec<Arc<Entry>> = self
            .0
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut rows: Vec<UsageRow> = entries
            .iter()
            .map(|e| {
                let t = |i: usize| e.tokens[i].load(Ordering::Relaxed);
                let l = &e.labels;
                UsageRow {
                    client: l.client.to_string(),
                    provider: l.provider.to_string(),
                    account: l.account.to_string(),
                    model: l.model().to_owned(),
                    kind: l.kind,
                    responses: e.responses.load(Ordering::Relaxed),
                    input: t(0),
                    cached_input: t(1),
                    cache_write_input: t(2),
                    output: t(3),
                    reasoning_output: t(4),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            let key = |r: &UsageRow| {
                (
                    r.client.clone(),
                    r.provider.clone(),
                    r.account.clone(),
                    r.model.clone(),
                    r.kind.as_str(),
                )
            };
            key(a).cmp(&key(b))
        });
        rows
    }
}

#[cfg(test)]
mod tests;
