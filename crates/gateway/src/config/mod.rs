//! The gateway's TOML configuration: schema, defaults, environment references and validation.
//!
//! Every table rejects unknown keys (`deny_unknown_fields`), so a typo fails loudly at start-up
//! instead of silently falling back to a default. Validation errors name the field and the
//! offending value (never a secret).
//!
//! ```
//! use context_relay_gateway::config::Config;
//!
//! let toml = r#"
//! [[providers]]
//! name = "codex"
//! base_url = "https://codex.example/v1"
//!   [[providers.accounts]]
//!   id = "acct-a"
//!   api_key = "sk-a"
//! [[combos]]
//! name = "codex-relay"
//! targets = ["codex/gpt-5.5"]
//! "#;
//! let config = Config::from_toml_str(toml, |_| None).unwrap();
//! assert_eq!(config.listen.to_string(), "127.0.0.1:4000");
//! assert_eq!(config.providers[0].rotate_at, 0.95);
//! assert_eq!(config.combos[0].targets[0].model, "gpt-5.5");
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use context_relay_core::config::{ConfigWarning, RelayConfig, RelayOverrides};
use context_relay_core::quota::QuotaKind;
use context_relay_tower::RelayConfigs;
use serde::Deserialize;

mod api_hint;
mod auth;
mod clients;
mod env;
mod error;
mod limits;
mod logins;
mod relay_hint;
mod store;
mod validate;

pub use auth::AuthScheme;
pub use clients::ClientConfig;
pub use error::ConfigError;
pub(crate) use error::{invalid, looks_secret};
pub use limits::{BUFFER_SLACK, LimitsConfig, Secs};
pub use store::{StoreBackend, StoreConfig};

use crate::secret::redact_url;

/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4000";
/// Default usage fraction at which an account stops taking new turns.
pub const DEFAULT_ROTATE_AT: f64 = 0.95;
/// Default largest request body the gateway buffers (8 MiB).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;
/// Default redb file.
pub const DEFAULT_STORE_PATH: &str = "context-relay.redb";

/// The whole configuration file.
///
/// `Debug` shows no secret: keys, tokens and URL passwords are redacted.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address the gateway listens on (`127.0.0.1:4000`). Without `[[clients]]` it must be a
    /// loopback address unless `allow_open = true`.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Run without `[[clients]]` on a non-loopback address (an open gateway: anyone who
    /// reaches it spends the accounts). A warning is logged at start-up.
    #[serde(default)]
    pub allow_open: bool,
    /// Bearer token of the admin routes; without it they are off.
    #[serde(default)]
    pub admin_token: Option<String>,
    /// The environment variable holding `admin_token`.
    #[serde(default)]
    pub admin_token_env: Option<String>,
    /// Log lines as text (`"text"`, default) or one JSON object per line (`"json"`).
    #[serde(default)]
    pub log_format: LogFormat,
    /// Whether the context relay runs (`true`): with `false` the gateway is a plain pooling
    /// proxy, without GenerationLayer and InjectionLayer (for comparisons and benchmarks).
    #[serde(default = "default_true")]
    pub relay_enabled: bool,
    /// Largest request body buffered for routing (8 MiB); larger bodies get a 413.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
    /// Where handoffs are kept.
    #[serde(default)]
    pub store: StoreConfig,
    /// Global relay settings (the relay layers' setting names, durations in seconds: `ttl_secs`,
    /// …).
    #[serde(default)]
    pub relay: RelayOverrides,
    /// Upstream providers and their accounts, in the order accounts are filled.
    #[serde(default)]
    pub providers: Vec<ProviderConfig>,
    /// Named routing targets clients ask for with `model`.
    #[serde(default)]
    pub combos: Vec<ComboConfig>,
    /// Clients allowed to call the gateway; empty = open gateway.
    #[serde(default)]
    pub clients: Vec<ClientConfig>,
    /// Time and memory bounds.
    #[serde(default)]
    pub limits: LimitsConfig,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("allow_open", &self.allow_open)
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<redacted>"),
            )
            .field("admin_token_env", &self.admin_token_env)
            .field("log_format", &self.log_format)
            .field("relay_enabled", &self.relay_enabled)
            .field("max_request_bytes", &self.max_request_bytes)
            .field("store", &self.store)
            .field("relay", &self.relay)
            .field("providers", &self.providers)
            .field("combos", &self.combos)
            .field("clients", &self.clients)
            .field("limits", &self.limits)
            .finish()
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line (for log shippers).
    Json,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 4000))
}

