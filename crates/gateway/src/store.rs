//! Opening the handoff store named by `[store]`.
//!
//! - `backend = "redb"` (default): one file at `path` (`context-relay.redb`), durable across
//!   restarts and `kill -9`; one gateway process at a time may open it.
//! - `backend = "memory"`: in process, lost on restart (tests, trying things out).
//! - `backend = "redis"`: a Redis server at `url` (or the variable `url_env`), shared by several
//!   gateway replicas (needs the `redis` feature, on by default). `rediss://` connects over TLS,
//!   checked against the web roots or the PEM authorities of `ca_file`; `prefix` (default
//!   `context-relay:`) starts every key. A call on a request's path waits at most
//!   `request_timeout_ms` (40); when Redis does not answer, a circuit breaker skips it for a
//!   back-off (100 ms doubling up to 5 s): requests pass through without the relay and summaries
//!   are not generated meanwhile.
//!
//! Errors name the file or the server (with any password in the URL hidden), so a
//! misconfigured store fails at start-up with a message that says what to fix.

use std::path::PathBuf;
use std::sync::Arc;

use context_relay_store::{HandoffStore, MemoryStore, RedbStore, StoreError};

use crate::config::{StoreBackend, StoreConfig};

/// Why the handoff store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreOpenError {
    /// The redb file could not be opened or created.
    #[error("cannot open the redb handoff store at {path}: {source}")]
    Redb {
        /// The configured file.
        path: PathBuf,
        /// What the store reported (locked by another process, not a redb file, …).
        source: StoreError,
    },
    /// The Redis server could not be reached or refused the connection.
    #[error("cannot connect to the redis handoff store at {url}: {source}")]
    Redis {
        /// The configured URL, password hidden.
        url: String,
        /// What the client reported.
        source: StoreError,
    },
    /// The `ca_file` of a redis store could not be read.
    #[error("cannot read store.ca_file {path}: {source}")]
    CaFile {
        /// The configured file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `backend = "redis"` without a URL (the configuration loader rejects this already).
    #[error("store.url: expected a redis URL with backend = \"redis\", found none")]
    MissingUrl,
    /// `backend = "redis"` in a gateway built without the `redis` feature.
    #[error(
        "store.backend: expected \"redb\" or \"memory\" (this gateway was built without the `redis` feature), found \"redis\""
    )]
    RedisUnsupported,
    /// `backend = "redis"` passed to a synchronous constructor.
    #[error(
        "store.backend = \"redis\" connects asynchronously: build the gateway with `Gateway::connect` instead of `Gateway::new`"
    )]
    NeedsAsync,
}

/// Opens the redb or memory store of `config` (no I/O beyond the file); `None` for redis,
/// which only [`open_store`] can connect.
pub(crate) fn open_local_store(
    config: &StoreConfig,
) -> Result<Option<Arc<dyn HandoffStore>>, StoreOpenError> {
    match config.backend {
        StoreBackend::Memory => Ok(Some(Arc::new(MemoryStore::new()))),
        StoreBackend::Redb => {
            let store = RedbStore::open(&config.path).map_err(|source| StoreOpenError::Redb {
                path: config.path.clone(),
                source,
            })?;
            tracing::info!(path = %config.path.display(), "handoff store: redb");
            Ok(Some(Arc::new(store)))
        }
        StoreBackend::Redis => Ok(None),
    }
}

