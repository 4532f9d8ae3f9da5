//! [`Relay`]: the state every request of a relay shares, and its builder.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use context_relay_core::config::{InjectionSlot, RelayMode};
use context_relay_core::prompt::SummarySettings;
use context_relay_core::quota::QuotaKind;
use context_relay_core::session::SessionSources;
use context_relay_core::{HandoffKey, QuotaSignal, RelayConfig};
use context_relay_store::breaker::{Breaker, Pass};
use context_relay_store::{Affinity, CoolDown, HandoffStore, InFlight};
use foldhash::HashMap;
use http::{HeaderMap, StatusCode};
use tokio::sync::Semaphore;

use crate::background::Background;
use crate::configs::RelayConfigs;
use crate::events::{RelayEvent, RelayEvents};
use crate::quota::{HeaderQuota, QuotaSource};
use crate::summary::Summarizer;
use crate::summary::call::DroppedParams;
use crate::tenant::{SessionMemo, TenantMemo};

/// Default bound on concurrent summary generations, across every request of a relay.
pub const DEFAULT_MAX_CONCURRENT_GENERATIONS: usize = 4;
/// Default bound on summary jobs queued (running or waiting for a concurrency permit); a job
/// that finds the queue full ends and is counted as skipped (`queue_full`).
pub const DEFAULT_MAX_QUEUED_GENERATIONS: usize = 64;

/// The relay's shared state: one store, one configuration, and the parts that must be global
/// across every request (in-flight keys, cool-downs, concurrency bounds, background tasks).
///
/// Cloning is cheap (one `Arc`). Build it with [`Relay::builder`]; every transport adapter
/// (tower layers, a pingora proxy) asks it what to do with a request:
/// a [`turn`](Relay::turn) per client request (the generation side: summarise a session
/// before its account runs out) and an [`attempt`](Relay::attempt) per upstream attempt (the
/// injection side, on the way to the provider).
///
/// ```
/// use std::sync::Arc;
/// use context_relay_engine::Relay;
/// use context_relay_store::MemoryStore;
///
/// let relay = Relay::builder(Arc::new(MemoryStore::new())).threshold(0.8).build();
/// assert_eq!(relay.configs().for_combo("any").handoff_threshold, 0.8);
/// assert_eq!(relay.background().in_flight(), 0);
/// ```
#[derive(Clone)]
pub struct Relay {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

/// What a [`Relay`] holds; the builder holds the same (its `Arc`s are shared by every relay it
/// builds).
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn HandoffStore>,
    /// Opened by a store call a request waited for in vain ([`Shared::bounded`]).
    pub(crate) store_breaker: Arc<Breaker>,
    pub(crate) configs: RelayConfigs,
    pub(crate) background: Background,
    pub(crate) sources: Arc<SessionSources>,
    pub(crate) tenants: Arc<TenantMemo>,
    pub(crate) sessions: Arc<SessionMemo>,
    pub(crate) inflight: Arc<InFlight>,
    pub(crate) cooldown: Arc<CoolDown>,
    /// Items of chained turns toward each key's refresh.
    pub(crate) chained: Arc<crate::summary::chained::ChainedItems>,
    pub(crate) semaphore: Arc<Semaphore>,
    /// Admission of summary jobs (running or waiting).
    pub(crate) queue: Arc<Semaphore>,
    pub(crate) summarizer: Option<Arc<dyn Summarizer>>,
    pub(crate) quota: Arc<dyn QuotaSource>,
    /// The quota rules of providers that have their own (lower-cased name): their responses
    /// are read with these, never with the default source.
    pub(crate) provider_quota: Arc<HashMap<String, QuotaKind>>,
    pub(crate) stream_providers: Arc<[Arc<str>]>,
    /// Summary request settings per provider (lower-cased name).
    pub(crate) settings: Arc<HashMap<String, SummarySettings>>,
    /// Parameters each provider and model refused in summary requests.
    pub(crate) dropped: Arc<DroppedParams>,
    /// Where background outcomes are told, if anywhere.
    pub(crate) events: Option<Arc<dyn RelayEvents>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("backend", &self.store.backend())
            .field("configs", &self.configs)
            .field("custom_summarizer", &self.summarizer.is_some())
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// The affinity of `key`, from the store's cache when it knows, else from the store (a
    /// store error is logged and counted, and reads as none).
    pub(crate) async fn affinity(&self, key: &HandoffKey) -> Option<Affinity> {
        match self.store.cached_affinity(key) {
            Some(a) => a,
            None => match self.bounded("affinity", self.store.affinity(key)).await {
                Ok(a) => a,
                Err(e) => {
                    crate::metrics::store_error("affinity", &e);
                    None
                }
            },
        }
    }

