//! Reloading the configuration of a running gateway (SIGHUP in the binary).
//!
//! [`Gateway::reload`] builds the gateway of a new, already validated configuration and makes
//! the running server serve it: clients, providers and accounts, combos, relay settings and
//! the per-request limits take effect for the next request, on open connections too. What the
//! old gateway knows carries over: the store, the relay's in-flight summaries, cool-downs and
//! background work, each remaining account's usage, exhaustion and sessions (matched by
//! provider name and account id), metrics and readiness.
//!
//! Some settings belong to the process and need a restart: `listen`, `[store]`, `log_format`,
//! `relay_enabled`, `client_header_timeout_secs`, `max_connections` and
//! `shutdown_timeout_secs`. A reload that changes them keeps the running values and says so.

use std::sync::Arc;

use crate::app::{Gateway, GatewayError};
use crate::auth::Auth;
use crate::budget::ByteBudget;
use crate::combo::Routes;
use crate::config::Config;
use crate::pool::{AccountPools, LoginServices};
use crate::upstream::{Upstream, UpstreamLimits};

impl Gateway {
    /// Serves `config` from the next request on; returns the gateway of the new configuration,
    /// which the next reload starts from. On an error nothing changes.
    ///
    /// Clients, providers and accounts, combos, relay settings and the per-request limits
    /// take effect for the next request, on open connections too. A configuration with no
    /// provider is refused when the running one has some (an empty or cut file). The store, the relay's
    /// in-flight summaries, cool-downs and background work, metrics, readiness, the usage
    /// counted and the activity feed carry over, and so do each remaining account's usage,
    /// exhaustion and sessions (matched by provider name and account id), and each subscription
    /// login left unchanged (same account, credentials file and token endpoint) keeps its
    /// tokens and any refresh in flight. `listen`,
    /// `[store]`, `log_format`, `relay_enabled`, `client_header_timeout_secs`,
    /// `max_connections` and `shutdown_timeout_secs` need a restart: a reload that changes
    /// them keeps the running values and logs a warning.
    ///
    /// Only what [`service`](Self::service), [`spawn`](Self::spawn) and
    /// [`serve`](Self::serve) serve is reloaded: a router taken with
    /// [`router`](Self::router) keeps the configuration it was built with.
    pub async fn reload(&self, mut config: Config) -> Result<Gateway, GatewayError> {
        for kept in keep_process_settings(&self.config, &mut config) {
            tracing::warn!("{kept} changed: it applies after a restart; the running value is kept");
        }
        config.check_open(config.listen)?;
        if config.providers.is_empty() && !self.config.providers.is_empty() {
            // A file caught mid-write (`>` truncates before it writes) parses as an empty
            // configuration: serving it would answer every request with an error.
            return Err(crate::config::invalid(
                "providers",
                "at least one provider in a reloaded configuration (stop the gateway to stop serving)",
                "none: an empty or cut file?",
            )
            .into());
        }
        let admin_changed = config.admin_token != self.config.admin_token;
        let (configs, warnings) = config.relay_settings();
        for (field, w) in warnings {
            tracing::warn!("{field}: {w} (the default is used)");
        }
        for w in config.warnings() {
            tracing::warn!("{w}");
        }
        let relay = crate::relay::reconfigured(&self.relay, &config, configs);
        let limits = upstream_limits(&config);
        let upstream = if limits == upstream_limits(&self.config) {
            self.upstream.clone()
        } else {
            Upstream::with_limits(limits)?.usage(self.usage.clone())
        };
        let logins = LoginServices {
            store: self.store.clone(),
            client: upstream.client(),
            carried: self.pools.logins(),
            tasks: self.login_tasks.clone(),
        };
        let pools = AccountPools::new(&config, Some(&logins));
        pools.carry_from(&self.pools);
        let budget = if config.limits.max_buffered_bytes == self.config.limits.max_buffered_bytes {
            self.budget.clone()
        } else {
            ByteBudget::new(config.limits.max_buffered_bytes)
        };
        self.usage.set_open(config.is_open());
        self.usage.know_models(&config);
        let next = Gateway {
            routes: Arc::new(Routes::from_config(&config)),
            pools: Arc::new(pools),
            upstream,
            store: self.store.clone(),
            relay,
            metrics: self.metrics.clone(),
            auth: Auth::from_config(&config, self.tenant_keys.clone()),
            tenant_keys: self.tenant_keys.clone(),
            budget,
            readiness: self.readiness.clone(),
            live: self.live.clone(),
            streams: self.streams.clone(),
            usage: self.usage.clone(),
            activity: self.activity.clone(),
            login_tasks: self.login_tasks.clone(),
            config: Arc::new(config),
        }
        .load_tenant_secret()
        .await?;
        if admin_changed {
            // The console's event streams opened with the old token end.
            next.activity.admin_changed();
        }
        let proxy = next.proxy();
        next.streams
            .set(next.config.limits.request_timeout_secs.duration());
        self.live.set(
            next.router_with(proxy.clone()),
            Some(proxy),
            next.body_timeout(),
        );
        // Requests in flight keep the old pools: they no longer use a removed account.
        self.pools.retire_removed(&next.pools);
        Ok(next)
    }
}