fn default_true() -> bool {
    true
}

fn default_max_request_bytes() -> usize {
    DEFAULT_MAX_REQUEST_BYTES
}

/// Which API a provider speaks (`api`), and so which client requests it can serve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderApi {
    /// The client's request is forwarded in its own shape, to the client's path (OpenAI,
    /// Codex, and any provider that speaks what its clients send).
    #[default]
    Passthrough,
    /// Only the OpenAI shapes (Chat Completions, Responses), forwarded as they are: Anthropic
    /// Messages and Gemini requests are not served.
    Openai,
    /// Only Anthropic Messages (`{base_url}/messages`): Anthropic requests are forwarded as
    /// they are, Responses requests are translated both ways, other shapes are not served.
    Anthropic,
}

impl ProviderApi {
    /// The configuration name.
    ///
    /// ```
    /// use context_relay_gateway::config::ProviderApi;
    /// assert_eq!(ProviderApi::default().as_str(), "passthrough");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passthrough => "passthrough",
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
        }
    }
}

/// Which quota headers a provider sends with each answer (its usage of the account), read by
/// the parsers of
/// `context_relay_core::quota` (see [`QuotaFormat::kind`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotaFormat {
    /// Try every known format.
    #[default]
    Auto,
    /// `x-codex-{primary,secondary}-*`.
    Codex,
    /// `x-ratelimit-*`.
    Openai,
    /// `anthropic-ratelimit-*`.
    Anthropic,
    /// IETF `RateLimit` fields.
    Ietf,
    /// No quota headers: only a 429 exhausts the account.
    None,
}

impl QuotaFormat {
    /// The core parser selection of this format.
    ///
    /// ```
    /// use context_relay_core::quota::QuotaKind;
    /// use context_relay_gateway::config::QuotaFormat;
    /// assert_eq!(QuotaFormat::Openai.kind(), QuotaKind::OpenAi);
    /// ```
    pub fn kind(self) -> QuotaKind {
        match self {
            Self::Auto => QuotaKind::Auto,
            Self::Codex => QuotaKind::Codex,
            Self::Openai => QuotaKind::OpenAi,
            Self::Anthropic => QuotaKind::Anthropic,
            Self::Ietf => QuotaKind::Ietf,
            Self::None => QuotaKind::None,
        }
    }
}

impl From<QuotaFormat> for QuotaKind {
    fn from(f: QuotaFormat) -> Self {
        f.kind()
    }
}

