//! Validation of a parsed configuration: ranges, references between tables, uniqueness, and
//! the rule that an open gateway (no `[[clients]]`) listens on loopback only unless
//! `allow_open = true`.
//!
//! Errors name the field and the offending value, never a secret.

use std::collections::HashSet;
use std::net::SocketAddr;

use context_relay_core::config::RelayOverrides;

use super::Config;
use super::clients::{KEY_RULES, key_fault, parse_hex32};
use super::error::{ConfigError, invalid};
use super::limits::{BUFFER_SLACK, MAX_SECS, MIN_SECS};
use crate::secret::redact_url;

/// Largest relay `ttl_secs` (30 days): beyond it `now + ttl` can overflow a timestamp.
const MAX_TTL_SECS: u64 = 30 * 86_400;
/// Largest relay `summary_timeout_secs` and `lease_secs` (one hour).
const MAX_TASK_SECS: u64 = 3_600;
/// Largest relay `max_body_bytes` (1 GiB).
const MAX_RELAY_BODY: usize = 1 << 30;

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_request_bytes == 0 {
            return Err(invalid(
                "max_request_bytes",
                "a positive size in bytes",
                "0",
            ));
        }
        // The admin routes read the token as ASCII text. (The token is never printed.)
        if let Some(t) = &self.admin_token
            && let Some(fault) = key_fault(t).or((!t.is_ascii()).then_some("a non-ASCII key"))
        {
            return Err(invalid(
                "admin_token",
                format!("{KEY_RULES}, of ASCII characters"),
                fault,
            ));
        }
        self.store.validate()?;
        self.validate_limits()?;
        validate_relay("relay", &self.relay)?;

        let mut provider_names = HashSet::new();
        for p in &self.providers {
            let field = format!("providers[{:?}]", p.name);
            if p.name.trim().is_empty() || p.name.contains('/') || p.name != p.name.trim() {
                return Err(invalid(
                    format!("{field}.name"),
                    "a non-empty name without `/` or surrounding spaces",
                    format!("{:?}", p.name),
                ));
            }
            if !provider_names.insert(p.name.to_ascii_lowercase()) {
                return Err(invalid(
                    format!("{field}.name"),
                    "a unique provider name",
                    format!("{:?} twice", p.name),
                ));
            }
            validate_base_url(&format!("{field}.base_url"), &p.base_url)?;
            if !(p.rotate_at.is_finite() && p.rotate_at > 0.0 && p.rotate_at <= 1.0) {
                return Err(invalid(
                    format!("{field}.rotate_at"),
                    "a number in (0, 1]",
                    p.rotate_at.to_string(),
                ));
            }
            if p.max_output_tokens == Some(0) {
                return Err(invalid(
                    format!("{field}.max_output_tokens"),
                    "an integer of at least 1",
                    "0",
                ));
            }
            if p.accounts.is_empty() {
                return Err(invalid(
                    format!("{field}.accounts"),
                    "at least one account",
                    "none",
                ));
            }
            let mut ids = HashSet::new();
            for a in &p.accounts {
                let afield = format!("{field}.accounts[{:?}]", a.id);
                if a.id.trim().is_empty() {
                    return Err(invalid(format!("{afield}.id"), "a non-empty id", "\"\""));
                }
                if !ids.insert(a.id.as_str()) {
                    return Err(invalid(
                        format!("{afield}.id"),
                        "an account id unique within the provider",
                        format!("{:?} twice", a.id),
                    ));
                }
                if p.auth.is_login() {
                    // Read and checked with the credential file (`read_logins`).
                    continue;
                }
                if let Some(fault) = key_fault(a.api_key.as_deref().unwrap_or_default()) {
                    return Err(invalid(format!("{afield}.api_key"), KEY_RULES, fault));
                }
            }
        }

        let mut combo_names = HashSet::new();
        for c in &self.combos {
            let field = format!("combos[{:?}]", c.name);
            if c.name.trim().is_empty() || c.name.contains('/') {
                return Err(invalid(
                    format!("{field}.name"),
                    "a non-empty name without `/` (names with `/` are provider/model targets)",
                    format!("{:?}", c.name),
                ));
            }
            if !combo_names.insert(c.name.as_str()) {
                return Err(invalid(
                    format!("{field}.name"),
                    "a unique combo name",
                    format!("{:?} twice", c.name),
                ));
            }
            if c.targets.is_empty() {
                return Err(invalid(
                    format!("{field}.targets"),
                    "at least one \"provider/model\" target",
                    "[]",
                ));
            }
            validate_relay(&format!("{field}.relay"), &c.relay)?;
            for (i, t) in c.targets.iter().enumerate() {
                if !self.providers.iter().any(|p| p.name == t.provider) {
                    let known: Vec<&str> = self.providers.iter().map(|p| p.name.as_str()).collect();
                    return Err(invalid(
                        format!("{field}.targets[{i}]"),
                        format!("a configured provider (one of {known:?})"),
                        format!("{:?} (provider {:?})", t.to_string(), t.provider),
                    ));
                }
            }
        }
        self.validate_logins()?;
        self.validate_clients()?;
        self.check_open(self.listen)?;
        Ok(())
    }

    fn validate_limits(&self) -> Result<(), ConfigError> {
        for (name, secs) in self.limits.durations() {
            if !secs.in_range() {
                return Err(invalid(
                    format!("limits.{name}"),
                    format!("a number of seconds from {MIN_SECS} to {MAX_SECS}"),
                    secs.0.to_string(),
                ));
            }
        }
        if !(1..=1_000_000).contains(&self.limits.max_connections) {
            return Err(invalid(
                "limits.max_connections",
                "a number of connections from 1 to 1000000",
                self.limits.max_connections.to_string(),
            ));
        }
        if self.limits.max_buffered_bytes < self.max_request_bytes as u64 {
            return Err(invalid(
                "limits.max_buffered_bytes",
                format!(
                    "at least max_request_bytes ({}), or a request of that size could never be buffered",
                    self.max_request_bytes
                ),
                self.limits.max_buffered_bytes.to_string(),
            ));
        }
        Ok(())
    }

    fn validate_clients(&self) -> Result<(), ConfigError> {
        let mut names = HashSet::new();
        let mut digests = HashSet::new();
        for c in &self.clients {
            let field = format!("clients[{:?}]", c.name);
            if c.name.trim().is_empty() || c.name != c.name.trim() {
                return Err(invalid(
                    format!("{field}.name"),
                    "a non-empty name without surrounding spaces",
                    format!("{:?}", c.name),
                ));
            }
            if !names.insert(c.name.as_str()) {
                return Err(invalid(
                    format!("{field}.name"),
                    "a unique client name",
                    format!("{:?} twice", c.name),
                ));
            }
            if let Some(fault) = c.key.as_deref().and_then(key_fault) {
                return Err(invalid(format!("{field}.key"), KEY_RULES, fault));
            }
            if let Some(hex) = &c.key_sha256
                && parse_hex32(hex).is_none()
            {
                return Err(invalid(
                    format!("{field}.key_sha256"),
                    "64 hexadecimal digits (the SHA-256 of the key)",
                    format!("{} characters", hex.len()),
                ));
            }
            match c.key_digest() {
                Some(d) if !digests.insert(d) => {
                    return Err(invalid(
                        format!("{field}.key"),
                        "a key no other client has",
                        "the key of another client",
                    ));
                }
                Some(_) => {}
                None => {
                    return Err(invalid(
                        field,
                        "one of `key`, `key_env` or `key_sha256`",
                        "none",
                    ));
                }
            }
            for (i, combo) in c.combos.iter().flatten().enumerate() {
                if !self.combos.iter().any(|k| k.name == *combo) {
                    return Err(invalid(
                        format!("{field}.combos[{i}]"),
                        "the name of a configured combo",
                        format!("{combo:?}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuses an open gateway (no `[[clients]]`) on a non-loopback `listen` address unless
    /// `allow_open = true`: the gateway spends paid accounts, and an open one on a network
    /// interface is an open proxy to them.
    ///
    /// ```
    /// use context_relay_gateway::config::Config;
    /// let base = "[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\n[[providers.accounts]]\nid = \"a\"\napi_key = \"k\"\n";
    /// let config = Config::from_toml_str(base, |_| None).unwrap();
    /// assert!(config.check_open("127.0.0.1:4000".parse().unwrap()).is_ok());
    /// let e = config.check_open("0.0.0.0:4000".parse().unwrap()).unwrap_err();
    /// assert!(e.to_string().contains("allow_open"));
    /// ```
    pub fn check_open(&self, listen: SocketAddr) -> Result<(), ConfigError> {
        if self.clients.is_empty() && !self.allow_open && !listen.ip().is_loopback() {
            return Err(invalid(
                "clients",
                "at least one [[clients]] entry when listening beyond loopback \
                 (or `allow_open = true` to run an open gateway)",
                format!("none, with listen = {listen}"),
            ));
        }
        Ok(())
    }

    /// Whether the gateway runs without client keys.
    pub fn is_open(&self) -> bool {
        self.clients.is_empty()
    }

    /// Things that are valid but almost certainly not what was meant, one line each: no
    /// provider at all, an open
    /// gateway beyond loopback, the relay settings' (see `relay_hint`), a
    /// `max_buffered_bytes` below twice `max_request_bytes` and [`BUFFER_SLACK`] (a large
    /// request is refused even when it is alone), subscription logins on the memory store, and providers on a host known to speak one API left on
    /// `api = "passthrough"`.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.providers.is_empty() {
            out.push("no [[providers]]: every API request is answered with an error, nothing to route it to".to_owned());
        }
        if self.is_open() && !self.listen.ip().is_loopback() {
            out.push(format!(
                "the gateway is open (no [[clients]], allow_open = true) on {}: anyone who reaches it spends the configured accounts",
                self.listen
            ));
        }
        let (buffered, request) = (
            self.limits.max_buffered_bytes,
            self.max_request_bytes as u64,
        );
        let least = request.saturating_mul(2).saturating_add(BUFFER_SLACK);
        if buffered < least {
            out.push(format!(
                "limits.max_buffered_bytes ({buffered}) is below twice max_request_bytes ({request}) and {BUFFER_SLACK} bytes: a request takes its buffer and room for one rewritten copy of it from the budget, so a body over about {} bytes (less when chunked or compressed) is refused with 413 even when no other request is in flight (set max_buffered_bytes to at least {least})",
                buffered / 2,
            ));
        }
        out.extend(super::relay_hint::relay_warnings(self));
        for key in self.store.ignored_keys() {
            out.push(format!(
                "store.{key} applies to backend = \"redis\" only: ignored with backend = {:?}",
                format!("{:?}", self.store.backend).to_lowercase()
            ));
        }
        for p in self
            .providers
            .iter()
            .filter(|p| p.max_output_tokens.is_some() && p.api != super::ProviderApi::Anthropic)
        {
            out.push(format!("providers[{:?}].max_output_tokens applies to api = \"anthropic\" only (the max_tokens of a translated Responses request): ignored here", p.name));
        }
        let mut accounts = self.providers.iter().flat_map(|p| &p.accounts);
        if self.store.backend == super::StoreBackend::Memory
            && accounts.any(|a| a.credentials.is_some())
        {
            out.push("store.backend = \"memory\" with subscription logins: a refreshed pair is kept only in this process and its credential file, so a restart after a failed write to the file loses that login (use redb or redis)".to_owned());
        }
        if let Some(token) = self.admin_token.as_deref() {
            out.extend(admin_token_warnings(token, &self.clients));
        }
        out.extend(super::api_hint::passthrough_warnings(self));
        out.extend(super::api_hint::host_warnings(self));
        out
    }
}

/// The shortest admin token not warned about: the admin routes answer as fast as a guess can
/// be sent.
const MIN_ADMIN_TOKEN_CHARS: usize = 16;

/// What is wrong with `token` as the admin token: too short to resist guessing, or a client's
/// key (that client could read every tenant's handoffs).
fn admin_token_warnings(token: &str, clients: &[super::ClientConfig]) -> Vec<String> {
    let mut out = Vec::new();
    let chars = token.chars().count();
    if chars < MIN_ADMIN_TOKEN_CHARS {
        out.push(format!(
            "admin_token is {chars} characters long: anyone who reaches the admin routes can guess a token this short (use 32 random characters or more)"
        ));
    }
    let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()).into();
    for c in clients.iter().filter(|c| c.key_digest() == Some(digest)) {
        out.push(format!(
            "admin_token is also the key of client {:?}: that client can use the admin routes and read every tenant's handoffs",
            c.name
        ));
    }
    out
}

/// Range checks of the relay durations and sizes of `[relay]` or `[combos.relay]`.
fn validate_relay(field: &str, r: &RelayOverrides) -> Result<(), ConfigError> {
    let secs = [
        ("ttl_secs", r.ttl_secs, MAX_TTL_SECS),
        (
            "summary_timeout_secs",
            r.summary_timeout_secs,
            MAX_TASK_SECS,
        ),
        ("lease_secs", r.lease_secs, MAX_TASK_SECS),
    ];
    for (name, value, max) in secs {
        if let Some(v) = value
            && !(1..=max).contains(&v)
        {
            return Err(invalid(
                format!("{field}.{name}"),
                format!("a number of seconds from 1 to {max}"),
                v.to_string(),
            ));
        }
    }
    if let Some(v) = r.max_body_bytes
        && !(1..=MAX_RELAY_BODY).contains(&v)
    {
        return Err(invalid(
            format!("{field}.max_body_bytes"),
            format!("a size in bytes from 1 to {MAX_RELAY_BODY}"),
            v.to_string(),
        ));
    }
    Ok(())
}

/// `url` as an error may show it: a password in it is hidden.
fn shown(url: &str) -> String {
    if !url.contains('@') {
        url.to_owned()
    } else if url::Url::parse(url).is_ok() {
        redact_url(url)
    } else {
        "<a URL with user-info>".to_owned()
    }
}

fn validate_base_url(field: &str, url: &str) -> Result<(), ConfigError> {
    let expected =
        "an absolute http:// or https:// URL without query, e.g. \"https://api.example/v1\"";
    let uri: http::Uri = url
        .parse()
        .map_err(|_| invalid(field, expected, format!("{:?}", shown(url))))?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    if !scheme_ok || uri.authority().is_none() || uri.query().is_some() {
        return Err(invalid(field, expected, format!("{:?}", shown(url))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::tests::MINIMAL as BASE;

    fn load(extra_top: &str, extra_end: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(&format!("{extra_top}\n{BASE}\n{extra_end}"), |v| match v {
            "ALICE" => Some("alice-key".into()),
            "ADMIN" => Some("adm".into()),
            "REDIS" => Some("redis://:pw@h:1/".into()),
            "BLANK" => Some("  ".into()),
            _ => None,
        })
    }

    fn err(top: &str, end: &str) -> String {
        load(top, end).expect_err("must be rejected").to_string()
    }

    #[test]
    fn limits_are_range_checked() {
        for (key, bad) in [
            ("client_header_timeout_secs", "0"),
            ("client_body_timeout_secs", "-1"),
            ("upstream_head_timeout_secs", "1e12"),
            ("upstream_idle_timeout_secs", "nan"),
            ("shutdown_timeout_secs", "inf"),
            ("max_connections", "0"),
        ] {
            let e = err("", &format!("[limits]\n{key} = {bad}\n"));
            assert!(e.contains(&format!("limits.{key}")), "{key}: {e}");
        }
        let e = err(
            "max_request_bytes = 100",
            "[limits]\nmax_buffered_bytes = 99\n",
        );
        assert!(e.contains("max_buffered_bytes"), "{e}");
        let c = load("", "[limits]\nupstream_head_timeout_secs = 0.25\n").unwrap();
        assert_eq!(
            c.limits.upstream_head_timeout_secs.duration(),
            std::time::Duration::from_millis(250)
        );
    }

    #[test]
    fn relay_durations_are_range_checked() {
        let e = err("[relay]\nttl_secs = 18446744073709551615\n", "");
        assert!(e.contains("relay.ttl_secs"), "{e}");
        let e = err("", "  [combos.relay]\nlease_secs = 0\n");
        assert!(
            e.contains("combos[\"codex-relay\"].relay.lease_secs"),
            "{e}"
        );
        let e = err("[relay]\nsummary_timeout_secs = 100000\n", "");
        assert!(e.contains("summary_timeout_secs"), "{e}");
        assert!(load("[relay]\nttl_secs = 18000\n", "").is_ok());
    }

    #[test]
    fn clients_are_validated() {
        let c = load(
            "",
            "[[clients]]\nname = \"alice\"\nkey_env = \"ALICE\"\ncombos = [\"codex-relay\"]\n",
        )
        .unwrap();
        assert_eq!(c.clients[0].key.as_deref(), Some("alice-key"));
        assert!(!c.is_open());
        let e = err(
            "",
            "[[clients]]\nname = \"a\"\nkey = \"x\"\ncombos = [\"nope\"]\n",
        );
        assert!(
            e.contains("clients[\"a\"].combos[0]") && e.contains("nope"),
            "{e}"
        );
        let e = err(
            "",
            "[[clients]]\nname = \"a\"\nkey = \"x\"\n[[clients]]\nname = \"a\"\nkey = \"y\"\n",
        );
        assert!(e.contains("twice"), "{e}");
        let e = err(
            "",
            "[[clients]]\nname = \"a\"\nkey = \"same\"\n[[clients]]\nname = \"b\"\nkey = \"same\"\n",
        );
        assert!(e.contains("another client") && !e.contains("same\""), "{e}");
        let e = err("", "[[clients]]\nname = \"a\"\nkey_sha256 = \"abc\"\n");
        assert!(e.contains("key_sha256") && e.contains("64"), "{e}");
        let e = err(
            "",
            "[[clients]]\nname = \"a\"\nkey = \"x\"\nkey_sha256 = \"abc\"\n",
        );
        assert!(e.contains("several"), "{e}");
        let e = err("", "[[clients]]\nname = \"a\"\n");
        assert!(e.contains("neither"), "{e}");
        let e = err("", "[[clients]]\nname = \"a\"\nkey_env = \"BLANK\"\n");
        assert!(e.contains("BLANK") && e.contains("empty"), "{e}");
        // With clients, any listen address is fine.
        assert!(
            load(
                "listen = \"0.0.0.0:4000\"",
                "[[clients]]\nname = \"a\"\nkey = \"x\"\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn secrets_from_the_environment() {
        let c = load(
            "admin_token_env = \"ADMIN\"",
            "[store]\nbackend = \"redis\"\nurl_env = \"REDIS\"\n",
        )
        .unwrap();
        assert_eq!(c.admin_token.as_deref(), Some("adm"));
        assert_eq!(c.store.url.as_deref(), Some("redis://:pw@h:1/"));
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("adm\"") && !debug.contains(":pw@"),
            "{debug}"
        );
        assert!(!debug.contains("k-a"), "{debug}");
        let text = BASE.replace("http://127.0.0.1:9/v1", "ftp://u:pw-7@h/v1");
        let e = Config::from_toml_str(&text, |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("base_url") && !e.contains("pw-7"), "{e}");
        let e = err("admin_token = \"x\"\nadmin_token_env = \"ADMIN\"", "");
        assert!(e.contains("both"), "{e}");
        let e = err("admin_token_env = \"UNSET\"", "");
        assert!(e.contains("UNSET") && e.contains("not set"), "{e}");
    }

    #[test]
    fn a_budget_below_twice_the_request_limit_is_warned_about() {
        let c = load(
            "max_request_bytes = 1000",
            "[limits]\nmax_buffered_bytes = 67536\n",
        )
        .unwrap();
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let c = load(
            "max_request_bytes = 1000",
            "[limits]\nmax_buffered_bytes = 67535\n",
        )
        .unwrap();
        let w = c.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("max_buffered_bytes (67535)")
                && w[0].contains("over about 33767 bytes")
                && w[0].contains("413")
                && w[0].contains("at least 67536"),
            "{w:?}"
        );
    }

    #[test]
    fn rotate_at_at_or_below_the_threshold_is_warned_about() {
        let c = load("[relay]\nhandoff_threshold = 0.9\n", "").unwrap();
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let text = BASE.replace("name = \"codex\"\n", "name = \"codex\"\nrotate_at = 0.8\n");
        let c = Config::from_toml_str(&text, |_| None).unwrap();
        let w = c.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("no handoff can ever be written"), "{}", w[0]);
    }
}