/// The upstream client's time bounds of `config`.
pub(crate) fn upstream_limits(config: &Config) -> UpstreamLimits {
    let l = &config.limits;
    UpstreamLimits {
        connect: l.upstream_connect_timeout_secs.duration(),
        head: l.upstream_head_timeout_secs.duration(),
        idle: l.upstream_idle_timeout_secs.duration(),
        pool_idle: crate::upstream::POOL_IDLE,
    }
}

/// Puts the running values of the settings that need a restart back into `next`; the names of
/// those that differed.
fn keep_process_settings(running: &Config, next: &mut Config) -> Vec<&'static str> {
    let mut kept = Vec::new();
    // Each named setting of `next` that differs takes its running value back.
    macro_rules! keep {
        ($($field:ident).+ => $name:literal) => {
            if next.$($field).+ != running.$($field).+ {
                kept.push($name);
                next.$($field).+ = running.$($field).+.clone();
            }
        };
    }
    keep!(listen => "listen");
    keep!(store => "[store]");
    keep!(log_format => "log_format");
    keep!(relay_enabled => "relay_enabled");
    // The listener's own bounds (see `ServeOptions`).
    keep!(limits.client_header_timeout_secs => "limits.client_header_timeout_secs");
    keep!(limits.client_write_timeout_secs => "limits.client_write_timeout_secs");
    keep!(limits.max_connections => "limits.max_connections");
    keep!(limits.shutdown_timeout_secs => "limits.shutdown_timeout_secs");
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let listen = if extra.contains("listen") {
            ""
        } else {
            "listen = \"127.0.0.1:4000\"\n"
        };
        let text = format!(
            "{listen}{extra}\n[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\n[[providers.accounts]]\nid = \"a\"\napi_key = \"k\"\n"
        );
        Config::from_toml_str(&text, |_| None).unwrap()
    }

    #[test]
    fn process_settings_keep_their_running_values() {
        let running = config("");
        let mut next = config(
            "listen = \"127.0.0.1:5000\"\nrelay_enabled = false\n[limits]\nmax_connections = 7\nupstream_head_timeout_secs = 5\nclient_write_timeout_secs = 9\n",
        );
        let kept = keep_process_settings(&running, &mut next);
        assert_eq!(
            kept,
            [
                "listen",
                "relay_enabled",
                "limits.client_write_timeout_secs",
                "limits.max_connections"
            ]
        );
        assert_eq!(next.listen, running.listen);
        assert!(next.relay_enabled);
        assert_eq!(next.limits.max_connections, running.limits.max_connections);
        // A per-request limit is reloaded.
        assert_eq!(
            next.limits.upstream_head_timeout_secs.duration().as_secs(),
            5
        );
        assert!(keep_process_settings(&running, &mut config("")).is_empty());
    }
}
