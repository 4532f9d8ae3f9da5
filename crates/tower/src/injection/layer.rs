use std::sync::Arc;

use context_relay_core::RelayConfig;
use context_relay_core::config::InjectionSlot;
use context_relay_core::session::SessionSources;
use context_relay_store::HandoffStore;
use tower_layer::Layer;

use super::service::Injection;
use super::shared::Shared;
use crate::background::Background;
use crate::configs::RelayConfigs;
use crate::identity::TenantMemo;

/// Applies [`Injection`] to a service: on an account switch, makes the body portable and
/// injects the session's handoff.
#[derive(Clone)]
pub struct InjectionLayer {
    store: Arc<dyn HandoffStore>,
    configs: RelayConfigs,
    background: Background,
    sources: Arc<SessionSources>,
    tenants: Arc<TenantMemo>,
}

impl std::fmt::Debug for InjectionLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InjectionLayer")
            .field("backend", &self.store.backend())
            .field("configs", &self.configs)
            .finish_non_exhaustive()
    }
}

impl InjectionLayer {
    /// A layer reading handoffs from `store`, with the default configuration.
    pub fn new(store: Arc<dyn HandoffStore>) -> Self {
        Self {
            store,
            configs: RelayConfigs::default(),
            background: Background::new(),
            sources: Arc::new(SessionSources::default()),
            tenants: Arc::default(),
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

    /// Where the handoff goes in Responses API requests, by default.
    pub fn responses_slot(mut self, slot: InjectionSlot) -> Self {
        self.configs.default_mut().injection_slot_responses = slot;
        self
    }

    /// Largest request body read for a rewrite, by default; larger ones pass through.
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.configs.default_mut().max_body_bytes = max.max(1);
        self
    }

    /// Where session ids are read from.
    pub fn session_sources(mut self, sources: SessionSources) -> Self {
        self.sources = Arc::new(sources);
        self
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
        Injection::from_parts(
            inner,
            Arc::new(Shared {
                store: self.store.clone(),
                configs: self.configs.clone(),
                background: self.background.clone(),
                sources: self.sources.clone(),
                tenants: self.tenants.clone(),
            }),
        )
    }
}
