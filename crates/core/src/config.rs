//! Relay configuration: defaults, validation and the three-level resolution
//! (built-in defaults < global settings < per-combo overrides).
//!
//! Values that are out of range never make the configuration fail: they fall back to the
//! default and the fallback is reported as a [`ConfigWarning`], so a gateway keeps serving
//! with a typo in one field. An explicit empty `handoff_providers` list is not a typo: it
//! disables generation and survives resolution.
//!
//! ```
//! use context_relay_core::config::{RelayConfig, RelayOverrides};
//!
//! let global: RelayOverrides = serde_json::from_str(r#"{"handoff_threshold": 0.8}"#).unwrap();
//! let combo: RelayOverrides = serde_json::from_str(r#"{"handoff_providers": []}"#).unwrap();
//! let (config, warnings) = RelayConfig::resolve(&global, &combo);
//! assert!(warnings.is_empty());
//! assert_eq!(config.handoff_threshold, 0.8);
//! assert!(config.handoff_providers.is_empty()); // explicit [] disables generation
//! assert_eq!(config.max_messages_for_summary, 30);
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Usage fraction at and above which no summary is ever started: the account is about to be
/// cut off and the summary call itself would likely fail or push it over.
pub const EXHAUSTION: f64 = 0.95;
/// Default handoff threshold.
pub const DEFAULT_THRESHOLD: f64 = 0.85;
/// Default number of non-system entries summarised.
pub const DEFAULT_MAX_MESSAGES: u32 = 30;
/// Smallest accepted `max_messages_for_summary`.
pub const MIN_MAX_MESSAGES: u32 = 5;
/// Largest accepted `max_messages_for_summary`.
pub const MAX_MAX_MESSAGES: u32 = 100;
/// Default handoff time to live (5 h, one Codex primary window).
pub const DEFAULT_TTL: Duration = Duration::from_secs(5 * 60 * 60);
/// Default number of new messages after which a live handoff is written again.
pub const DEFAULT_REFRESH_AFTER_MESSAGES: u32 = 20;
/// Default bound on one summary call.
pub const DEFAULT_SUMMARY_TIMEOUT: Duration = Duration::from_secs(120);
/// Default lease of a claimed handoff.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(120);
/// Default largest body buffered for reading or rewriting.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// What the summary is made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RelayMode {
    /// All system-like entries plus the last N others.
    #[default]
    Standard,
    /// Only the last N non-system entries.
    SchemaLocked,
}

/// Where the handoff goes in a Responses API request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InjectionSlot {
    /// A `developer` message item prepended to `input` (works with the ChatGPT backend).
    #[default]
    InputItem,
    /// Prepended to `instructions`.
    Instructions,
}

/// The resolved relay configuration for one combo.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayConfig {
    /// Usage fraction from which a handoff is generated (`0 < v < 0.95`).
    pub handoff_threshold: f64,
    /// Model for the summary call of a provider that names no summary model of its own (an
    /// embedder's `SummarySettings::model`, the gateway's `[providers.summary] model`, which
    /// wins); empty = the request's model.
    pub handoff_model: String,
    /// Providers (lower-case) whose accounts get handoffs; `"*"` = any (the default); empty =
    /// none.
    pub handoff_providers: Vec<String>,
    /// Number of non-system entries summarised (`5..=100`).
    pub max_messages_for_summary: u32,
    /// What the summary is made of.
    pub relay_mode: RelayMode,
    /// How long a handoff lives at most.
    pub ttl: Duration,
    /// New messages after which a live handoff is generated again.
    pub refresh_after_messages: u32,
    /// Bound on one summary call.
    pub summary_timeout: Duration,
    /// Lease of a claimed handoff.
    pub lease: Duration,
    /// Largest request body buffered for reading or rewriting.
    pub max_body_bytes: usize,
    /// Where the handoff goes in a Responses API request.
    pub injection_slot_responses: InjectionSlot,
    /// Whether a session routed to another model than the one that last served it gets a
    /// model-switch handoff (and, after the first response on the new model, a new one is
    /// generated for the providers of `handoff_providers`). On by default.
    pub model_switch: bool,
    /// Whether account switches are relayed: quota-driven handoffs are generated, and a
    /// session moving to another account of its model is scrubbed and gets the account-switch
    /// handoff. On by default; off, only model switches are relayed (an application whose
    /// routing is a plain priority list, not quota-driven account rotation). Not a file
    /// setting: the application decides it per combo.
    pub account_handoff: bool,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            handoff_threshold: DEFAULT_THRESHOLD,
            handoff_model: String::new(),
            handoff_providers: vec!["*".to_owned()],
            max_messages_for_summary: DEFAULT_MAX_MESSAGES,
            relay_mode: RelayMode::Standard,
            ttl: DEFAULT_TTL,
            refresh_after_messages: DEFAULT_REFRESH_AFTER_MESSAGES,
            summary_timeout: DEFAULT_SUMMARY_TIMEOUT,
            lease: DEFAULT_LEASE,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            injection_slot_responses: InjectionSlot::InputItem,
            model_switch: true,
            account_handoff: true,
        }
    }
}

