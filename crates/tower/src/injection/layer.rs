use context_relay_engine::RelayBuilder;
use tower_layer::Layer;

use super::service::Injection;

/// Applies [`Injection`] to a service: on an account switch, makes the body portable and
/// injects the session's handoff.
///
/// Made by [`ContextRelay::injection_layer`](crate::ContextRelay::injection_layer), which holds
/// the settings and shares its state with the relay's
/// [`GenerationLayer`](crate::GenerationLayer).
#[derive(Clone, Debug)]
pub struct InjectionLayer {
    relay: Option<RelayBuilder>,
}

impl InjectionLayer {
    /// The layer over `relay`'s settings; `None`: switched off (it still puts the request's
    /// [`ResolvedAccount`](crate::ResolvedAccount) on the response).
    pub(crate) fn from_relay(relay: Option<RelayBuilder>) -> Self {
        Self { relay }
    }

    /// Whether the layer is switched on (see [`ContextRelay::disabled`](crate::ContextRelay::disabled)).
    pub fn is_enabled(&self) -> bool {
        self.relay.is_some()
    }
}

impl<S> Layer<S> for InjectionLayer {
    type Service = Injection<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Injection::from_parts(inner, self.relay.as_ref().map(RelayBuilder::build))
    }
}
