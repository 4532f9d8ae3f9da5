//! The connection: connecting (TLS included), and every call bounded by a timeout and guarded by
//! the circuit breaker.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::RedisError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::cluster::Conn;
use super::ids::Ids;

use super::scripts::Scripts;
use super::unwritten::Unwritten;
use super::{Inner, RedisStore, RedisStoreBuilder, ReplicaWait};
use crate::StoreError;
use crate::affinity::AffinityMap;
use crate::breaker::Breaker;

/// Operations on a request's path: they get the short timeout.
const REQUEST_PATH: [&str; 7] = [
    "get",
    "contains",
    "claim",
    "release",
    "affinity",
    "set_affinity",
    "offer_at_switch",
];

impl RedisStoreBuilder {
    /// Connects; fails within the timeout when Redis cannot be reached.
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        if self.url.contains("rediss://") {
            // The redis crate builds its TLS configuration with the process-wide rustls
            // provider; make it ring unless the application chose one already (then this
            // returns an error we do not need).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let conn = self.connect_with(self.timeout).await?;
        // One command now: a server that wants a password the URL lacks (`NOAUTH`), or refuses
        // the user, is an error at start-up, not a relay that stays off with every call failing.
        // A user whose ACL leaves `PING` out (`NOPERM`) is authenticated: that is no error.
        let mut probe = conn.clone();
        let pinged: Result<String, StoreError> = bounded(
            "connect",
            self.timeout,
            redis::cmd("PING").query_async(&mut probe),
        )
        .await;
        match pinged {
            Err(StoreError::Redis { reason, .. })
                if reason.to_ascii_lowercase().contains("noperm") => {}
            other => {
                other?;
            }
        }
        // A write that waits for replicas blocks its connection until they answer (`WAIT` is a
        // blocking command): such writes get a connection of their own, so that the request
        // path's calls never queue behind one, and a response limit that covers the wait.
        let waiting = match self.wait {
            Some(wait) => Some((
                self.connect_with(self.timeout + wait.timeout).await?,
                tokio::sync::Mutex::new(()),
            )),
            None => None,
        };
        Ok(RedisStore {
            inner: Arc::new(Inner {
                conn,
                waiting,
                scripts: Scripts::new(),
                ids: Ids::new()?,
                prefix: self.prefix,
                timeout: self.timeout,
                request_timeout: self.request_timeout,
                breaker: Breaker::new("redis", self.backoff.0, self.backoff.1),
                clock: self.clock,
                affinity_ttl: self.affinity_ttl,
                affinity_cache_ttl: self.affinity_cache_ttl,
                affinity_cache: AffinityMap::new(self.affinity_cache_entries),
                unwritten: Unwritten::new(self.affinity_cache_entries),
                wait: self.wait,
            }),
        })
    }

    /// A connection whose commands are answered within `response` (else fail).
    async fn connect_with(&self, response: Duration) -> Result<Conn, StoreError> {
        if self.cluster {
            self.connect_cluster(response).await
        } else {
            self.connect_single(response).await
        }
    }

    async fn connect_single(&self, response: Duration) -> Result<Conn, StoreError> {
        let client = match &self.root_certs {
            Some(pem) => redis::Client::build_with_tls(
                self.url.as_str(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            None => redis::Client::open(self.url.as_str()),
        }
        .map_err(redis_err("connect"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(response))
            // Reconnection happens in the background; a caller never waits for more than one try.
            .set_number_of_retries(1);
        let conn = bounded(
            "connect",
            self.timeout,
            ConnectionManager::new_with_config(client, config),
        )
        .await?;
        Ok(Conn::Single(conn))
    }

    /// A cluster: `url` names one or more of its nodes (comma-separated); the client learns
    /// the others from them.
    async fn connect_cluster(&self, response: Duration) -> Result<Conn, StoreError> {
        if self.prefix.contains(['{', '}']) {
            return Err(StoreError::Redis {
                op: "connect",
                reason: format!(
                    "the key prefix {:?} holds a brace: on a Redis Cluster braces choose the \
                     slot of a key, and the store puts each session in its own",
                    self.prefix
                ),
            });
        }
        let nodes: Vec<&str> = self
            .url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect();
        let mut builder = redis::cluster::ClusterClientBuilder::new(nodes)
            .connection_timeout(self.timeout)
            .response_timeout(response);
        if let Some(pem) = &self.root_certs {
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            });
        }
        let client = builder.build().map_err(redis_err("connect"))?;
        let conn = bounded("connect", self.timeout, client.get_async_connection()).await?;
        Ok(Conn::Cluster(conn))
    }
}

impl RedisStore {
    pub(super) fn conn(&self) -> Conn {
        self.inner.conn.clone()
    }

    /// Whether the circuit breaker currently refuses calls (Redis found unreachable).
    pub fn is_unavailable(&self) -> bool {
        self.inner.breaker.is_open(Instant::now())
    }

    pub(super) async fn call<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        let breaker = &self.inner.breaker;
        let limit = if REQUEST_PATH.contains(&op) {
            self.inner.request_timeout
        } else {
            self.inner.timeout
        };
        let pass = match breaker.check(Instant::now(), limit) {
            Ok(pass) => pass,
            Err(retry_in) => return Err(StoreError::Unavailable { op, retry_in }),
        };
        match tokio::time::timeout(limit, fut).await {
            Ok(Ok(v)) => {
                breaker.success(pass);
                Ok(v)
            }
            Ok(Err(e)) => {
                if e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_refusal()
                    || e.is_connection_dropped()
                {
                    breaker.failure(Instant::now(), pass);
                }
                Err(redis_err(op)(e))
            }
            Err(_) => {
                breaker.failure(Instant::now(), pass);
                Err(StoreError::Timeout { op, after: limit })
            }
        }
    }
}

impl RedisStore {
    /// `WAIT` for the replicas of [`ReplicaWait`] after a write on `conn`. Fewer replicas in
    /// time is logged and counted, not an error: the master has the write. Off the breaker: a
    /// slow acknowledgement says nothing about Redis being reachable.
    pub(super) async fn wait_for_replicas(
        &self,
        wait: ReplicaWait,
        conn: &mut Conn,
    ) -> Result<(), StoreError> {
        // `WAIT n 0` would block for ever.
        let ms = u64::try_from(wait.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let cmd = redis::cmd("WAIT").arg(wait.replicas).arg(ms).to_owned();
        let limit = wait.timeout + self.inner.timeout;
        let acked: i64 = bounded("wait", limit, cmd.query_async(conn)).await?;
        if acked < i64::from(wait.replicas) {
            metrics::counter!("context_relay_store_replica_wait_short_total").increment(1);
            tracing::warn!(
                acknowledged = acked,
                wanted = wait.replicas,
                "a handoff write was not acknowledged by enough replicas in time (kept on the master)"
            );
        }
        Ok(())
    }
}

/// Runs `fut` within `limit`, naming `op` in the error.
async fn bounded<T>(
    op: &'static str,
    limit: Duration,
    fut: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(redis_err(op)),
        Err(_) => Err(StoreError::Timeout { op, after: limit }),
    }
}

pub(super) fn redis_err(op: &'static str) -> impl Fn(RedisError) -> StoreError {
    move |e| StoreError::Redis {
        op,
        reason: e.to_string(),
    }
}
