//! [`ContextRelay`]: both layers from one call, over one configuration and one background
//! tracker.

use std::sync::Arc;
use std::time::Duration;

use context_relay_core::RelayConfig;
use context_relay_core::config::{InjectionSlot, RelayMode};
use context_relay_core::prompt::SummarySettings;
use context_relay_core::session::SessionSources;
use context_relay_engine::{
    Background, QuotaSource, RelayBuilder, RelayConfigs, RelayEvents, Summarizer,
};
use context_relay_store::HandoffStore;

use crate::{GenerationLayer, InjectionLayer};

/// The relay of one application: a [`GenerationLayer`] and an [`InjectionLayer`] sharing one
/// configuration, one store, one in-flight registry and one [`Background`] tracker.
///
/// ```
/// use std::sync::Arc;
/// use context_relay_store::MemoryStore;
/// use context_relay_tower::ContextRelay;
///
/// let relay = ContextRelay::builder(Arc::new(MemoryStore::new())).threshold(0.8).build();
/// let (generation, injection) = (relay.generation_layer(), relay.injection_layer());
/// assert!(generation.is_enabled() && injection.is_enabled());
///
/// // Switched off by configuration: same layer types, every request passes through.
/// let off = ContextRelay::disabled();
/// assert!(!off.generation_layer().is_enabled());
/// ```
///
/// The layers go where the stack knows what they need: generation after the service that sets
/// [`ComboName`](crate::ComboName), injection after the account resolver that sets
/// [`ResolvedAccount`](crate::ResolvedAccount) on the request (see the [crate docs](crate)).
#[derive(Clone, Debug)]
pub struct ContextRelay {
    builder: Option<RelayBuilder>,
    background: Background,
}

impl ContextRelay {
    /// Starts the configuration of a relay over `store` (every provider gets handoffs,
    /// threshold 85 %); finish with [`build`](ContextRelayBuilder::build).
    pub fn builder(store: Arc<dyn HandoffStore>) -> ContextRelayBuilder {
        ContextRelayBuilder {
            builder: RelayBuilder::new(store),
        }
    }

    /// A relay switched off: its layers pass every request through (the injection layer still
    /// puts the request's [`ResolvedAccount`](crate::ResolvedAccount) on the response), and the
    /// service type stays the same as with the relay on. `ServiceBuilder::option_layer` is the
    /// other way, at the cost of an `Either` service type.
    pub fn disabled() -> Self {
        Self {
            builder: None,
            background: Background::new(),
        }
    }

    /// Whether the relay is switched on.
    pub fn is_enabled(&self) -> bool {
        self.builder.is_some()
    }

    /// The layer between the combo service and the account resolver.
    pub fn generation_layer(&self) -> GenerationLayer {
        self.builder.clone().map_or_else(
            || GenerationLayer::from_relay(None),
            |b| GenerationLayer::from_relay(Some(b)),
        )
    }

    /// The layer between the account resolver and the upstream client.
    pub fn injection_layer(&self) -> InjectionLayer {
        self.builder.clone().map_or_else(
            || InjectionLayer::from_relay(None),
            |b| InjectionLayer::from_relay(Some(b)),
        )
    }

    /// The same relay with settings `configure` changes (a configuration reload): in-flight
    /// summaries, cool-downs, the background tracker and every setting not changed carry
    /// over. A disabled relay stays disabled.
    pub fn reconfigure(
        &self,
        configure: impl FnOnce(ContextRelayBuilder) -> ContextRelayBuilder,
    ) -> Self {
        let Some(builder) = self.builder.clone() else {
            return self.clone();
        };
        configure(ContextRelayBuilder { builder }).build()
    }

    /// The tracker of both layers' background work (summaries, claim completions and
    /// releases, affinity writes): `idle().await` waits for it.
    pub fn background(&self) -> Background {
        self.background.clone()
    }
}

/// Configures a [`ContextRelay`]; see [`RelayBuilder`] for each setting.
#[derive(Clone, Debug)]
pub struct ContextRelayBuilder {
    builder: RelayBuilder,
}

macro_rules! forward {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            $(#[$doc])*
            pub fn $name(self, $($arg: $ty),*) -> Self {
                Self { builder: self.builder.$name($($arg),*) }
            }
        )*
    };
}

impl ContextRelayBuilder {
    /// Both layers, over the configuration given.
    pub fn build(self) -> ContextRelay {
        ContextRelay {
            background: self.builder.background(),
            builder: Some(self.builder),
        }
    }

    forward! {
        /// Uses `configs` (default plus per-combo configurations).
        configs(configs: RelayConfigs);
        /// Uses `config` as the default configuration.
        config(config: RelayConfig);
        /// Sets the default handoff threshold (invalid values keep 0.85 with a warning).
        threshold(threshold: f64);
        /// Sets the default handoff time to live.
        ttl(ttl: Duration);
        /// Sets the default bound on one summary call.
        summary_timeout(timeout: Duration);
        /// Sets the default selection mode.
        relay_mode(mode: RelayMode);
        /// Where the handoff goes in Responses API requests, by default.
        responses_slot(slot: InjectionSlot);
        /// Largest request body read for a rewrite or kept for a summary, by default.
        max_body_bytes(max: usize);
        /// Bounds concurrent summary generations (at least 1).
        max_concurrent_generations(n: usize);
        /// Bounds the summary jobs queued, running or waiting (at least 1).
        max_queued_generations(n: usize);
        /// How summary requests to `provider` are made (see [`SummarySettings`]).
        summary_settings(provider: &str, settings: SummarySettings);
        /// Where session ids are read from.
        session_sources(sources: SessionSources);
    }

    /// Sets the default providers whose accounts get handoffs (`"*"` = any, the default;
    /// empty = none). A qualifying turn of another provider is counted as skipped
    /// (`reason="provider"`).
    pub fn providers<I, P>(self, providers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        Self {
            builder: self.builder.providers(providers),
        }
    }

    /// Tells `sink` the outcome of every summary generation and every qualifying turn that
    /// started none (see [`RelayEvent`](crate::RelayEvent)).
    pub fn events(self, sink: impl RelayEvents) -> Self {
        Self {
            builder: self.builder.events(sink),
        }
    }

    /// Sends summaries through `summarizer` instead of the stack below the generation layer.
    pub fn summarizer(self, summarizer: impl Summarizer) -> Self {
        Self {
            builder: self.builder.summarizer(summarizer),
        }
    }

    /// Reads quota signals with `source` (default: [`HeaderQuota`](crate::HeaderQuota)
    /// `auto`), for providers without rules of their own.
    pub fn quota_source(self, source: impl QuotaSource) -> Self {
        Self {
            builder: self.builder.quota_source(source),
        }
    }

    /// Reads the quota of the responses `provider` serves with `kind`'s rules only
    /// (`QuotaKind::None`: never a signal). A [`QuotaSignal`](crate::QuotaSignal) response
    /// extension still wins.
    pub fn provider_quota(
        self,
        provider: &str,
        kind: context_relay_core::quota::QuotaKind,
    ) -> Self {
        Self {
            builder: self.builder.provider_quota(provider, kind),
        }
    }

    /// Providers whose backends only answer streamed replies: summary requests to them are
    /// sent with `stream: true`.
    pub fn stream_summaries_for<I, P>(self, providers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<Arc<str>>,
    {
        Self {
            builder: self.builder.stream_summaries_for(providers),
        }
    }
}
