use std::sync::Arc;
use std::time::Duration;

use context_relay_core::RelayConfig;
use context_relay_core::config::RelayMode;
use context_relay_core::prompt::SummarySettings;
use context_relay_core::session::SessionSources;
use context_relay_engine::{Background, QuotaSource, RelayBuilder, RelayConfigs, Summarizer};
use context_relay_store::HandoffStore;
use tower_layer::Layer;

use super::service::Generation;

/// Applies [`Generation`] to a service: writes handoffs in the background when the serving
/// account crosses the handoff threshold.
///
/// Every service the layer builds shares one in-flight registry, one cool-down table, one
/// concurrency bound and one [`Background`] tracker, so that axum's per-connection clones
/// still generate at most once per key. [`ContextRelay`](crate::ContextRelay) builds it
/// together with the [`InjectionLayer`](crate::InjectionLayer) over one configuration.
#[derive(Clone, Debug)]
pub struct GenerationLayer {
    relay: Option<RelayBuilder>,
    background: Background,
}

impl GenerationLayer {
    /// A layer writing handoffs to `store`, with the default configuration (every provider
    /// gets handoffs).
    pub fn new(store: Arc<dyn HandoffStore>) -> Self {
        Self::from_builder(RelayBuilder::new(store))
    }

    /// A layer over the relay `builder` makes (sharing its state with every other layer made
    /// from it).
    pub fn from_builder(builder: RelayBuilder) -> Self {
        Self {
            background: builder.background(),
            relay: Some(builder),
        }
    }

    /// A layer that passes every request through untouched: the relay switched off without
    /// changing the service type.
    pub fn disabled() -> Self {
        Self {
            relay: None,
            background: Background::new(),
        }
    }

    /// Whether the layer is switched on.
    pub fn is_enabled(&self) -> bool {
        self.relay.is_some()
    }

    fn map(mut self, f: impl FnOnce(RelayBuilder) -> RelayBuilder) -> Self {
        self.relay = self.relay.map(f);
        self
    }

    /// Uses `configs` (default plus per-combo configurations).
    pub fn configs(self, configs: RelayConfigs) -> Self {
        self.map(|b| b.configs(configs))
    }

    /// Uses `config` as the default configuration.
    pub fn config(self, config: RelayConfig) -> Self {
        self.map(|b| b.config(config))
    }

    /// Sets the default handoff threshold; invalid values (not finite, ≤ 0, ≥ 0.95) keep the
    /// default 0.85 with a warning.
    pub fn threshold(self, threshold: f64) -> Self {
        self.map(|b| b.threshold(threshold))
    }

    /// Sets the default providers whose accounts get handoffs (`"*"` = any, the default;
    /// empty = none). A qualifying turn of another provider is counted as skipped
    /// (`reason="provider"`).
    pub fn providers<I, P>(self, providers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        self.map(|b| b.providers(providers))
    }

    /// Sets the default handoff time to live.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.map(|b| b.ttl(ttl))
    }

    /// Sets the default bound on one summary call.
    pub fn summary_timeout(self, timeout: Duration) -> Self {
        self.map(|b| b.summary_timeout(timeout))
    }

    /// Sets the default selection mode.
    pub fn relay_mode(self, mode: RelayMode) -> Self {
        self.map(|b| b.relay_mode(mode))
    }

    /// Bounds concurrent summary generations (at least 1).
    pub fn max_concurrent_generations(self, n: usize) -> Self {
        self.map(|b| b.max_concurrent_generations(n))
    }

    /// Bounds the summary jobs queued, running or waiting (at least 1; default
    /// [`DEFAULT_MAX_QUEUED_GENERATIONS`](super::DEFAULT_MAX_QUEUED_GENERATIONS)). A job joins
    /// the queue after the refresh gate, and keeps only its selection while it waits.
    pub fn max_queued_generations(self, n: usize) -> Self {
        self.map(|b| b.max_queued_generations(n))
    }

    /// How summary requests to `provider` are made: the summary model, the output limit,
    /// streaming, and extra body parameters (see [`SummarySettings`]).
    pub fn summary_settings(self, provider: &str, settings: SummarySettings) -> Self {
        self.map(|b| b.summary_settings(provider, settings))
    }

    /// Sends summaries through `summarizer` instead of the inner service.
    pub fn summarizer(self, summarizer: impl Summarizer) -> Self {
        self.map(|b| b.summarizer(summarizer))
    }

    /// Reads quota signals with `source` (default: [`HeaderQuota`](crate::HeaderQuota)
    /// `auto`).
    pub fn quota_source(self, source: impl QuotaSource) -> Self {
        self.map(|b| b.quota_source(source))
    }

    /// Where session ids are read from.
    pub fn session_sources(self, sources: SessionSources) -> Self {
        self.map(|b| b.session_sources(sources))
    }

    /// Providers whose backends only answer streamed replies (the ChatGPT Codex backend):
    /// summary requests to them are sent with `stream: true`.
    pub fn stream_summaries_for<I, P>(self, providers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<Arc<str>>,
    {
        self.map(|b| b.stream_summaries_for(providers))
    }

    /// The tracker of the summaries this layer runs: `idle().await` waits for them.
    pub fn background(&self) -> Background {
        self.background.clone()
    }
}

impl<S> Layer<S> for GenerationLayer {
    type Service = Generation<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Generation::from_parts(inner, self.relay.as_ref().map(RelayBuilder::build))
    }
}
