//! The Redis backend: several gateway replicas share one store.
//!
//! Every record is a hash `{prefix}h:<key>` (account slot) or `{prefix}hm:<key>` (model slot)
//! with fields `rec` (the JSON record), `ver` (its version: a number the writing replica never
//! gave before, see `ids`), `exp` (expiry, Unix ms) and, while leased, `lu` (lease end, Unix ms)
//! and `lt` (lease token, made the same way). Claim, complete, release and delete are Lua
//! scripts on that one key, so each is atomic on the server. Expiry and lease ends are compared
//! with the caller's [`Clock`] (passed to the scripts), which keeps the semantics of the other
//! backends; the record's Redis TTL (`PEXPIREAT exp`) only collects garbage.
//!
//! On a Redis Cluster ([`RedisStoreBuilder::cluster`]) `<key>` is a hash tag (`{…}`), so the
//! keys of one session (both slots, its generation lease) live in one hash slot; no call
//! touches keys of two sessions, and listing and purging scan every master. Redis replicates
//! to replicas asynchronously: a write acknowledged by a master that dies before its replica
//! has it is lost with the failover.
//!
//! An affinity is a hash `{prefix}ac:<tenant, session, combo>` with fields `p` (provider), `a`
//! (account), `f` (the foreign digests and until when they are kept, JSON) and, when known,
//! `m` (the serving model), expiring after the affinity TTL without a change.
//!
//! Every call is bounded by a timeout (default 2 s); calls on a request's path (`get`,
//! `contains`, `claim`, `release`, `affinity`, `set_affinity`) get a short one (default 50 ms,
//! [`RedisStoreBuilder::request_timeout`]), so a slow Redis adds little to a user's request. A call that fails for the
//! connection's sake (timeout, refused, dropped) opens a circuit breaker: for a back-off (100 ms,
//! doubling up to 5 s) every call fails at once with [`StoreError::Unavailable`], generation
//! included, so an unreachable Redis adds at most one short timeout to a request and the layers
//! fail open. The first call after the back-off is the one trial that closes the breaker again;
//! the others keep failing at once while it runs.
//!
//! With [`RedisStoreBuilder::wait_for_replicas`], handoff writes and their `WAIT` go over a
//! second connection: `WAIT` blocks its connection until the replicas answer, and the request
//! path's calls must not queue behind it. An offer made by a switching request
//! ([`HandoffStore::offer_at_switch`]) has the short timeout and waits for no replica.
//!
//! `rediss://` URLs connect over TLS (rustls with ring), checked against the public web roots
//! or the certificate authorities given to [`RedisStoreBuilder::root_certificates`].
//!
//! An affinity whose write fails (a Redis that answers reads but refuses writes) is kept by the
//! replica that decided it while Redis still holds the value it was to replace, so that the
//! session's next request on that replica is not a switch again (`unwritten`).
//!
//! Files: `connection` (connecting, timeouts, the breaker), `cluster` (one server or a
//! cluster behind one connection type, the scan of every master), `ids` (versions and
//! tokens), `scripts` (key names, stored fields, Lua scripts), `store` (the [`HandoffStore`]
//! impl), `affinity` (a session's affinity read and written), `login` (subscription logins and
//! their refresh lock), `unwritten` (affinities whose write failed).
//!
//! [`HandoffStore`]: crate::HandoffStore
//! [`HandoffStore::offer_at_switch`]: crate::HandoffStore::offer_at_switch

mod affinity;
mod cluster;
mod connection;
mod ids;
mod login;
mod scripts;
mod store;
mod unwritten;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::affinity::AffinityMap;
use crate::breaker::Breaker;
use crate::clock::{Clock, SystemClock, now_ms};
use crate::{DEFAULT_AFFINITY_CACHE_ENTRIES, DEFAULT_AFFINITY_TTL, StoreError};
use cluster::Conn;
use ids::Ids;
use scripts::Scripts;
use unwritten::Unwritten;

/// Time limit of every Redis call off the request path by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time limit of a Redis call on a request's path by default: what a slow or unreachable Redis
/// can add to a user's request. A Redis on the same network answers in well under a
/// millisecond; set a longer one with [`RedisStoreBuilder::request_timeout`] for a distant one.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_millis(50);
/// First back-off of the circuit breaker.
pub(crate) const BREAKER_MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest back-off of the circuit breaker.
pub(crate) const BREAKER_MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a replica trusts its cached affinity by default before asking Redis again: not at
/// all. Any other replica may have served the session since this one last looked, and deciding
/// "no switch" on a stale view would send the new account another account's state; a read costs
/// one round trip on a path that already asks Redis for the handoff.
pub const DEFAULT_AFFINITY_CACHE_TTL: Duration = Duration::ZERO;

/// Options for connecting a [`RedisStore`].
///
/// `Debug` hides the URL's password.
#[derive(Clone)]
pub struct RedisStoreBuilder {
    url: String,
    cluster: bool,
    prefix: String,
    timeout: Duration,
    request_timeout: Duration,
    backoff: (Duration, Duration),
    root_certs: Option<Vec<u8>>,
    clock: Arc<dyn Clock>,
    affinity_ttl: Duration,
    affinity_cache_ttl: Duration,
    affinity_cache_entries: usize,
    wait: Option<ReplicaWait>,
}

