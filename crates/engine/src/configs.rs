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

impl RelayConfigs {
    /// Every combo uses `default`.
    pub fn new(default: RelayConfig) -> Self {
        Self {
            default: Arc::new(default),
            combos: Arc::default(),
        }
    }

    /// Uses `config` for the combo `name`.
    pub fn with_combo(mut self, name: impl Into<Arc<str>>, config: RelayConfig) -> Self {
        Arc::make_mut(&mut self.combos).insert(name.into(), Arc::new(config));
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
