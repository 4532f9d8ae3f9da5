//! `[store]`: which handoff store, and the checks of its keys.

use std::path::PathBuf;

use serde::Deserialize;

use super::DEFAULT_STORE_PATH;
use super::error::{ConfigError, invalid};
use crate::secret::redact_url;

/// `[store]`: the handoff store backend.
///
/// `Debug` hides the password of `url`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Which backend (`redb` by default).
    #[serde(default)]
    pub backend: StoreBackend,
    /// The redb file (`context-relay.redb`).
    #[serde(default = "default_store_path")]
    pub path: PathBuf,
    /// The redis URL (`redis://…` or `rediss://…` for TLS), required by the redis backend.
    /// With `cluster = true`, one or more nodes of the cluster, comma-separated.
    #[serde(default)]
    pub url: Option<String>,
    /// Whether `url` names a Redis Cluster (`false`): the store then follows the cluster's
    /// slot map, redirections and failovers, and keeps the keys of each session in one slot.
    #[serde(default)]
    pub cluster: bool,
    /// The environment variable holding `url` (which may carry a password).
    #[serde(default)]
    pub url_env: Option<String>,
    /// Prefix of every Redis key (`context-relay:`), so several deployments can share a
    /// Redis.
    #[serde(default)]
    pub prefix: Option<String>,
    /// A PEM file of the certificate authorities a `rediss://` server is checked against
    /// (default: the public web roots).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Time limit in milliseconds of a Redis call on a request's path (40): what an
    /// unreachable Redis adds to a request before its circuit breaker opens.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Replicas that must acknowledge each handoff write (`WAIT`) before it counts as written
    /// (0: none, Redis's asynchronous replication).
    #[serde(default)]
    pub wait_replicas: u32,
    /// The longest a handoff write waits for `wait_replicas` in milliseconds (100).
    #[serde(default = "default_wait_timeout_ms")]
    pub wait_timeout_ms: u64,
}

impl StoreConfig {
    /// The keys of a Redis store set with another backend, where nothing reads them.
    pub(super) fn ignored_keys(&self) -> Vec<&'static str> {
        if self.backend == StoreBackend::Redis {
            return Vec::new();
        }
        [
            ("url", self.url.is_some()),
            ("url_env", self.url_env.is_some()),
            ("cluster", self.cluster),
            ("prefix", self.prefix.is_some()),
            ("ca_file", self.ca_file.is_some()),
            (
                "request_timeout_ms",
                self.request_timeout_ms != default_request_timeout_ms(),
            ),
            ("wait_replicas", self.wait_replicas != 0),
            (
                "wait_timeout_ms",
                self.wait_timeout_ms != default_wait_timeout_ms(),
            ),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect()
    }
}

fn default_wait_timeout_ms() -> u64 {
    100
}

fn default_request_timeout_ms() -> u64 {
    40
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            backend: StoreBackend::default(),
            path: default_store_path(),
            url: None,
            cluster: false,
            url_env: None,
            prefix: None,
            ca_file: None,
            request_timeout_ms: default_request_timeout_ms(),
            wait_replicas: 0,
            wait_timeout_ms: default_wait_timeout_ms(),
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("backend", &self.backend)
            .field("path", &self.path)
            .field("url", &self.url.as_deref().map(redact_url))
            .field("cluster", &self.cluster)
            .field("url_env", &self.url_env)
            .field("prefix", &self.prefix)
            .field("ca_file", &self.ca_file)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout_ms", &self.wait_timeout_ms)
            .finish()
    }
}

fn default_store_path() -> PathBuf {
    PathBuf::from(DEFAULT_STORE_PATH)
}

/// Handoff store backends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    /// An embedded redb file (survives restarts of one replica).
    #[default]
    Redb,
    /// In memory (lost on restart).
    Memory,
    /// A redis server shared by several replicas.
    Redis,
}

impl StoreConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=10_000).contains(&self.request_timeout_ms) {
            return Err(invalid(
                "store.request_timeout_ms",
                "a number of milliseconds from 1 to 10000",
                self.request_timeout_ms.to_string(),
            ));
        }
        if !(1..=10_000).contains(&self.wait_timeout_ms) {
            return Err(invalid(
                "store.wait_timeout_ms",
                "a number of milliseconds from 1 to 10000",
                self.wait_timeout_ms.to_string(),
            ));
        }
        match self.backend {
            StoreBackend::Redis => self.validate_redis(),
            StoreBackend::Redb if self.path.as_os_str().is_empty() => {
                Err(invalid("store.path", "a file path", "\"\""))
            }
            _ => Ok(()),
        }
    }
}

impl StoreConfig {
    fn validate_redis(&self) -> Result<(), ConfigError> {
        let Some(url) = self.url.as_deref() else {
            return Err(invalid(
                "store.url",
                "a redis URL with backend = \"redis\"",
                "none",
            ));
        };
        let (expected, urls): (_, Vec<&str>) = if self.cluster {
            (
                "redis:// or rediss:// URLs of cluster nodes, comma-separated",
                url.split(',').map(str::trim).collect(),
            )
        } else if url.contains(",redis://") || url.contains(",rediss://") {
            // Several nodes, but not said to be a cluster.
            (
                "one redis:// or rediss:// URL (several need cluster = true)",
                vec![""],
            )
        } else {
            ("a redis:// or rediss:// URL", vec![url])
        };
        if !urls
            .iter()
            .all(|u| u.starts_with("redis://") || u.starts_with("rediss://"))
        {
            return Err(invalid(
                "store.url",
                expected,
                format!("{:?}", redact_url(url)),
            ));
        }
        if self.cluster
            && let Some(prefix) = self.prefix.as_deref().filter(|p| p.contains(['{', '}']))
        {
            return Err(invalid(
                "store.prefix",
                "a prefix without { or } (on a cluster they choose a key's slot)",
                format!("{prefix:?}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::MINIMAL as BASE;
    use crate::config::{Config, ConfigError};

    fn load(extra_top: &str, extra_end: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(&format!("{extra_top}\n{BASE}\n{extra_end}"), |_| None)
    }

    fn err(top: &str, end: &str) -> String {
        load(top, end).expect_err("must be rejected").to_string()
    }

    #[test]
    fn a_redis_cluster_takes_several_nodes_and_no_brace_in_the_prefix() {
        let store = |keys: &str| format!("[store]\nbackend = \"redis\"\n{keys}\n");
        let c = load(
            "",
            &store("cluster = true\nurl = \"redis://:pw@a:1/, rediss://b:2/\""),
        )
        .unwrap();
        assert!(c.store.cluster);
        // Without `cluster`, a list is no URL; the error shows no password.
        let e = err("", &store("url = \"redis://a:1/,redis://:pw-9@b:2/\""));
        assert!(e.contains("store.url") && !e.contains("pw-9"), "{e}");
        let e = err(
            "",
            &store("cluster = true\nurl = \"redis://a:1/,http://b:2/\""),
        );
        assert!(e.contains("comma-separated"), "{e}");
        let e = err(
            "",
            &store("cluster = true\nurl = \"redis://a:1/\"\nprefix = \"{cr}:\""),
        );
        assert!(e.contains("store.prefix"), "{e}");
        // One Redis takes any prefix.
        load("", &store("url = \"redis://a:1/\"\nprefix = \"{cr}:\"")).unwrap();
    }
}