/// What `--check` says about the store file of `config`: for redb, the file is opened and
/// read (its index rebuilt) and closed again; a damaged file is the same error the gateway
/// would stop on. For redis, its `ca_file` is read (a file that cannot be is the error the
/// start would stop on; the server itself is not contacted). `Ok(None)` when there is
/// nothing on disk to read.
///
/// A file that a running gateway holds open cannot be read: that is said, not an error.
pub fn check_store(config: &StoreConfig) -> Result<Option<String>, StoreOpenError> {
    if config.backend == StoreBackend::Redis
        && let Some(path) = &config.ca_file
    {
        std::fs::read(path).map_err(|e| StoreOpenError::CaFile {
            path: path.clone(),
            source: e,
        })?;
        return Ok(None);
    }
    if config.backend != StoreBackend::Redb {
        return Ok(None);
    }
    let path = &config.path;
    if !path.exists() {
        // The gateway creates the file, not its folder. A folder that is not there yet may be
        // by the start (a container's volume, systemd's `StateDirectory`): said, not an error;
        // a file where the folder should be never works.
        let folder = match path.parent() {
            Some(p) if p.as_os_str().is_empty() => std::path::Path::new("."),
            Some(p) => p,
            None => std::path::Path::new("/"),
        };
        if folder.exists() && !folder.is_dir() {
            return Err(StoreOpenError::Redb {
                path: path.clone(),
                source: StoreError::Open {
                    path: path.clone(),
                    reason: format!("its folder {} is not a folder", folder.display()),
                },
            });
        }
        if !folder.exists() {
            return Ok(Some(format!(
                "store {}: not there yet, nor its folder {}: the gateway creates the file at start, not the folder (a container's volume or systemd's StateDirectory makes it; without it the start fails)",
                path.display(),
                folder.display()
            )));
        }
        return Ok(Some(format!(
            "store {}: not there yet (created at start)",
            path.display()
        )));
    }
    match RedbStore::open(path) {
        Ok(store) => Ok(Some(format!(
            "store {}: readable ({} handoffs, {} unreadable records skipped)",
            path.display(),
            store.indexed(),
            store.corrupt_records()
        ))),
        // redb's lock: another process (the running gateway) has the file open.
        Err(StoreError::Open { reason, .. }) if reason.starts_with("the file is locked") => {
            Ok(Some(format!(
                "store {}: in use by a running process, not read",
                path.display()
            )))
        }
        Err(source) => Err(StoreOpenError::Redb {
            path: path.clone(),
            source,
        }),
    }
}

/// Opens (or connects to) the store of `config`.
pub(crate) async fn open_store(
    config: &StoreConfig,
) -> Result<Arc<dyn HandoffStore>, StoreOpenError> {
    if let Some(store) = open_local_store(config)? {
        return Ok(store);
    }
    connect_redis(config).await
}

#[cfg(feature = "redis")]
async fn connect_redis(config: &StoreConfig) -> Result<Arc<dyn HandoffStore>, StoreOpenError> {
    let url = config.url.as_deref().ok_or(StoreOpenError::MissingUrl)?;
    let mut builder = context_relay_store::RedisStore::builder(url)
        .cluster(config.cluster)
        .request_timeout(std::time::Duration::from_millis(config.request_timeout_ms))
        .wait_for_replicas(
            config.wait_replicas,
            std::time::Duration::from_millis(config.wait_timeout_ms),
        );
    if let Some(prefix) = &config.prefix {
        builder = builder.prefix(prefix.as_str());
    }
    if let Some(path) = &config.ca_file {
        let pem = std::fs::read(path).map_err(|e| StoreOpenError::CaFile {
            path: path.clone(),
            source: e,
        })?;
        builder = builder.root_certificates(pem);
    }
    let store = builder
        .connect()
        .await
        .map_err(|source| StoreOpenError::Redis {
            url: redact_url(url),
            source,
        })?;
    tracing::info!(url = %redact_url(url), cluster = config.cluster, "handoff store: redis");
    Ok(Arc::new(store))
}

#[cfg(not(feature = "redis"))]
async fn connect_redis(_config: &StoreConfig) -> Result<Arc<dyn HandoffStore>, StoreOpenError> {
    Err(StoreOpenError::RedisUnsupported)
}

/// Makes the redb file of `config` readable by its owner only when it is not already: it holds
/// the subscription logins' tokens. Other backends keep no file of ours.
pub(crate) fn make_private(config: &StoreConfig) {
    if config.backend != StoreBackend::Redb {
        return;
    }
    match crate::secret::restrict_to_owner(&config.path) {
        Ok(true) => {
            tracing::info!(path = %config.path.display(), "the store holds login tokens: its file is now readable by its owner only")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(path = %config.path.display(), error = %e, "the store holds login tokens but its file's permissions cannot be restricted")
        }
    }
}

