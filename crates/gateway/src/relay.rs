//! The gateway's relay: one [`ContextRelay`] over the store, with the settings of the
//! configuration (`[relay]` plus each `[combos.relay]`, `[providers.summary]`). The gateway
//! keeps one, so every proxy stack it builds (one per router) shares the in-flight registry,
//! the cool-downs and the background tracker; a reload reconfigures the same relay.
//!
//! GenerationLayer reads usage from the [`QuotaSignal`] the account resolver puts on each
//! response (computed with the provider's configured `quota` kind); it is given a quota source
//! that reads nothing itself, so a provider configured with `quota = "none"` never triggers a
//! summary, and a provider's headers are never read with another provider's rules.
//!
//! [`QuotaSignal`]: context_relay_tower::QuotaSignal

use std::sync::Arc;
use std::time::SystemTime;

use context_relay_core::QuotaSignal;
use context_relay_store::HandoffStore;
use context_relay_tower::{ContextRelay, ContextRelayBuilder, RelayConfigs, RelayEvent};
use http::{HeaderMap, StatusCode};

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
    let builder = ContextRelay::builder(store)
        .quota_source(resolver_signal_only)
        .events(move |e: RelayEvent| activity.relay_event(&e));
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
    builder
}

/// The relay's own quota source: nothing. The resolver's [`QuotaSignal`] extension, read with
/// the provider's configured kind, is the only reading GenerationLayer acts on.
fn resolver_signal_only(_: StatusCode, _: &HeaderMap, _: SystemTime) -> Option<QuotaSignal> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layers_read_no_headers_themselves() {
        let mut h = HeaderMap::new();
        h.insert("x-codex-primary-used-percent", "90".parse().unwrap());
        assert_eq!(
            resolver_signal_only(StatusCode::OK, &h, SystemTime::now()),
            None
        );
    }
}
