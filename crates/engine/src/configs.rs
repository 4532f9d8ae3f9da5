//! The resolved relay configuration of every combo.

use std::sync::Arc;

use context_relay_core::RelayConfig;
use foldhash::HashMap;

/// A default [`RelayConfig`] plus per-combo configurations (already resolved over the
/// default: see [`RelayConfig::resolve`]).
///
/// [`RelayConfigs::default`] uses `RelayConfig::default()` for every combo: every provider gets
/// handoffs (`handoff_providers = ["*"]`), so that a relay works for whatever provider it
/// fronts until it is told otherwise.
///
/// ```
/// use context_relay_core::RelayConfig;
/// use context_relay_engine::RelayConfigs;
///
/// let mut strict = RelayConfig::default();
/// strict.handoff_threshold = 0.7;
/// let configs = RelayConfigs::new(RelayConfig::default()).with_combo("codex-relay", strict);
/// assert_eq!(configs.for_combo("codex-relay").handoff_threshold, 0.7);
/// assert_eq!(configs.for_combo("other").handoff_threshold, 0.85);
/// assert!(RelayConfigs::default().default_config().generates_for("anthropic"));
/// ```
#[derive(Debug, Clone)]
pub struct RelayConfigs {
    default: Arc<RelayConfig>,
    combos: Arc<HashMap<Arc<str>, Arc<RelayConfig>>>,
}

impl Default for RelayConfigs {
    fn default() -> Self {
        Self::new(RelayConfig::default())
    }
}

/// `config` validated, each replaced value logged.
fn checked(config: RelayConfig, combo: Option<&str>) -> RelayConfig {
    let (config, warnings) = config.validated();
    for w in warnings {
        tracing::warn!(
            combo,
            field = w.field,
            "invalid relay configuration: {}",
            w.message
        );
    }
    config
}

impl RelayConfigs {
    /// Every combo uses `default`. A value a configuration file would be refused for (a
    /// threshold outside `0 < v < 0.95`, a zero TTL, …) is replaced by its default, with a
    /// warning in the log ([`RelayConfig::validated`]).
    pub fn new(default: RelayConfig) -> Self {
        Self {
            default: Arc::new(checked(default, None)),
            combos: Arc::default(),
        }
    }

    /// Uses `config` for the combo `name`, checked as [`new`](Self::new) checks the default.
    pub fn with_combo(mut self, name: impl Into<Arc<str>>, config: RelayConfig) -> Self {
        let name = name.into();
        let config = checked(config, Some(&name));
        Arc::make_mut(&mut self.combos).insert(name, Arc::new(config));
        self
    }

    /// The configuration in force for `combo`.
    pub fn for_combo(&self, combo: &str) -> &RelayConfig {
        self.combos.get(combo).map_or(&self.default, |c| c)
    }

    /// The configuration in force for `combo`, shared.
    pub fn for_combo_arc(&self, combo: &str) -> Arc<RelayConfig> {
        self.combos.get(combo).unwrap_or(&self.default).clone()
    }

    /// The default configuration.
    pub fn default_config(&self) -> &RelayConfig {
        &self.default
    }

    /// Mutable access to the default configuration (for builder methods).
    pub(crate) fn default_mut(&mut self) -> &mut RelayConfig {
        Arc::make_mut(&mut self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration built in code meets the rules of a file: a threshold the relay would
    /// act on at any usage (or never) falls back to the default, for the default and per combo.
    #[test]
    fn values_a_file_would_be_refused_for_fall_back_to_their_defaults() {
        let bad = |t: f64| RelayConfig {
            handoff_threshold: t,
            ..RelayConfig::default()
        };
        for t in [0.0, -1.0, 1.5, f64::NAN, 0.95] {
            let configs = RelayConfigs::new(bad(t)).with_combo("c", bad(t));
            assert_eq!(configs.default_config().handoff_threshold, 0.85, "{t}");
            assert_eq!(configs.for_combo("c").handoff_threshold, 0.85, "{t}");
        }
        let good = RelayConfigs::new(bad(0.7));
        assert_eq!(good.default_config().handoff_threshold, 0.7);
        // The builder's edits are checked too.
        let store = std::sync::Arc::new(context_relay_store::MemoryStore::new());
        let relay = crate::Relay::builder(store)
            .ttl(std::time::Duration::ZERO)
            .build();
        assert_eq!(
            relay.configs().default_config().ttl,
            RelayConfig::default().ttl
        );
    }
}
