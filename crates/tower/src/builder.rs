//! [`ServiceBuilder`] methods for the relay layers.

use tower::ServiceBuilder;
use tower_layer::Stack;

use crate::{ContextRelay, GenerationLayer, InjectionLayer};

/// Adds the layers of a [`ContextRelay`] to a [`ServiceBuilder`], each where the stack knows
/// what it needs.
///
/// ```
/// use std::sync::Arc;
/// use context_relay_store::MemoryStore;
/// use context_relay_tower::{ContextRelay, ServiceBuilderExt};
/// use tower::ServiceBuilder;
///
/// let relay = ContextRelay::builder(Arc::new(MemoryStore::new())).threshold(0.8).build();
/// let builder = ServiceBuilder::new()
///     // .layer(combo layer: sets ComboName)
///     .context_relay_generation(&relay)
///     // .layer(account resolver: sets ResolvedAccount)
///     .context_relay_injection(&relay);
/// # let _ = builder;
/// ```
pub trait ServiceBuilderExt<L>: sealed::Sealed<L> + Sized {
    /// Adds `relay`'s [`GenerationLayer`].
    fn context_relay_generation(
        self,
        relay: &ContextRelay,
    ) -> ServiceBuilder<Stack<GenerationLayer, L>>;

    /// Adds `relay`'s [`InjectionLayer`].
    fn context_relay_injection(
        self,
        relay: &ContextRelay,
    ) -> ServiceBuilder<Stack<InjectionLayer, L>>;
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    fn context_relay_generation(
        self,
        relay: &ContextRelay,
    ) -> ServiceBuilder<Stack<GenerationLayer, L>> {
        self.layer(relay.generation_layer())
    }

    fn context_relay_injection(
        self,
        relay: &ContextRelay,
    ) -> ServiceBuilder<Stack<InjectionLayer, L>> {
        self.layer(relay.injection_layer())
    }
}

mod sealed {
    pub trait Sealed<T> {}
    impl<T> Sealed<T> for tower::ServiceBuilder<T> {}
}