/// `[[providers]]`: one upstream API and its accounts.
///
/// `Debug` hides any password in `base_url` and every account key.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Unique name, used in targets (`name/model`).
    pub name: String,
    /// Upstream base URL ending where the client path after `/v1` is appended:
    /// `/v1/responses` → `{base_url}/responses`.
    pub base_url: String,
    /// How the account key (or login) is sent.
    #[serde(default)]
    pub auth: AuthScheme,
    /// The OAuth token endpoint logins refresh at (`auth = "chatgpt"` or `"claude-oauth"`);
    /// unset: the client's own ([`ProviderConfig::token_url`]).
    #[serde(default)]
    pub token_url: Option<String>,
    /// The OAuth client id logins refresh as; unset: the client's own
    /// ([`ProviderConfig::client_id`]).
    #[serde(default)]
    pub client_id: Option<String>,
    /// Which API the provider speaks (`passthrough`, `openai` or `anthropic`).
    #[serde(default)]
    pub api: ProviderApi,
    /// `max_tokens` of a Responses request translated for an `api = "anthropic"` provider when
    /// the client set no `max_output_tokens` (Codex never does); at least 1. Unset: 32000.
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// Which quota headers to read.
    #[serde(default)]
    pub quota: QuotaFormat,
    /// Usage fraction in `(0, 1]` at which an account is treated as exhausted.
    #[serde(default = "default_rotate_at")]
    pub rotate_at: f64,
    /// Send the summary request with `stream: true` (the ChatGPT Codex backend needs it).
    #[serde(default)]
    pub summary_stream: bool,
    /// `[providers.summary]`: how summary requests to this provider are made.
    #[serde(default)]
    pub summary: Option<crate::summary::ProviderSummary>,
    /// Accounts, filled in this order.
    #[serde(default)]
    pub accounts: Vec<AccountConfig>,
}

fn default_rotate_at() -> f64 {
    DEFAULT_ROTATE_AT
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("name", &self.name)
            .field("base_url", &redact_url(&self.base_url))
            .field("auth", &self.auth)
            .field("token_url", &self.token_url.as_deref().map(redact_url))
            .field("client_id", &self.client_id)
            .field("api", &self.api)
            .field("quota", &self.quota)
            .field("rotate_at", &self.rotate_at)
            .field("accounts", &self.accounts)
            .finish_non_exhaustive()
    }
}

/// `[[providers.accounts]]`: one credential, an API key or a subscription login.
///
/// After loading, [`AccountConfig::api_key`] holds the key whichever way it was given, and a
/// login's credential file has been read (and found to be of its provider's `auth`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    /// Unique id within the provider.
    pub id: String,
    /// The key itself.
    #[serde(default)]
    pub api_key: Option<String>,
    /// The environment variable holding the key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// A subscription login: the client's credential file (Codex CLI `auth.json`, Claude Code
    /// `.credentials.json`), read at start-up and written back when the gateway refreshes
    /// the login. A leading `~/` is the home folder; a relative path is relative to the
    /// working folder.
    #[serde(default)]
    pub credentials: Option<PathBuf>,
    /// The login read from `credentials`.
    #[serde(skip)]
    pub(crate) login: Option<crate::login::LoginFile>,
}

impl std::fmt::Debug for AccountConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountConfig")
            .field("id", &self.id)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_key_env", &self.api_key_env)
            .field("credentials", &self.credentials)
            .field("login", &self.login.as_ref().map(|l| l.kind))
            .finish()
    }
}

/// How a combo routes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Targets in order, with context relay across account switches.
    #[default]
    ContextRelay,
    /// Targets in order, without the quota-driven account handoff: only a move to another
    /// target (a model switch) is relayed, unless `model_switch = false`.
    Priority,
}

/// `[[combos]]`: a named routing target.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComboConfig {
    /// The name clients send as `model`.
    pub name: String,
    /// Routing strategy.
    #[serde(default)]
    pub strategy: Strategy,
    /// `provider/model` targets, tried in order.
    pub targets: Vec<TargetSpec>,
    /// Per-combo relay overrides (same keys as `[relay]`).
    #[serde(default)]
    pub relay: RelayOverrides,
}

/// A `provider/model` target. The model may itself contain `/`; the provider is the part
/// before the first one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    /// Provider name.
    pub provider: String,
    /// Model sent upstream.
    pub model: String,
}

impl TargetSpec {
    /// Splits `provider/model`; `None` when either part is empty.
    ///
    /// ```
    /// use context_relay_gateway::config::TargetSpec;
    /// let t = TargetSpec::parse("router/openai/gpt-5").unwrap();
    /// assert_eq!((t.provider.as_str(), t.model.as_str()), ("router", "openai/gpt-5"));
    /// assert!(TargetSpec::parse("gpt-5").is_none());
    /// ```
    pub fn parse(s: &str) -> Option<Self> {
        let (provider, model) = s.split_once('/')?;
        let (provider, model) = (provider.trim(), model.trim());
        (!provider.is_empty() && !model.is_empty()).then(|| Self {
            provider: provider.to_owned(),
            model: model.to_owned(),
        })
    }
}