/// A value that was replaced by its default during validation.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigWarning {
    /// The field name, as in the configuration file.
    pub field: &'static str,
    /// What was wrong and what is used instead.
    pub message: String,
}

impl std::fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// One level of settings (global or per combo): unset fields inherit from the level below.
///
/// This is the serde form used in configuration files (snake_case, durations in seconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayOverrides {
    /// See [`RelayConfig::handoff_threshold`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_threshold: Option<f64>,
    /// See [`RelayConfig::handoff_model`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_model: Option<String>,
    /// See [`RelayConfig::handoff_providers`]. `Some(vec![])` disables generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_providers: Option<Vec<String>>,
    /// See [`RelayConfig::max_messages_for_summary`]; fractional values are rounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_messages_for_summary: Option<f64>,
    /// See [`RelayConfig::relay_mode`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_mode: Option<RelayMode>,
    /// See [`RelayConfig::ttl`], in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// See [`RelayConfig::refresh_after_messages`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_after_messages: Option<u32>,
    /// See [`RelayConfig::summary_timeout`], in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_timeout_secs: Option<u64>,
    /// See [`RelayConfig::lease`], in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_secs: Option<u64>,
    /// See [`RelayConfig::max_body_bytes`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<usize>,
    /// See [`RelayConfig::injection_slot_responses`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injection_slot_responses: Option<InjectionSlot>,
    /// See [`RelayConfig::model_switch`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_switch: Option<bool>,
}

impl RelayOverrides {
    /// Fields set in `self` win over those of `below`.
    pub fn over(&self, below: &RelayOverrides) -> RelayOverrides {
        RelayOverrides {
            handoff_threshold: self.handoff_threshold.or(below.handoff_threshold),
            handoff_model: self
                .handoff_model
                .clone()
                .or_else(|| below.handoff_model.clone()),
            handoff_providers: self
                .handoff_providers
                .clone()
                .or_else(|| below.handoff_providers.clone()),
            max_messages_for_summary: self
                .max_messages_for_summary
                .or(below.max_messages_for_summary),
            relay_mode: self.relay_mode.or(below.relay_mode),
            ttl_secs: self.ttl_secs.or(below.ttl_secs),
            refresh_after_messages: self.refresh_after_messages.or(below.refresh_after_messages),
            summary_timeout_secs: self.summary_timeout_secs.or(below.summary_timeout_secs),
            lease_secs: self.lease_secs.or(below.lease_secs),
            max_body_bytes: self.max_body_bytes.or(below.max_body_bytes),
            injection_slot_responses: self
                .injection_slot_responses
                .or(below.injection_slot_responses),
            model_switch: self.model_switch.or(below.model_switch),
        }
    }
}

impl RelayConfig {
    /// Resolves built-in defaults < `global` < `combo`, validating every value.
    pub fn resolve(global: &RelayOverrides, combo: &RelayOverrides) -> (Self, Vec<ConfigWarning>) {
        Self::from_overrides(&combo.over(global))
    }

