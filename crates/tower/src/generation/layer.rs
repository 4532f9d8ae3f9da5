use std::sync::Arc;
use std::time::Duration;

use context_relay_core::config::RelayMode;
use context_relay_core::prompt::SummarySettings;
use context_relay_engine::{Background, QuotaSource, RelayBuilder, Summarizer};
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
    /// A layer that passes every request through untouched: the relay switched off without
    /// changing the service type.
    pub fn disabled() -> Self {
        Self {
            relay: None,
            background: Background::new(),
        }
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

    /// Providers whose backends only answer streamed replies (the ChatGPT Codex backend):
    /// summary requests to them are sent with `stream: true`.
    pub fn stream_summaries_for<I, P>(self, providers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<Arc<str>>,
    {
        self.map(|b| b.stream_summaries_for(providers))
    }
}

crate::layer_common::relay_layer_common!(GenerationLayer);

impl<S> Layer<S> for GenerationLayer {
    type Service = Generation<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Generation::from_parts(inner, self.relay.as_ref().map(RelayBuilder::build))
    }
}