impl std::fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

impl<'de> Deserialize<'de> for TargetSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TargetSpec::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("expected a target \"provider/model\", found {s:?}"))
        })
    }
}

impl Config {
    /// Reads, parses, resolves `api_key_env` from the process environment and validates `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml_str(&text, |name| std::env::var(name).ok())
    }

    /// Parses and validates `text`, looking `*_env` variables up with `env`.
    pub fn from_toml_str(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::parse(&e, text))?;
        config.resolve_env(&env)?;
        config.read_logins(&env)?;
        config.validate()?;
        Ok(config)
    }

    /// The provider named `name`.
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// Resolved relay settings of every combo (built-in < `[relay]` < `[combos.relay]`),
    /// with the warnings of values that fell back to their default. A `priority` combo gets
    /// the model-switch relay only (`account_handoff` off: no quota-driven handoff).
    pub fn relay_configs(&self) -> Vec<(String, RelayConfig, Vec<ConfigWarning>)> {
        self.combos
            .iter()
            .map(|c| {
                let (mut config, warnings) = RelayConfig::resolve(&self.relay, &c.relay);
                config.account_handoff = c.strategy == Strategy::ContextRelay;
                (c.name.clone(), config, warnings)
            })
            .collect()
    }

    /// The settings the relay layers use: `[relay]` as the default (for requests whose combo
    /// has no entry) and each combo's resolved settings. Warnings are those of
    /// [`relay_configs`](Self::relay_configs) plus the global ones.
    ///
    /// ```
    /// use context_relay_gateway::config::Config;
    /// let config = Config::from_toml_str(r#"
    /// [relay]
    /// handoff_threshold = 0.8
    /// [[providers]]
    /// name = "codex"
    /// base_url = "http://127.0.0.1:9/v1"
    ///   [[providers.accounts]]
    ///   id = "a"
    ///   api_key = "k"
    /// [[combos]]
    /// name = "codex-relay"
    /// targets = ["codex/gpt-5.5"]
    ///   [combos.relay]
    ///   handoff_providers = ["*"]
    /// "#, |_| None).unwrap();
    /// let (configs, warnings) = config.relay_settings();
    /// assert!(warnings.is_empty());
    /// assert_eq!(configs.default_config().handoff_threshold, 0.8);
    /// let combo = configs.for_combo("codex-relay");
    /// assert_eq!((combo.handoff_threshold, combo.generates_for("anthropic")), (0.8, true));
    /// ```
    pub fn relay_settings(&self) -> (RelayConfigs, Vec<(String, ConfigWarning)>) {
        let (default, global_warnings) = RelayConfig::from_overrides(&self.relay);
        let mut configs = RelayConfigs::new(default);
        let mut warnings: Vec<(String, ConfigWarning)> = Vec::new();
        for (name, config, combo_warnings) in self.relay_configs() {
            let field = format!("combos[{name:?}].relay");
            // A bad `[relay]` value shows up in every combo that inherits it: report it once.
            let own = combo_warnings
                .into_iter()
                .filter(|w| !global_warnings.contains(w));
            warnings.extend(own.map(|w| (field.clone(), w)));
            configs = configs.with_combo(name, config);
        }
        let global = global_warnings.into_iter().map(|w| ("relay".to_owned(), w));
        (configs, global.chain(warnings).collect())
    }

    /// Providers whose summary requests are sent with `stream: true` (`summary_stream`).
    pub fn stream_summary_providers(&self) -> Vec<String> {
        self.providers
            .iter()
            .filter(|p| p.summary_stream)
            .map(|p| p.name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests;
