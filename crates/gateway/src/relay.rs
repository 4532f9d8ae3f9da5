//! The gateway's relay: one [`ContextRelay`] over the store, with the settings of the
//! configuration (`[relay]` plus each `[combos.relay]`, `[providers.summary]`). The gateway
//! keeps one, so every proxy stack it builds (one per router) shares the in-flight registry,
//! the cool-downs and the background tracker; a reload reconfigures the same relay.
//!
//! GenerationLayer reads usage from the [`QuotaSignal`] the account resolver puts on each
//! response (computed with the provider's configured `quota` kind); without one, it reads the
//! response with that same kind (`provider_quota`), so a provider configured with
//! `quota = "none"` never triggers a summary, and a provider's headers are never read with
//! another provider's rules.
//!
//! [`QuotaSignal`]: context_relay_tower::QuotaSignal

use std::sync::Arc;

use context_relay_store::HandoffStore;
use context_relay_tower::{ContextRelay, ContextRelayBuilder, RelayConfigs, RelayEvent};

use crate::config::Config;
use crate::console::Activity;

/// The relay of a gateway over `store`, configured by `config` (`configs`: its relay settings,
/// resolved); `activity` hears of every summary generation and skip.
pub(crate) fn relay(
    config: &Config,
    configs: RelayConfigs,
    store: Arc<dyn HandoffStore>,
    activity: Activity,
) -> ContextRelay {
    let builder =
        ContextRelay::builder(store).events(move |e: RelayEvent| activity.relay_event(&e));
    settings(builder, config, configs).build()
}

/// `relay` with the settings of a reloaded `config`; the relay's state carries over.
pub(crate) fn reconfigured(
    relay: &ContextRelay,
    config: &Config,
    configs: RelayConfigs,
) -> ContextRelay {
    relay.reconfigure(|builder| settings(builder, config, configs))
}

/// The settings that come from the configuration file.
fn settings(
    mut builder: ContextRelayBuilder,
    config: &Config,
    configs: RelayConfigs,
) -> ContextRelayBuilder {
    builder = builder
        .configs(configs)
        .stream_summaries_for(config.stream_summary_providers());
    for (provider, s) in crate::summary::summary_settings(config) {
        builder = builder.summary_settings(&provider, s);
    }
    for p in &config.providers {
        builder = builder.provider_quota(&p.name, p.quota.kind());
    }
    builder
}