    /// Applies one level of settings over the built-in defaults, validating every value.
    pub fn from_overrides(o: &RelayOverrides) -> (Self, Vec<ConfigWarning>) {
        let mut warnings = Vec::new();
        let mut c = RelayConfig::default();
        if let Some(t) = o.handoff_threshold {
            c.handoff_threshold = validate_threshold(t, &mut warnings);
        }
        if let Some(m) = &o.handoff_model {
            c.handoff_model = m.trim().to_owned();
        }
        if let Some(p) = &o.handoff_providers {
            c.handoff_providers = normalize_providers(p);
        }
        if let Some(n) = o.max_messages_for_summary {
            c.max_messages_for_summary = validate_max_messages(n, &mut warnings);
        }
        if let Some(m) = o.relay_mode {
            c.relay_mode = m;
        }
        if let Some(s) = o.ttl_secs {
            c.ttl = positive_secs("ttl_secs", s, DEFAULT_TTL, &mut warnings);
        }
        if let Some(n) = o.refresh_after_messages {
            c.refresh_after_messages = n;
        }
        if let Some(s) = o.summary_timeout_secs {
            c.summary_timeout = positive_secs(
                "summary_timeout_secs",
                s,
                DEFAULT_SUMMARY_TIMEOUT,
                &mut warnings,
            );
        }
        if let Some(s) = o.lease_secs {
            c.lease = positive_secs("lease_secs", s, DEFAULT_LEASE, &mut warnings);
        }
        if let Some(b) = o.max_body_bytes {
            if b == 0 {
                warnings.push(ConfigWarning {
                    field: "max_body_bytes",
                    message: format!(
                        "expected a positive size, found 0; using {DEFAULT_MAX_BODY_BYTES}"
                    ),
                });
            } else {
                c.max_body_bytes = b;
            }
        }
        if let Some(s) = o.injection_slot_responses {
            c.injection_slot_responses = s;
        }
        if let Some(m) = o.model_switch {
            c.model_switch = m;
        }
        (c, warnings)
    }

    /// This configuration with every value a file would be refused for replaced by its
    /// default, and a warning for each: the rules of [`RelayOverrides`], for a configuration an
    /// application builds in code.
    ///
    /// ```
    /// use context_relay_core::config::RelayConfig;
    /// let given = RelayConfig { handoff_threshold: 1.5, ttl: std::time::Duration::ZERO, ..RelayConfig::default() };
    /// let (c, warnings) = given.validated();
    /// assert_eq!((c.handoff_threshold, c.ttl), (0.85, std::time::Duration::from_secs(18_000)));
    /// assert_eq!(warnings.len(), 2);
    /// assert!(RelayConfig::default().validated().1.is_empty());
    /// ```
    pub fn validated(mut self) -> (Self, Vec<ConfigWarning>) {
        let mut warnings = Vec::new();
        self.handoff_threshold = validate_threshold(self.handoff_threshold, &mut warnings);
        self.max_messages_for_summary =
            validate_max_messages(f64::from(self.max_messages_for_summary), &mut warnings);
        self.handoff_providers = normalize_providers(&self.handoff_providers);
        self.handoff_model = self.handoff_model.trim().to_owned();
        let durations = [
            ("ttl_secs", &mut self.ttl, DEFAULT_TTL),
            (
                "summary_timeout_secs",
                &mut self.summary_timeout,
                DEFAULT_SUMMARY_TIMEOUT,
            ),
            ("lease_secs", &mut self.lease, DEFAULT_LEASE),
        ];
        for (field, value, default) in durations {
            if value.is_zero() {
                *value = positive_secs(field, 0, default, &mut warnings);
            }
        }
        if self.max_body_bytes == 0 {
            warnings.push(ConfigWarning {
                field: "max_body_bytes",
                message: format!(
                    "expected a positive size, found 0; using {DEFAULT_MAX_BODY_BYTES}"
                ),
            });
            self.max_body_bytes = DEFAULT_MAX_BODY_BYTES;
        }
        (self, warnings)
    }