    /// Tells the event sink, if one is set; `make` runs only then.
    pub(crate) fn tell(&self, make: impl FnOnce() -> RelayEvent) {
        if let Some(sink) = &self.events {
            sink.event(make());
        }
    }

    /// The summary settings configured for `provider`.
    pub(crate) fn settings_for(&self, provider: &str) -> Option<&SummarySettings> {
        if self.settings.is_empty() {
            return None;
        }
        self.settings.get(&provider.to_ascii_lowercase())
    }

    /// The quota signal of a response `provider` served: read with the provider's own rules
    /// when it has some ([`RelayBuilder::provider_quota`]), else with the quota source.
    pub(crate) fn quota_signal(
        &self,
        provider: &str,
        status: StatusCode,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Option<QuotaSignal> {
        let own = (!self.provider_quota.is_empty())
            .then(|| self.provider_quota.get(&provider.to_ascii_lowercase()))
            .flatten();
        match own {
            Some(kind) => HeaderQuota(*kind).signal(status, headers, now),
            None => self.quota.signal(status, headers, now),
        }
    }

    /// Whether summary requests to `provider` must ask for a streamed reply.
    pub(crate) fn stream_summaries_for(&self, provider: &str) -> bool {
        self.stream_providers
            .iter()
            .any(|p| p.eq_ignore_ascii_case(provider))
    }
}

impl Relay {
    /// A builder over `store`, with the default configuration (every provider gets handoffs).
    pub fn builder(store: Arc<dyn HandoffStore>) -> RelayBuilder {
        RelayBuilder::new(store)
    }

    /// The store handoffs and affinities live in.
    pub fn store(&self) -> &Arc<dyn HandoffStore> {
        &self.shared.store
    }

    /// The configuration of every combo.
    pub fn configs(&self) -> &RelayConfigs {
        &self.shared.configs
    }

    /// The tracker of the relay's background work (summaries, claim completions and releases,
    /// affinity writes): `idle().await` waits for it.
    pub fn background(&self) -> Background {
        self.shared.background.clone()
    }

    /// The summarizer given to the builder, if any (adapters supply their own default).
    pub fn summarizer(&self) -> Option<&Arc<dyn Summarizer>> {
        self.shared.summarizer.as_ref()
    }

    /// Where session ids are read from.
    pub fn session_sources(&self) -> &SessionSources {
        &self.shared.sources
    }
}

/// Builds a [`Relay`] with consuming setters.
///
/// The builder holds the global parts (in-flight registry, cool-downs, bounds, background
/// tracker) already: every relay built from it (or from its clones) shares them.
///
/// [`configs`](Self::configs) and [`config`](Self::config) set the base configuration; the
/// one-field setters ([`threshold`](Self::threshold), [`providers`](Self::providers),
/// [`ttl`](Self::ttl), …) change the default configuration over that base whatever the order
/// of the calls. Per-combo configurations given with `configs` are complete and kept as they
/// are.
///
/// ```
/// use std::sync::Arc;
/// use context_relay_core::{HandoffKey, RelayConfig};
/// use context_relay_engine::{Relay, RelayConfigs};
/// use context_relay_store::MemoryStore;
///
/// let configs = RelayConfigs::default().with_combo("strict", RelayConfig::default());
/// let store = Arc::new(MemoryStore::new());
/// let a = Relay::builder(store.clone()).threshold(0.7).configs(configs.clone()).build();
/// let b = Relay::builder(store).configs(configs).threshold(0.7).build();
/// for relay in [a, b] {
///     assert_eq!(relay.configs().for_combo("any").handoff_threshold, 0.7);
///     assert_eq!(relay.configs().for_combo("strict").handoff_threshold, 0.85);
/// }
/// ```
#[derive(Clone, Debug)]
pub struct RelayBuilder {
    shared: Shared,
    /// The one-field setters, applied in order to the default configuration at build time.
    edits: DefaultEdits,
}

/// One change to the default configuration.
type DefaultEdit = Arc<dyn Fn(&mut RelayConfig) + Send + Sync>;

/// Changes to the default configuration.
#[derive(Clone, Default)]
struct DefaultEdits(Vec<DefaultEdit>);

impl std::fmt::Debug for DefaultEdits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} default edits", self.0.len())
    }
}

