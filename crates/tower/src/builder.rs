//! [`ServiceBuilder`] methods for the relay layers.

use std::sync::Arc;

use context_relay_store::HandoffStore;
use tower::ServiceBuilder;
use tower_layer::Stack;

use crate::{GenerationLayer, InjectionLayer};

/// Adds the relay layers to a [`ServiceBuilder`], with their default configuration.
///
/// ```
/// use std::sync::Arc;
/// use context_relay_store::{HandoffStore, MemoryStore};
/// use context_relay_tower::ServiceBuilderExt;
/// use tower::ServiceBuilder;
///
/// let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
/// let builder = ServiceBuilder::new()
///     // .layer(combo layer: sets ComboName)
///     .context_relay_generation(store.clone())
///     // .layer(account resolver: sets ResolvedAccount)
///     .context_relay_injection(store);
/// # let _ = builder;
/// ```
///
/// For a non-default configuration, build the layer and add it with `.layer(..)`:
/// `GenerationLayer::new(store).threshold(0.8)`.
pub trait ServiceBuilderExt<L>: sealed::Sealed<L> + Sized {
    /// Adds a [`GenerationLayer`] writing handoffs to `store`.
    fn context_relay_generation(
        self,
        store: Arc<dyn HandoffStore>,
    ) -> ServiceBuilder<Stack<GenerationLayer, L>>;

    /// Adds an [`InjectionLayer`] reading handoffs from `store`.
    fn context_relay_injection(
        self,
        store: Arc<dyn HandoffStore>,
    ) -> ServiceBuilder<Stack<InjectionLayer, L>>;
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    fn context_relay_generation(
        self,
        store: Arc<dyn HandoffStore>,
    ) -> ServiceBuilder<Stack<GenerationLayer, L>> {
        self.layer(GenerationLayer::new(store))
    }

    fn context_relay_injection(
        self,
        store: Arc<dyn HandoffStore>,
    ) -> ServiceBuilder<Stack<InjectionLayer, L>> {
        self.layer(InjectionLayer::new(store))
    }
}

mod sealed {
    pub trait Sealed<T> {}
    impl<T> Sealed<T> for tower::ServiceBuilder<T> {}
}