    /// Whether handoffs are generated for accounts of `provider` (compared lower-cased).
    ///
    /// ```
    /// use context_relay_core::config::RelayConfig;
    /// let mut c = RelayConfig::default(); // every provider
    /// assert!(c.generates_for("anthropic"));
    /// c.handoff_providers = vec!["codex".into()];
    /// assert!(c.generates_for("Codex"));
    /// assert!(!c.generates_for("anthropic"));
    /// ```
    pub fn generates_for(&self, provider: &str) -> bool {
        self.handoff_providers
            .iter()
            .any(|p| p == "*" || p.eq_ignore_ascii_case(provider.trim()))
    }
}

/// A threshold is valid when finite and `0 < v < EXHAUSTION`; anything else gives the default.
pub fn validate_threshold(v: f64, warnings: &mut Vec<ConfigWarning>) -> f64 {
    if v.is_finite() && v > 0.0 && v < EXHAUSTION {
        v
    } else {
        warnings.push(ConfigWarning {
            field: "handoff_threshold",
            message: format!(
                "expected a number with 0 < v < {EXHAUSTION}, found {v}; using {DEFAULT_THRESHOLD}"
            ),
        });
        DEFAULT_THRESHOLD
    }
}

/// `max_messages_for_summary` is rounded, then must lie in `5..=100`; else the default.
pub fn validate_max_messages(v: f64, warnings: &mut Vec<ConfigWarning>) -> u32 {
    let r = v.round();
    if r.is_finite() && r >= f64::from(MIN_MAX_MESSAGES) && r <= f64::from(MAX_MAX_MESSAGES) {
        // In range 5..=100, so the cast is exact.
        r as u32
    } else {
        warnings.push(ConfigWarning {
            field: "max_messages_for_summary",
            message: format!(
                "expected {MIN_MAX_MESSAGES}..={MAX_MAX_MESSAGES}, found {v}; using {DEFAULT_MAX_MESSAGES}"
            ),
        });
        DEFAULT_MAX_MESSAGES
    }
}

