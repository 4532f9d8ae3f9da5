use context_relay_engine::RelayBuilder;
use tower_layer::Layer;

use super::service::Generation;

/// Applies [`Generation`] to a service: writes handoffs in the background when the serving
/// account crosses the handoff threshold.
///
/// Made by [`ContextRelay::generation_layer`](crate::ContextRelay::generation_layer), which
/// holds the settings: every service it builds shares one in-flight registry, one cool-down
/// table, one concurrency bound and one [`Background`](crate::Background) tracker with the
/// [`InjectionLayer`](crate::InjectionLayer) of the same relay, so that axum's per-connection
/// clones still generate at most once per key.
#[derive(Clone, Debug)]
pub struct GenerationLayer {
    relay: Option<RelayBuilder>,
}

impl GenerationLayer {
    /// The layer over `relay`'s settings; `None`: switched off.
    pub(crate) fn from_relay(relay: Option<RelayBuilder>) -> Self {
        Self { relay }
    }

    /// Whether the layer is switched on (see [`ContextRelay::disabled`](crate::ContextRelay::disabled)).
    pub fn is_enabled(&self) -> bool {
        self.relay.is_some()
    }
}

impl<S> Layer<S> for GenerationLayer {
    type Service = Generation<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Generation::from_parts(inner, self.relay.as_ref().map(RelayBuilder::build))
    }
}
