//! The two relay layers of the gateway and the handle on their background work.
//!
//! [`RelayLayers`] builds GenerationLayer and InjectionLayer with one
//! [`ContextRelay`] over one store, with the settings of the configuration (`[relay]` plus
//! each `[combos.relay]`). The gateway keeps one instance, so every proxy stack it builds (one
//! per router) shares the in-flight registry, the cool-downs and the background tracker.
//!
//! GenerationLayer reads usage from the [`QuotaSignal`] the account resolver puts on each
//! response (computed with the provider's configured `quota` kind); it is given a quota source
//! that reads nothing itself, so a provider configured with `quota = "none"` never triggers a
//! summary, and a provider's headers are never read with another provider's rules.
//!
//! [`QuotaSignal`]: context_relay_tower::QuotaSignal

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use context_relay_core::QuotaSignal;
use context_relay_store::HandoffStore;
use context_relay_tower::{
    Background, ContextRelay, ContextRelayBuilder, GenerationLayer, InjectionLayer, RelayConfigs,
};
use http::{HeaderMap, StatusCode};

/// GenerationLayer and InjectionLayer of one gateway.
#[derive(Debug, Clone)]
pub(crate) struct RelayLayers {
    builder: ContextRelayBuilder,
    generation: GenerationLayer,
    injection: InjectionLayer,
    background: Background,
}

impl RelayLayers {
    /// Both layers over `store` with `configs`; summary requests to the providers in
    /// `stream_summaries_for` are sent with `stream: true` (`summary_stream = true`).
    pub(crate) fn new<I, P>(
        store: Arc<dyn HandoffStore>,
        configs: RelayConfigs,
        stream_summaries_for: I,
    ) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<Arc<str>>,
    {
        Self::from_builder(
            ContextRelay::builder(store)
                .configs(configs)
                .stream_summaries_for(stream_summaries_for)
                .quota_source(resolver_signal_only),
        )
    }

    fn from_builder(builder: ContextRelayBuilder) -> Self {
        let relay = builder.clone().build();
        Self {
            builder,
            generation: relay.generation_layer(),
            injection: relay.injection_layer(),
            background: relay.background(),
        }
    }

    /// Tells `activity` the outcome of every summary generation and every skip.
    pub(crate) fn with_activity(self, activity: crate::console::Activity) -> Self {
        Self::from_builder(
            self.builder
                .events(move |e: context_relay_tower::RelayEvent| activity.relay_event(&e)),
        )
    }

    /// Uses `settings` (provider name, `[providers.summary]`) for summary requests.
    pub(crate) fn summary_settings(
        self,
        settings: impl IntoIterator<Item = (String, context_relay_core::prompt::SummarySettings)>,
    ) -> Self {
        let mut builder = self.builder;
        for (provider, s) in settings {
            builder = builder.summary_settings(&provider, s);
        }
        Self::from_builder(builder)
    }

    /// The layers of new relay settings (a configuration reload) over the same relay state:
    /// in-flight summaries, cool-downs and background work carry over.
    pub(crate) fn reconfigured<I, P>(
        &self,
        configs: RelayConfigs,
        stream_summaries_for: I,
        settings: impl IntoIterator<Item = (String, context_relay_core::prompt::SummarySettings)>,
    ) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<Arc<str>>,
    {
        let builder = self
            .builder
            .clone()
            .configs(configs)
            .stream_summaries_for(stream_summaries_for);
        Self::from_builder(builder).summary_settings(settings)
    }

    /// The layer between ComboService and AccountResolver.
    pub(crate) fn generation(&self) -> &GenerationLayer {
        &self.generation
    }

    /// The layer between AccountResolver and the upstream client.
    pub(crate) fn injection(&self) -> &InjectionLayer {
        &self.injection
    }

    /// The handle on both layers' background work (one tracker, shared by both).
    pub(crate) fn background(&self) -> RelayBackground {
        RelayBackground(self.background.clone())
    }
}

/// The relay's own quota source: nothing. The resolver's [`QuotaSignal`] extension, read with
/// the provider's configured kind, is the only reading GenerationLayer acts on.
fn resolver_signal_only(_: StatusCode, _: &HeaderMap, _: SystemTime) -> Option<QuotaSignal> {
    None
}

/// The background work of both relay layers: summaries being generated and stored, claimed
/// handoffs being completed or released, affinities being written. Both layers share one
/// tracker.
///
/// Tests and examples wait for it with [`idle`](Self::idle) instead of sleeping; the gateway
/// waits for it (bounded) on shutdown.
#[derive(Debug, Clone, Default)]
pub struct RelayBackground(Background);

impl RelayBackground {
    /// The tracker both layers spawn their work on.
    pub fn tracker(&self) -> &Background {
        &self.0
    }

    /// Tasks still running.
    pub fn in_flight(&self) -> usize {
        self.0.in_flight()
    }

    /// Waits until no background work is running (work started meanwhile, such as a summary
    /// call passing through the stack, is waited for too).
    pub async fn idle(&self) {
        self.0.idle().await;
    }

    /// [`idle`](Self::idle), giving up after `limit`; `true` when it became idle.
    pub async fn idle_within(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.idle()).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_task_is_counted_once_and_waited_for() {
        let store: Arc<dyn HandoffStore> = Arc::new(context_relay_store::MemoryStore::new());
        let layers = RelayLayers::new(store, RelayConfigs::default(), Vec::<String>::new());
        let bg = layers.background();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let inner = bg.tracker().clone();
        bg.tracker().spawn(async move {
            // Work that starts more work before it ends.
            inner.spawn(async move {
                let _ = rx.await;
            });
        });
        let waiter = tokio::spawn({
            let bg = bg.clone();
            async move { bg.idle().await }
        });
        tokio::task::yield_now().await;
        assert_eq!(bg.in_flight(), 1, "one task, counted once");
        assert!(!bg.idle_within(Duration::from_millis(1)).await);
        tx.send(()).expect("the inner task waits");
        waiter.await.expect("idle returns");
        assert_eq!(bg.in_flight(), 0);
    }

    #[test]
    fn the_layers_read_no_headers_themselves() {
        let mut h = HeaderMap::new();
        h.insert("x-codex-primary-used-percent", "90".parse().unwrap());
        assert_eq!(
            resolver_signal_only(StatusCode::OK, &h, SystemTime::now()),
            None
        );
    }
}