pub(crate) use crate::secret::redact_url;

#[cfg(test)]
mod tests {
    use super::*;

    /// `--check` of a store not created yet: fine in a folder that exists (the gateway
    /// creates the file), said of a folder not there yet (a volume may make it by the start),
    /// an error when a file stands where the folder should be.
    #[test]
    fn check_store_needs_the_folder_of_a_file_not_there_yet() {
        let dir = tempfile::tempdir().unwrap();
        let config = |path: std::path::PathBuf| StoreConfig {
            backend: StoreBackend::Redb,
            path,
            ..StoreConfig::default()
        };
        let said = check_store(&config(dir.path().join("relay.redb"))).unwrap();
        assert!(said.unwrap().contains("not there yet"));
        let missing = dir.path().join("nodir").join("relay.redb");
        let said = check_store(&config(missing)).unwrap().unwrap();
        assert!(
            said.contains("nodir") && said.contains("the start fails"),
            "{said}"
        );
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let e = check_store(&config(file.join("relay.redb")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a-file") && e.contains("is not a folder"), "{e}");
    }

    /// `--check` of a redis store reads its `ca_file`, as the start does.
    #[test]
    fn check_store_reads_the_ca_file_of_a_redis_store() {
        let dir = tempfile::tempdir().unwrap();
        let config = |ca: std::path::PathBuf| StoreConfig {
            backend: StoreBackend::Redis,
            url: Some("rediss://127.0.0.1:6380/".to_owned()),
            ca_file: Some(ca),
            ..StoreConfig::default()
        };
        let missing = dir.path().join("no-ca.pem");
        let e = check_store(&config(missing)).unwrap_err().to_string();
        assert!(
            e.contains("store.ca_file") && e.contains("no-ca.pem"),
            "{e}"
        );
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, b"-----BEGIN CERTIFICATE-----\n").unwrap();
        assert!(check_store(&config(ca)).unwrap().is_none());
    }

    #[tokio::test]
    async fn redb_open_errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        // A directory is not a redb file.
        let config = StoreConfig {
            backend: StoreBackend::Redb,
            path: dir.path().to_owned(),
            ..StoreConfig::default()
        };
        let e = open_store(&config)
            .await
            .err()
            .expect("a directory is refused");
        assert!(
            e.to_string().contains(&dir.path().display().to_string()),
            "{e}"
        );

        let config = StoreConfig {
            backend: StoreBackend::Redb,
            path: dir.path().join("relay.redb"),
            ..StoreConfig::default()
        };
        let store = open_store(&config).await.unwrap();
        assert_eq!(store.backend(), "redb");
        // One process at a time: a second open of the same file fails clearly.
        if let Err(e) = open_store(&config).await {
            assert!(e.to_string().contains("relay.redb"), "{e}");
        }
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn redis_errors_name_the_server_without_the_password() {
        let config = StoreConfig {
            backend: StoreBackend::Redis,
            path: PathBuf::new(),
            // Port 1 on loopback: nothing listens there.
            url: Some("redis://:hunter2@127.0.0.1:1/".to_owned()),
            ..StoreConfig::default()
        };
        let e = open_store(&config)
            .await
            .err()
            .expect("nothing listens on port 1");
        let msg = e.to_string();
        assert!(msg.contains("127.0.0.1:1"), "{msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
    }
}

#[cfg(test)]
mod examples {
    #[tokio::test(flavor = "current_thread")]
    async fn module_example() {
        use crate::config::{StoreBackend, StoreConfig};
        use crate::store::open_store;
        let config = StoreConfig {
            backend: StoreBackend::Memory,
            ..StoreConfig::default()
        };
        let store = open_store(&config).await.unwrap();
        assert_eq!(store.backend(), "memory");
    }
}
