use context_relay_core::config::InjectionSlot;
use context_relay_engine::{Background, RelayBuilder};
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
    /// A layer that passes every request through untouched (it still puts the request's
    /// [`ResolvedAccount`](crate::ResolvedAccount) on the response): the relay switched off
    /// without changing the service type.
    pub fn disabled() -> Self {
        Self {
            relay: None,
            background: Background::new(),
        }
    }

    /// Where the handoff goes in Responses API requests, by default.
    pub fn responses_slot(self, slot: InjectionSlot) -> Self {
        self.map(|b| b.responses_slot(slot))
    }

    /// Largest request body read for a rewrite, by default; larger ones pass through.
    pub fn max_body_bytes(self, max: usize) -> Self {
        self.map(|b| b.max_body_bytes(max))
    }
}

crate::layer_common::relay_layer_common!(InjectionLayer);

impl<S> Layer<S> for InjectionLayer {
    type Service = Injection<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Injection::from_parts(inner, self.relay.as_ref().map(RelayBuilder::build))
    }
}