impl RelayBuilder {
    /// A builder over `store`, with the default configuration.
    pub fn new(store: Arc<dyn HandoffStore>) -> Self {
        Self {
            shared: Shared {
                // Its own name: the Redis store has a breaker of its own.
                store_breaker: Arc::new(Breaker::new(
                    "relay",
                    STORE_BREAKER_BACKOFF.0,
                    STORE_BREAKER_BACKOFF.1,
                )),
                store,
                configs: RelayConfigs::default(),
                background: Background::new(),
                sources: Arc::new(SessionSources::default()),
                tenants: Arc::default(),
                sessions: Arc::default(),
                inflight: Arc::new(InFlight::new()),
                cooldown: Arc::new(CoolDown::new()),
                chained: Arc::default(),
                semaphore: Arc::new(Semaphore::new(DEFAULT_MAX_CONCURRENT_GENERATIONS)),
                queue: Arc::new(Semaphore::new(DEFAULT_MAX_QUEUED_GENERATIONS)),
                summarizer: None,
                quota: Arc::new(HeaderQuota::default()),
                provider_quota: Arc::default(),
                stream_providers: Arc::from(Vec::new()),
                settings: Arc::default(),
                dropped: Arc::default(),
                events: None,
            },
            edits: DefaultEdits::default(),
        }
    }

    /// The relay.
    pub fn build(&self) -> Relay {
        let mut shared = self.shared.clone();
        if !self.edits.0.is_empty() {
            let default = shared.configs.default_mut();
            for edit in &self.edits.0 {
                edit(default);
            }
            // `ttl(Duration::ZERO)` and the like are checked as a configuration is.
            *default = RelayConfigs::new(default.clone()).default_config().clone();
        }
        Relay {
            shared: Arc::new(shared),
        }
    }

    /// Changes the default configuration at build time, over whatever base is set.
    fn edit(mut self, edit: impl Fn(&mut RelayConfig) + Send + Sync + 'static) -> Self {
        self.edits.0.push(Arc::new(edit));
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn HandoffStore> {
        &self.shared.store
    }

    /// The tracker of the background work of every relay this builder makes.
    pub fn background(&self) -> Background {
        self.shared.background.clone()
    }

    /// Uses `configs` (default plus per-combo configurations) as the base, in place of what
    /// was set before (call [`threshold`](Self::threshold), [`providers`](Self::providers)
    /// and the like after it).
    pub fn configs(mut self, configs: RelayConfigs) -> Self {
        self.shared.configs = configs;
        self
    }

    /// Uses `config` as the base default configuration (checked as
    /// [`RelayConfigs::new`] checks it).
    pub fn config(mut self, config: RelayConfig) -> Self {
        *self.shared.configs.default_mut() = RelayConfigs::new(config).default_config().clone();
        self
    }

    /// Sets the default handoff threshold; invalid values (not finite, ≤ 0, ≥ 0.95) keep the
    /// default 0.85 with a warning.
    pub fn threshold(self, threshold: f64) -> Self {
        let mut warnings = Vec::new();
        let t = context_relay_core::config::validate_threshold(threshold, &mut warnings);
        for w in warnings {
            tracing::warn!(%w, "invalid relay configuration");
        }
        self.edit(move |c| c.handoff_threshold = t)
    }

    /// Sets the default providers whose accounts get handoffs (`"*"` = any, the default;
    /// empty = none).
    pub fn providers<I, P>(self, providers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        let list: Vec<String> = providers.into_iter().map(Into::into).collect();
        let providers = context_relay_core::config::normalize_providers(&list);
        self.edit(move |c| c.handoff_providers.clone_from(&providers))
    }

    /// Sets the default handoff time to live.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.edit(move |c| c.ttl = ttl)
    }

    /// Sets the default bound on one summary call.
    pub fn summary_timeout(self, timeout: Duration) -> Self {
        self.edit(move |c| c.summary_timeout = timeout)
    }

    /// Sets the default selection mode.
    pub fn relay_mode(self, mode: RelayMode) -> Self {
        self.edit(move |c| c.relay_mode = mode)
    }

    /// Where the handoff goes in Responses API requests, by default.
    pub fn responses_slot(self, slot: InjectionSlot) -> Self {
        self.edit(move |c| c.injection_slot_responses = slot)
    }

    /// Largest request body read for a rewrite or kept for a summary, by default; larger ones
    /// pass through.
    pub fn max_body_bytes(self, max: usize) -> Self {
        let max = max.max(1);
        self.edit(move |c| c.max_body_bytes = max)
    }

    /// Bounds concurrent summary generations (at least 1).
    pub fn max_concurrent_generations(mut self, n: usize) -> Self {
        self.shared.semaphore = Arc::new(Semaphore::new(n.max(1)));
        self
    }

    /// Bounds the summary jobs queued, running or waiting (at least 1; default
    /// [`DEFAULT_MAX_QUEUED_GENERATIONS`]). A job joins the queue after the refresh gate, and
    /// keeps only its selection while it waits.
    pub fn max_queued_generations(mut self, n: usize) -> Self {
        self.shared.queue = Arc::new(Semaphore::new(n.max(1)));
        self
    }

