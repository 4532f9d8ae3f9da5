use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use context_relay_core::RelayConfig;
use context_relay_core::config::RelayMode;
use context_relay_core::prompt::SummarySettings;
use context_relay_core::session::SessionSources;
use context_relay_store::{CoolDown, HandoffStore, InFlight};
use tokio::sync::Semaphore;
use tower_layer::Layer;

use super::call::DroppedParams;
use super::service::Generation;
use super::shared::Shared;
use crate::background::Background;
use crate::configs::RelayConfigs;
use crate::quota_source::{HeaderQuota, QuotaSource};
use crate::summarizer::{SharedSummarizer, Summarizer};

/// Default bound on concurrent summary generations, across every service of the layer.
pub const DEFAULT_MAX_CONCURRENT_GENERATIONS: usize = 4;
/// Default bound on summary jobs queued (running or waiting for a concurrency permit); a job
/// that finds the queue full ends and is counted as skipped (`queue_full`).
pub const DEFAULT_MAX_QUEUED_GENERATIONS: usize = 64;

/// Applies [`Generation`] to a service: writes handoffs in the background when the serving
/// account crosses the handoff threshold.
///
/// Every service the layer builds shares one in-flight registry, one cool-down table, one
/// concurrency bound and one [`Background`] tracker, so that axum's per-connection clones
/// still generate at most once per key.
#[derive(Clone)]
pub struct GenerationLayer {
    store: Arc<dyn HandoffStore>,
    configs: RelayConfigs,
    inflight: Arc<InFlight>,
    cooldown: Arc<CoolDown>,
    semaphore: Arc<Semaphore>,
    background: Background,
    summarizer: Option<SharedSummarizer>,
    quota: Arc<dyn QuotaSource>,
    sources: Arc<SessionSources>,
    stream_providers: Arc<[Arc<str>]>,
    settings: Arc<HashMap<String, SummarySettings>>,
    dropped: Arc<DroppedParams>,
    queue: Arc<Semaphore>,
}

impl std::fmt::Debug for GenerationLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerationLayer")
            .field("backend", &self.store.backend())
            .field("configs", &self.configs)
            .field("custom_summarizer", &self.summarizer.is_some())
            .finish_non_exhaustive()
    }
}

impl GenerationLayer {
    /// A layer writing handoffs to `store`, with the default configuration.
    pub fn new(store: Arc<dyn HandoffStore>) -> Self {
        Self {
            store,
            configs: RelayConfigs::default(),
            inflight: Arc::new(InFlight::new()),
            cooldown: Arc::new(CoolDown::new()),
            semaphore: Arc::new(Semaphore::new(DEFAULT_MAX_CONCURRENT_GENERATIONS)),
            background: Background::new(),
            summarizer: None,
            quota: Arc::new(HeaderQuota::default()),
            sources: Arc::new(SessionSources::default()),
            stream_providers: Arc::from(Vec::new()),
            settings: Arc::default(),
            dropped: Arc::default(),
            queue: Arc::new(Semaphore::new(DEFAULT_MAX_QUEUED_GENERATIONS)),
        }
    }

    /// Uses `configs` (default plus per-combo configurations).
    pub fn configs(mut self, configs: RelayConfigs) -> Self {
        self.configs = configs;
        self
    }

    /// Uses `config` as the default configuration.
    pub fn config(mut self, config: RelayConfig) -> Self {
        *self.configs.default_mut() = config;
        self
    }

    /// Sets the default handoff threshold; invalid values (not finite, ≤ 0, ≥ 0.95) keep the
    /// default 0.85 with a warning.
    pub fn threshold(mut self, threshold: f64) -> Self {
        let mut warnings = Vec::new();
        let t = context_relay_core::config::validate_threshold(threshold, &mut warnings);
        for w in warnings {
            tracing::warn!(%w, "invalid relay configuration");
        }
        self.configs.default_mut().handoff_threshold = t;
        self
    }

    /// Sets the default providers whose accounts get handoffs (`"*"` = any, empty = none).
    pub fn providers<I, P>(mut self, providers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        let list: Vec<String> = providers.into_iter().map(Into::into).collect();
        self.configs.default_mut().handoff_providers =
            context_relay_core::config::normalize_providers(&list);
        self
    }

    /// Sets the default handoff time to live.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.configs.default_mut().ttl = ttl;
        self
    }

    /// Sets the default bound on one summary call.
    pub fn summary_timeout(mut self, timeout: Duration) -> Self {
        self.configs.default_mut().summary_timeout = timeout;
        self
    }

    /// Sets the default selection mode.
    pub fn relay_mode(mut self, mode: RelayMode) -> Self {
        self.configs.default_mut().relay_mode = mode;
        self
    }

    /// Bounds concurrent summary generations (at least 1).
    pub fn max_concurrent_generations(mut self, n: usize) -> Self {
        self.semaphore = Arc::new(Semaphore::new(n.max(1)));
        self
    }

    /// Bounds the summary jobs queued, running or waiting (at least 1; default
    /// [`DEFAULT_MAX_QUEUED_GENERATIONS`]). A job joins the queue after the refresh gate, and
    /// keeps only its selection while it waits.
    pub fn max_queued_generations(mut self, n: usize) -> Self {
        self.queue = Arc::new(Semaphore::new(n.max(1)));
        self
    }

    /// How summary requests to `provider` are made: the summary model, the output limit,
    /// streaming, and extra body parameters (see [`SummarySettings`]).
    pub fn summary_settings(mut self, provider: &str, settings: SummarySettings) -> Self {
        Arc::make_mut(&mut self.settings).insert(provider.to_ascii_lowercase(), settings);
        self
    }

    /// Sends summaries through `summarizer` instead of the inner service.
    pub fn summarizer(mut self, summarizer: impl Summarizer) -> Self {
        self.summarizer = Some(Arc::new(summarizer));
        self
    }

    /// Reads quota signals with `source` (default: [`HeaderQuota`] `auto`).
    pub fn quota_source(mut self, source: impl QuotaSource) -> Self {
        self.quota = Arc::new(source);
        self
    }

    /// Where session ids are read from.
    pub fn session_sources(mut self, sources: SessionSources) -> Self {
        self.sources = Arc::new(sources);
        self
    }

    /// Providers whose backends only answer streamed replies (the ChatGPT Codex backend):
    /// summary requests to them are sent with `stream: true`.
    pub fn stream_summaries_for<I, P>(mut self, providers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<Arc<str>>,
    {
        self.stream_providers = providers.into_iter().map(Into::into).collect();
        self
    }

    /// The tracker of the summaries this layer runs: `idle().await` waits for them.
    pub fn background(&self) -> Background {
        self.background.clone()
    }

    fn shared(&self) -> Arc<Shared> {
        let summarizer = OnceLock::new();
        if let Some(custom) = &self.summarizer {
            let _ = summarizer.set(custom.clone());
        }
        Arc::new(Shared {
            store: self.store.clone(),
            configs: self.configs.clone(),
            inflight: self.inflight.clone(),
            cooldown: self.cooldown.clone(),
            semaphore: self.semaphore.clone(),
            background: self.background.clone(),
            summarizer,
            quota: self.quota.clone(),
            sources: self.sources.clone(),
            stream_providers: self.stream_providers.clone(),
            settings: self.settings.clone(),
            dropped: self.dropped.clone(),
            queue: self.queue.clone(),
        })
    }
}

impl<S> Layer<S> for GenerationLayer {
    type Service = Generation<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Generation::from_parts(inner, self.shared())
    }
}
