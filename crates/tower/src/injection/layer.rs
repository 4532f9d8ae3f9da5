use std::sync::Arc;

use context_relay_core::RelayConfig;
use context_relay_core::config::InjectionSlot;
use context_relay_core::session::SessionSources;
use context_relay_engine::{Background, RelayBuilder, RelayConfigs};
use context_relay_store::HandoffStore;
use tower_layer::Layer;

use super::service::Injection;

/// Applies [`Injection`] to a service: on an account switch, makes the body portable and
/// injects the session's handoff. [`ContextRelay`](crate::ContextRelay) builds it together
/// with the [`GenerationLayer`](crate::GenerationLayer) over one configuration.
#[derive(Clone, Debug)]
pub struct InjectionLayer {
    relay: Option<RelayBuilder>,
    background: Background,
}

impl InjectionLayer {
    /// A layer reading handoffs from `store`, with the default configuration.
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

    /// A layer that passes every request through untouched (it still puts the request's
    /// [`ResolvedAccount`](crate::ResolvedAccount) on the response): the relay switched off
    /// without changing the service type.
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

    /// Where the handoff goes in Responses API requests, by default.
    pub fn responses_slot(self, slot: InjectionSlot) -> Self {
        self.map(|b| b.responses_slot(slot))
    }

    /// Largest request body read for a rewrite, by default; larger ones pass through.
    pub fn max_body_bytes(self, max: usize) -> Self {
        self.map(|b| b.max_body_bytes(max))
    }

    /// Where session ids are read from.
    pub fn session_sources(self, sources: SessionSources) -> Self {
        self.map(|b| b.session_sources(sources))
    }

    /// The tracker of this layer's background store writes (claim completion and release,
    /// affinity): `idle().await` waits for them.
    pub fn background(&self) -> Background {
        self.background.clone()
    }
}

impl<S> Layer<S> for InjectionLayer {
    type Service = Injection<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Injection::from_parts(inner, self.relay.as_ref().map(RelayBuilder::build))
    }
}