    /// How summary requests to `provider` are made: the summary model, the output limit,
    /// streaming, and extra body parameters (see [`SummarySettings`]).
    pub fn summary_settings(mut self, provider: &str, settings: SummarySettings) -> Self {
        Arc::make_mut(&mut self.shared.settings).insert(provider.to_ascii_lowercase(), settings);
        self
    }

    /// Tells `sink` the outcome of every summary generation and every qualifying turn that
    /// started none (see [`RelayEvent`]).
    pub fn events(mut self, sink: impl RelayEvents) -> Self {
        self.shared.events = Some(Arc::new(sink));
        self
    }

    /// Sends summaries through `summarizer` (without one, an adapter supplies its default).
    pub fn summarizer(mut self, summarizer: impl Summarizer) -> Self {
        self.shared.summarizer = Some(Arc::new(summarizer));
        self
    }

    /// Reads quota signals with `source` (default: [`HeaderQuota`] `auto`), for providers
    /// without rules of their own ([`provider_quota`](Self::provider_quota)).
    pub fn quota_source(mut self, source: impl QuotaSource) -> Self {
        self.shared.quota = Arc::new(source);
        self
    }

    /// Reads the quota of the responses `provider` serves with `kind`'s rules only (the
    /// provider's own headers; [`QuotaKind::None`]: no signal at all, so its accounts never
    /// lead to a quota-driven handoff). A [`QuotaSignal`] response extension still wins.
    pub fn provider_quota(mut self, provider: &str, kind: QuotaKind) -> Self {
        let mut map = (*self.shared.provider_quota).clone();
        map.insert(provider.to_ascii_lowercase(), kind);
        self.shared.provider_quota = Arc::new(map);
        self
    }

    /// Where session ids are read from.
    pub fn session_sources(mut self, sources: SessionSources) -> Self {
        self.shared.sources = Arc::new(sources);
        self
    }

    /// Providers whose backends only answer streamed replies (the ChatGPT Codex backend):
    /// summary requests to them are sent with `stream: true`.
    pub fn stream_summaries_for<I, P>(mut self, providers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<Arc<str>>,
    {
        self.shared.stream_providers = providers.into_iter().map(Into::into).collect();
        self
    }

    /// Tracks background work with `background` (to share one tracker with other relays).
    pub fn with_background(mut self, background: Background) -> Self {
        self.shared.background = background;
        self
    }
}

/// The longest the relay waits for one store call while a request waits for it. A store bounds
/// its own latency (the Redis backend answers or fails within its own limits, well under this;
/// redb and memory answer at once): this bound only keeps a store that never answers (a wrapper
/// of an application's, a hung connection) from holding the request forever. Past it the call
/// counts as failed, and the request goes on as after any store error.
pub(crate) const REQUEST_PATH_STORE_BOUND: std::time::Duration = std::time::Duration::from_secs(3);

/// The first and the longest time the relay leaves a store alone after a call a request
/// waited for went unanswered for [`REQUEST_PATH_STORE_BOUND`]: the back-off doubles from one
/// to the other while the store stays silent.
pub(crate) const STORE_BREAKER_BACKOFF: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(60),
);

impl Shared {
    /// `call`, failed as [`StoreError::Timeout`](context_relay_store::StoreError::Timeout)
    /// past [`REQUEST_PATH_STORE_BOUND`]. Such a timeout opens the store's breaker: for a
    /// back-off ([`STORE_BREAKER_BACKOFF`]) the calls requests would wait for fail at once as
    /// `Unavailable` (the requests pass through without the relay), then one call tries the
    /// store again. A store that stopped answering so delays one request per back-off, not
    /// every request by the bound.
    pub(crate) async fn bounded<T>(
        &self,
        op: &'static str,
        call: context_relay_store::StoreFuture<'_, T>,
    ) -> Result<T, context_relay_store::StoreError> {
        // Tokio's clock, as the bound's: a test that pauses time sees the back-off pass with it.
        let now = || tokio::time::Instant::now().into_std();
        let pass = if self.store_breaker.is_closed() {
            Pass::Closed
        } else {
            match self.store_breaker.check(now(), REQUEST_PATH_STORE_BOUND) {
                Ok(pass) => pass,
                Err(retry_in) => {
                    return Err(context_relay_store::StoreError::Unavailable { op, retry_in });
                }
            }
        };
        match tokio::time::timeout(REQUEST_PATH_STORE_BOUND, call).await {
            Ok(answer) => {
                self.store_breaker.success(pass);
                answer
            }
            Err(_) => {
                self.store_breaker.failure(now(), pass);
                Err(context_relay_store::StoreError::Timeout {
                    op,
                    after: REQUEST_PATH_STORE_BOUND,
                })
            }
        }
    }
}