/// How many replicas must acknowledge a handoff write, and for how long the write waits for
/// them ([`RedisStoreBuilder::wait_for_replicas`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaWait {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A cluster's URL may name several nodes: each is shown without its password.
        let url: Vec<String> = self.url.split(',').map(redacted).collect();
        f.debug_struct("RedisStoreBuilder")
            .field("url", &url.join(","))
            .field("cluster", &self.cluster)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("request_timeout", &self.request_timeout)
            .field("root_certs", &self.root_certs.is_some())
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

/// `url` without its password.
fn redacted(url: &str) -> String {
    match redis::parse_redis_url(url.trim()) {
        Some(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        // `redis://secret@host`: a lone user name is the password.
        Some(mut u) if !u.username().is_empty() => {
            let _ = u.set_username("***");
            u.to_string()
        }
        Some(u) => u.to_string(),
        None => "<unparsable URL>".to_owned(),
    }
}

impl RedisStoreBuilder {
    /// Whether the URL names a Redis Cluster (default `false`): then it may name several of
    /// its nodes, comma-separated (`redis://a:6379,redis://b:6379`); the store learns the
    /// others from them, follows the cluster's redirections and failovers, and keeps each
    /// session's keys in one hash slot. The prefix must not hold `{` or `}` then.
    pub fn cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// Prefix of every key this store writes (default `"context-relay:"`): lets several
    /// deployments share one Redis.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Time limit of every call off the request path, connecting included (default 2 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Time limit of the calls on a request's path (default
    /// [`DEFAULT_REQUEST_TIMEOUT`], 50 ms): what a slow or unreachable Redis can add to a
    /// request before the circuit breaker opens.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The circuit breaker's first and longest back-off (default 100 ms and 5 s).
    pub fn breaker_backoff(mut self, first: Duration, longest: Duration) -> Self {
        self.backoff = (first, longest);
        self
    }

    /// PEM certificates of the authorities a `rediss://` server is checked against, instead
    /// of the public web roots (for a private CA).
    pub fn root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certs = Some(pem.into());
        self
    }

    /// Reads the time from `clock` (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How long an unchanged affinity lives in Redis (default 7 days).
    pub fn affinity_ttl(mut self, ttl: Duration) -> Self {
        self.affinity_ttl = ttl;
        self
    }

    /// How long this replica trusts its cached affinity of a session (default zero: it asks
    /// Redis on every decision). Whatever this is set to is the bound on how stale a decision
    /// can be: another replica may have moved the session meanwhile.
    pub fn affinity_cache_ttl(mut self, ttl: Duration) -> Self {
        self.affinity_cache_ttl = ttl;
        self
    }

    /// Makes each handoff write wait until `replicas` replicas (of the key's master, with a
    /// cluster: of every master) acknowledged it, at most `timeout` (`WAIT`). Redis replicates
    /// asynchronously: without this, a handoff written in the moments before its master dies
    /// may be missing on the replica promoted in its place. A write that fewer replicas
    /// acknowledged in time is kept (the master has it), logged and counted in
    /// `context_relay_store_replica_wait_short_total`. `replicas = 0` (the default) waits for
    /// none. The wait is off every request's path: handoffs are written in the background.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = (replicas > 0).then_some(ReplicaWait { replicas, timeout });
        self
    }

    /// Most affinities this replica caches (default [`DEFAULT_AFFINITY_CACHE_ENTRIES`]); the
    /// least recently used are evicted.
    pub fn affinity_cache_entries(mut self, n: usize) -> Self {
        self.affinity_cache_entries = n.max(1);
        self
    }
}

/// The shared backend: one Redis (or a managed Redis-compatible service) behind several
/// gateway replicas.
///
/// [`may_contain`](crate::HandoffStore::may_contain) always answers `true` ("ask me"): another
/// replica may have written the handoff. Cloning shares the connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    /// The connection of handoff writes that wait for replicas (with `wait`), and the turn
    /// each takes on it: a `WAIT` blocks its connection, so a second write sent behind it would
    /// spend its own time limit queueing (and open the breaker when that ran out).
    waiting: Option<(Conn, tokio::sync::Mutex<()>)>,
    scripts: Scripts,
    ids: Ids,
    prefix: String,
    timeout: Duration,
    request_timeout: Duration,
    breaker: Breaker,
    clock: Arc<dyn Clock>,
    affinity_ttl: Duration,
    affinity_cache_ttl: Duration,
    affinity_cache: AffinityMap,
    /// Affinities whose write failed (see `unwritten`).
    unwritten: Unwritten,
    wait: Option<ReplicaWait>,
}

impl RedisStore {
    /// Connects to `url` (`redis://host:port/db`) with default options.
    pub async fn connect(url: impl Into<String>) -> Result<Self, StoreError> {
        Self::builder(url).connect().await
    }

    /// Options for connecting to `url`.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            cluster: false,
            prefix: "context-relay:".to_owned(),
            timeout: DEFAULT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            backoff: (BREAKER_MIN_BACKOFF, BREAKER_MAX_BACKOFF),
            root_certs: None,
            clock: Arc::new(SystemClock),
            affinity_ttl: DEFAULT_AFFINITY_TTL,
            affinity_cache_ttl: DEFAULT_AFFINITY_CACHE_TTL,
            affinity_cache_entries: DEFAULT_AFFINITY_CACHE_ENTRIES,
            wait: None,
        }
    }

    /// Whether the store talks to a Redis Cluster.
    fn is_cluster(&self) -> bool {
        matches!(self.inner.conn, Conn::Cluster(_))
    }

    fn now_ms(&self) -> u64 {
        now_ms(&*self.inner.clock)
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.prefix)
            .field("timeout", &self.inner.timeout)
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
