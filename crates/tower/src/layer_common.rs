//! The constructors and settings both layers share.

/// Adds to a layer struct `{ relay: Option<RelayBuilder>, background: Background }` the
/// constructors and the settings both layers have.
macro_rules! relay_layer_common {
    ($layer:ident) => {
        impl $layer {
            /// A layer over `store`, with the default configuration (every provider gets
            /// handoffs).
            pub fn new(store: std::sync::Arc<dyn context_relay_store::HandoffStore>) -> Self {
                Self::from_builder(context_relay_engine::RelayBuilder::new(store))
            }

            /// A layer over the relay `builder` makes (sharing its state with every other
            /// layer made from it).
            pub fn from_builder(builder: context_relay_engine::RelayBuilder) -> Self {
                Self {
                    background: builder.background(),
                    relay: Some(builder),
                }
            }

            /// Whether the layer is switched on (see `disabled`).
            pub fn is_enabled(&self) -> bool {
                self.relay.is_some()
            }

            fn map(
                mut self,
                f: impl FnOnce(context_relay_engine::RelayBuilder) -> context_relay_engine::RelayBuilder,
            ) -> Self {
                self.relay = self.relay.map(f);
                self
            }

            /// Uses `configs` (default plus per-combo configurations).
            pub fn configs(self, configs: context_relay_engine::RelayConfigs) -> Self {
                self.map(|b| b.configs(configs))
            }

            /// Uses `config` as the default configuration.
            pub fn config(self, config: context_relay_core::RelayConfig) -> Self {
                self.map(|b| b.config(config))
            }

            /// Where session ids are read from.
            pub fn session_sources(self, sources: context_relay_core::session::SessionSources) -> Self {
                self.map(|b| b.session_sources(sources))
            }

            /// The tracker of the layer's background work (summaries, claim completion and
            /// release, affinity writes): `idle().await` waits for it.
            pub fn background(&self) -> context_relay_engine::Background {
                self.background.clone()
            }
        }
    };
}

pub(crate) use relay_layer_common;