/// Trims and lower-cases provider names, dropping blanks and duplicates (order kept).
pub fn normalize_providers(list: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for p in list {
        let p = p.trim().to_ascii_lowercase();
        if !p.is_empty() && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

fn positive_secs(
    field: &'static str,
    secs: u64,
    default: Duration,
    warnings: &mut Vec<ConfigWarning>,
) -> Duration {
    if secs == 0 {
        warnings.push(ConfigWarning {
            field,
            message: format!(
                "expected a positive number of seconds, found 0; using {}",
                default.as_secs()
            ),
        });
        default
    } else {
        Duration::from_secs(secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(json: &str) -> RelayOverrides {
        serde_json::from_str(json).expect("valid overrides")
    }

    #[test]
    fn defaults() {
        let c = RelayConfig::default();
        assert_eq!(c.handoff_threshold, 0.85);
        assert_eq!(c.handoff_providers, vec!["*"]);
        assert!(c.generates_for("anthropic") && c.generates_for("codex"));
        assert_eq!(c.max_messages_for_summary, 30);
        assert_eq!(c.ttl, Duration::from_secs(18_000));
        assert_eq!(c.refresh_after_messages, 20);
        assert_eq!(c.summary_timeout, Duration::from_secs(120));
        assert_eq!(c.lease, Duration::from_secs(120));
        assert_eq!(c.max_body_bytes, 8 * 1024 * 1024);
        assert_eq!(c.relay_mode, RelayMode::Standard);
        assert_eq!(c.injection_slot_responses, InjectionSlot::InputItem);
        assert!(c.model_switch);
        assert!(c.account_handoff);
    }

    #[test]
    fn model_switch_resolves_per_combo() {
        let (c, _) = RelayConfig::resolve(&o(r#"{"model_switch": false}"#), &o("{}"));
        assert!(!c.model_switch);
        let (c, _) = RelayConfig::resolve(
            &o(r#"{"model_switch": false}"#),
            &o(r#"{"model_switch": true}"#),
        );
        assert!(c.model_switch);
        let (c, _) = RelayConfig::resolve(&o("{}"), &o(r#"{"model_switch": false}"#));
        assert!(!c.model_switch);
    }

    #[test]
    fn thresholds() {
        let mut w = Vec::new();
        assert_eq!(validate_threshold(0.85, &mut w), 0.85);
        assert_eq!(validate_threshold(0.9, &mut w), 0.9);
        assert!(w.is_empty());
        for bad in [0.95, 0.99, 1.0, 0.0, -0.1, f64::NAN, f64::INFINITY] {
            let mut w = Vec::new();
            assert_eq!(validate_threshold(bad, &mut w), 0.85, "{bad}");
            assert_eq!(w.len(), 1);
            assert_eq!(w[0].field, "handoff_threshold");
        }
    }

    #[test]
    fn max_messages_rounded_and_bounded() {
        let mut w = Vec::new();
        assert_eq!(validate_max_messages(5.0, &mut w), 5);
        assert_eq!(validate_max_messages(100.0, &mut w), 100);
        assert_eq!(validate_max_messages(12.4, &mut w), 12);
        assert_eq!(validate_max_messages(4.6, &mut w), 5);
        assert!(w.is_empty());
        for bad in [4.0, 101.0, 0.0, -3.0, f64::NAN, 1e12] {
            let mut w = Vec::new();
            assert_eq!(validate_max_messages(bad, &mut w), 30, "{bad}");
            assert_eq!(w.len(), 1);
        }
    }

    #[test]
    fn explicit_empty_providers_stays_empty_through_resolution() {
        let (c, w) = RelayConfig::resolve(&o(r#"{"handoff_providers": []}"#), &o("{}"));
        assert!(w.is_empty());
        assert!(c.handoff_providers.is_empty());
        assert!(!c.generates_for("codex"));
        // A combo can re-enable what the global level disabled, and the reverse.
        let (c, _) = RelayConfig::resolve(
            &o(r#"{"handoff_providers": []}"#),
            &o(r#"{"handoff_providers": [" Codex ", "CODEX", ""]}"#),
        );
        assert_eq!(c.handoff_providers, vec!["codex"]);
        let (c, _) = RelayConfig::resolve(
            &o(r#"{"handoff_providers": ["*"]}"#),
            &o(r#"{"handoff_providers": []}"#),
        );
        assert!(c.handoff_providers.is_empty());
    }

    #[test]
    fn star_matches_any_provider() {
        let (c, _) = RelayConfig::resolve(&o(r#"{"handoff_providers": ["*"]}"#), &o("{}"));
        assert!(c.generates_for("anthropic"));
        assert!(c.generates_for("codex"));
    }

    #[test]
    fn three_levels() {
        let global =
            o(r#"{"handoff_threshold": 0.8, "ttl_secs": 60, "relay_mode": "schema-locked"}"#);
        let combo = o(r#"{"handoff_threshold": 0.9, "max_messages_for_summary": 10}"#);
        let (c, w) = RelayConfig::resolve(&global, &combo);
        assert!(w.is_empty());
        assert_eq!(c.handoff_threshold, 0.9);
        assert_eq!(c.ttl, Duration::from_secs(60));
        assert_eq!(c.relay_mode, RelayMode::SchemaLocked);
        assert_eq!(c.max_messages_for_summary, 10);
        assert_eq!(c.handoff_providers, vec!["*"]);
    }

    #[test]
    fn invalid_values_fall_back_with_warnings() {
        let (c, w) = RelayConfig::resolve(
            &o(r#"{"handoff_threshold": 0.97, "max_messages_for_summary": 500, "ttl_secs": 0}"#),
            &o("{}"),
        );
        assert_eq!(c.handoff_threshold, 0.85);
        assert_eq!(c.max_messages_for_summary, 30);
        assert_eq!(c.ttl, DEFAULT_TTL);
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(serde_json::from_str::<RelayOverrides>(r#"{"handoff_treshold": 0.8}"#).is_err());
    }

    #[test]
    fn slot_and_mode_names() {
        let x = o(r#"{"injection_slot_responses": "instructions", "relay_mode": "standard"}"#);
        assert_eq!(
            x.injection_slot_responses,
            Some(InjectionSlot::Instructions)
        );
        assert_eq!(x.relay_mode, Some(RelayMode::Standard));
    }
}
