//! The Redis backend: several gateway replicas share one store.
//!
//! Every record is a hash `{prefix}h:<key>` with fields `rec` (the JSON record), `ver` (a
//! version from the `{prefix}seq` counter), `exp` (expiry, Unix ms) and, while leased, `lu`
//! (lease end, Unix ms) and `lt` (lease token). Claim, complete, release and delete are Lua
//! scripts, so each is atomic on the server. Expiry and lease ends are compared with the
//! caller's [`Clock`] (passed to the scripts), which keeps the semantics of the other backends;
//! the record's Redis TTL (`PEXPIREAT exp`) only collects garbage.
//!
//! An affinity is a hash `{prefix}ac:<tenant, session, combo>` with fields `p` (provider), `a`
//! (account) and `f` (the foreign digests and until when they are kept, JSON), expiring after
//! the affinity TTL without a change.
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
//! `rediss://` URLs connect over TLS (rustls with ring), checked against the public web roots
//! or the certificate authorities given to [`RedisStoreBuilder::root_certificates`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use context_relay_core::portable::ForeignSet;
use context_relay_core::time::{from_unix_millis, to_unix_millis};
use context_relay_core::{HandoffKey, HandoffRecord};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Script};

use crate::affinity::{self, AffinityMap, Write};
use crate::breaker::Breaker;
use crate::clock::{Clock, SystemClock, after_ms, now_ms};
use crate::{
    Affinity, Claim, DEFAULT_AFFINITY_CACHE_ENTRIES, DEFAULT_AFFINITY_TTL, GenerationLease,
    HandoffStore, StoreError, StoreFuture, report_corrupt,
};

/// The foreign digests of an affinity, as stored in its `f` field.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Foreign {
    foreign: ForeignSet,
    until: u64,
}

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

/// Operations on a request's path: they get the short timeout.
const REQUEST_PATH: [&str; 6] = [
    "get",
    "contains",
    "claim",
    "release",
    "affinity",
    "set_affinity",
];
/// How long a replica trusts its cached affinity by default before asking Redis again: not at
/// all. Any other replica may have served the session since this one last looked, and deciding
/// "no switch" on a stale view would send the new account another account's state; a read costs
/// one round trip on a path that already asks Redis for the handoff.
pub const DEFAULT_AFFINITY_CACHE_TTL: Duration = Duration::ZERO;

const UPSERT: &str = r"
local v = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'rec', ARGV[1], 'ver', v, 'exp', ARGV[2])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return v
";

const CLAIM: &str = r"
local f = redis.call('HMGET', KEYS[1], 'rec', 'ver', 'exp', 'lu')
if not f[1] or not f[3] then return false end
if tonumber(f[3]) <= tonumber(ARGV[1]) then return false end
if f[4] and tonumber(f[4]) > tonumber(ARGV[1]) then return false end
local t = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'lu', ARGV[2], 'lt', t)
return {f[1], f[2], t}
";

const COMPLETE: &str = r"
if redis.call('HGET', KEYS[1], 'ver') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

const RELEASE: &str = r"
local f = redis.call('HMGET', KEYS[1], 'ver', 'lt')
if f[1] == ARGV[1] and f[2] == ARGV[2] then
  redis.call('HDEL', KEYS[1], 'lu', 'lt')
end
return 0
";

/// Deletes the record; 1 when it was live at ARGV[1].
const DELETE: &str = r"
local e = redis.call('HGET', KEYS[1], 'exp')
redis.call('DEL', KEYS[1])
if e and tonumber(e) > tonumber(ARGV[1]) then return 1 end
return 0
";

/// Deletes the record if it expired at ARGV[1].
const PURGE_ONE: &str = r"
local e = redis.call('HGET', KEYS[1], 'exp')
if e and tonumber(e) <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// Writes the affinity unless it holds the same account and foreign digests and was written
/// recently (its TTL is still above ARGV[4]): the common case costs no write.
const SET_AFFINITY: &str = r"
local f = redis.call('HMGET', KEYS[1], 'p', 'a', 'f')
if f[1] == ARGV[1] and f[2] == ARGV[2] and f[3] == ARGV[5]
  and redis.call('PTTL', KEYS[1]) > tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[1], 'p', ARGV[1], 'a', ARGV[2], 'f', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

const BEGIN_GENERATION: &str = r"
local t = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], t, 'NX', 'PX', ARGV[1]) then return t end
return false
";

const END_GENERATION: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
";

struct Scripts {
    upsert: Script,
    claim: Script,
    complete: Script,
    release: Script,
    delete: Script,
    purge_one: Script,
    set_affinity: Script,
    begin_generation: Script,
    end_generation: Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            upsert: Script::new(UPSERT),
            claim: Script::new(CLAIM),
            complete: Script::new(COMPLETE),
            release: Script::new(RELEASE),
            delete: Script::new(DELETE),
            purge_one: Script::new(PURGE_ONE),
            set_affinity: Script::new(SET_AFFINITY),
            begin_generation: Script::new(BEGIN_GENERATION),
            end_generation: Script::new(END_GENERATION),
        }
    }
}

/// Options for connecting a [`RedisStore`].
///
/// `Debug` hides the URL's password.
#[derive(Clone)]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    timeout: Duration,
    request_timeout: Duration,
    backoff: (Duration, Duration),
    root_certs: Option<Vec<u8>>,
    clock: Arc<dyn Clock>,
    affinity_ttl: Duration,
    affinity_cache_ttl: Duration,
    affinity_cache_entries: usize,
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = match redis::parse_redis_url(&self.url) {
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
        };
        f.debug_struct("RedisStoreBuilder")
            .field("url", &url)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("request_timeout", &self.request_timeout)
            .field("root_certs", &self.root_certs.is_some())
            .finish_non_exhaustive()
    }
}

impl RedisStoreBuilder {
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

    /// Most affinities this replica caches (default [`DEFAULT_AFFINITY_CACHE_ENTRIES`]); the
    /// least recently used are evicted.
    pub fn affinity_cache_entries(mut self, n: usize) -> Self {
        self.affinity_cache_entries = n.max(1);
        self
    }

    /// Connects; fails within the timeout when Redis cannot be reached.
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        if self.url.starts_with("rediss://") {
            // The redis crate builds its TLS configuration with the process-wide rustls
            // provider; make it ring unless the application chose one already (then this
            // returns an error we do not need).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
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
            .set_response_timeout(Some(self.timeout))
            // Reconnection happens in the background; a caller never waits for more than one try.
            .set_number_of_retries(1);
        let conn = bounded(
            "connect",
            self.timeout,
            ConnectionManager::new_with_config(client, config),
        )
        .await?;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                conn,
                scripts: Scripts::new(),
                seq_key: format!("{}seq", self.prefix),
                prefix: self.prefix,
                timeout: self.timeout,
                request_timeout: self.request_timeout,
                breaker: Breaker::new(self.backoff.0, self.backoff.1),
                clock: self.clock,
                affinity_ttl: self.affinity_ttl,
                affinity_cache_ttl: self.affinity_cache_ttl,
                affinity_cache: AffinityMap::new(self.affinity_cache_entries),
            }),
        })
    }
}

/// The shared backend: one Redis (or a managed Redis-compatible service) behind several
/// gateway replicas.
///
/// [`may_contain`](HandoffStore::may_contain) always answers `true` ("ask me"): another
/// replica may have written the handoff. Cloning shares the connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: ConnectionManager,
    scripts: Scripts,
    prefix: String,
    seq_key: String,
    timeout: Duration,
    request_timeout: Duration,
    breaker: Breaker,
    clock: Arc<dyn Clock>,
    affinity_ttl: Duration,
    affinity_cache_ttl: Duration,
    affinity_cache: AffinityMap,
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
            prefix: "context-relay:".to_owned(),
            timeout: DEFAULT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            backoff: (BREAKER_MIN_BACKOFF, BREAKER_MAX_BACKOFF),
            root_certs: None,
            clock: Arc::new(SystemClock),
            affinity_ttl: DEFAULT_AFFINITY_TTL,
            affinity_cache_ttl: DEFAULT_AFFINITY_CACHE_TTL,
            affinity_cache_entries: DEFAULT_AFFINITY_CACHE_ENTRIES,
        }
    }

    /// Takes the cluster-wide right to summarise `key` for `ttl` (`SET NX PX`); `None` when
    /// another replica holds it. Same as [`HandoffStore::begin_generation`].
    pub async fn try_begin_generation(
        &self,
        key: &HandoffKey,
        ttl: Duration,
    ) -> Result<Option<GenerationLease>, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut inv = self.inner.scripts.begin_generation.prepare_invoke();
        inv.key(self.key("g", key))
            .key(&self.inner.seq_key)
            .arg(ttl_ms);
        let mut conn = self.conn();
        let token: Option<u64> = self
            .call("begin_generation", inv.invoke_async(&mut conn))
            .await?;
        Ok(token.map(|t| GenerationLease {
            key: key.clone(),
            token: Some(t),
        }))
    }

    fn conn(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    fn now_ms(&self) -> u64 {
        now_ms(&*self.inner.clock)
    }

    /// `{prefix}{kind}:` then the three parts, length-prefixed so that no two keys collide
    /// whatever characters they contain.
    fn key(&self, kind: &str, key: &HandoffKey) -> String {
        format!(
            "{}{kind}:{}.{}.{}:{}{}{}",
            self.inner.prefix,
            key.tenant.len(),
            key.session.len(),
            key.combo.len(),
            key.tenant,
            key.session,
            key.combo
        )
    }

    fn affinity_key(&self, key: &HandoffKey) -> String {
        format!("{}ac:{}", self.inner.prefix, affinity::key(key))
    }

    /// Whether the circuit breaker currently refuses calls (Redis found unreachable).
    pub fn is_unavailable(&self) -> bool {
        self.inner.breaker.is_open(Instant::now())
    }

    async fn call<T>(
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
                breaker.success();
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

    /// Parses a stored record, reporting (and skipping) one that does not parse or belongs to
    /// another key.
    fn decode(&self, key: &HandoffKey, json: &[u8]) -> Option<HandoffRecord> {
        match serde_json::from_slice::<HandoffRecord>(json) {
            Ok(r) if r.key() == *key => Some(r),
            Ok(r) => {
                report_corrupt("redis", key, &format_args!("a record of {}", r.key()));
                None
            }
            Err(e) => {
                report_corrupt("redis", key, &e);
                None
            }
        }
    }

    async fn fetch(&self, key: &HandoffKey) -> Result<Option<HandoffRecord>, StoreError> {
        let mut conn = self.conn();
        let cmd = redis::cmd("HMGET")
            .arg(self.key("h", key))
            .arg("rec")
            .arg("exp")
            .to_owned();
        let (rec, exp): (Option<Vec<u8>>, Option<u64>) =
            self.call("get", cmd.query_async(&mut conn)).await?;
        let now = self.now_ms();
        match (rec, exp) {
            (Some(rec), Some(exp)) if now < exp => Ok(self.decode(key, &rec)),
            _ => Ok(None),
        }
    }

    /// Every record key under the prefix (SCAN: never blocks the server like KEYS would).
    async fn scan_records(&self) -> Result<Vec<String>, StoreError> {
        let pattern = format!("{}h:*", glob_escape(&self.inner.prefix));
        let mut conn = self.conn();
        let mut cursor = 0u64;
        let mut keys = Vec::new();
        loop {
            let cmd = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .to_owned();
            let (next, batch): (u64, Vec<String>) =
                self.call("scan", cmd.query_async(&mut conn)).await?;
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // SCAN may return a key twice.
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
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

fn redis_err(op: &'static str) -> impl Fn(RedisError) -> StoreError {
    move |e| StoreError::Redis {
        op,
        reason: e.to_string(),
    }
}

/// Escapes glob metacharacters for SCAN MATCH.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl HandoffStore for RedisStore {
    fn upsert(&self, record: HandoffRecord) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let json = serde_json::to_vec(&record)?;
            let mut inv = self.inner.scripts.upsert.prepare_invoke();
            inv.key(self.key("h", &record.key()))
                .key(&self.inner.seq_key)
                .arg(json)
                .arg(to_unix_millis(record.expires_at));
            let mut conn = self.conn();
            let _version: u64 = self.call("upsert", inv.invoke_async(&mut conn)).await?;
            Ok(())
        })
    }

    fn get<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        Box::pin(self.fetch(key))
    }

    fn contains<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut conn = self.conn();
            let cmd = redis::cmd("HGET")
                .arg(self.key("h", key))
                .arg("exp")
                .to_owned();
            let exp: Option<u64> = self.call("contains", cmd.query_async(&mut conn)).await?;
            Ok(exp.is_some_and(|e| self.now_ms() < e))
        })
    }

    fn may_contain(&self, _key: &HandoffKey) -> bool {
        // Another replica may have written it: only Redis knows.
        true
    }

    fn claim<'a>(&'a self, key: &'a HandoffKey, lease: Duration) -> StoreFuture<'a, Option<Claim>> {
        Box::pin(async move {
            let now = self.now_ms();
            let mut inv = self.inner.scripts.claim.prepare_invoke();
            inv.key(self.key("h", key))
                .key(&self.inner.seq_key)
                .arg(now)
                .arg(after_ms(now, lease));
            let mut conn = self.conn();
            let got: Option<(Vec<u8>, u64, u64)> =
                self.call("claim", inv.invoke_async(&mut conn)).await?;
            let Some((json, version, token)) = got else {
                return Ok(None);
            };
            match self.decode(key, &json) {
                Some(record) => Ok(Some(Claim {
                    record,
                    version,
                    token,
                })),
                None => {
                    // Unreadable: give the lease back so the record's fate stays its expiry.
                    let mut inv = self.inner.scripts.release.prepare_invoke();
                    inv.key(self.key("h", key)).arg(version).arg(token);
                    let _: i64 = self.call("release", inv.invoke_async(&mut conn)).await?;
                    Ok(None)
                }
            }
        })
    }

    fn complete<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.complete.prepare_invoke();
            inv.key(self.key("h", &claim.key())).arg(claim.version);
            let mut conn = self.conn();
            let n: i64 = self.call("complete", inv.invoke_async(&mut conn)).await?;
            Ok(n == 1)
        })
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.release.prepare_invoke();
            inv.key(self.key("h", &claim.key()))
                .arg(claim.version)
                .arg(claim.token);
            let mut conn = self.conn();
            let _: i64 = self.call("release", inv.invoke_async(&mut conn)).await?;
            Ok(())
        })
    }

    fn delete<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.delete.prepare_invoke();
            inv.key(self.key("h", key)).arg(self.now_ms());
            let mut conn = self.conn();
            let n: i64 = self.call("delete", inv.invoke_async(&mut conn)).await?;
            Ok(n == 1)
        })
    }

    fn purge_expired(&self) -> StoreFuture<'_, usize> {
        // Redis TTLs already drop records once the server clock passes their expiry; this sweeps
        // what the callers' clock considers expired earlier (clock skew, tests).
        Box::pin(async move {
            let now = self.now_ms();
            let mut conn = self.conn();
            let mut purged = 0usize;
            for k in self.scan_records().await? {
                let mut inv = self.inner.scripts.purge_one.prepare_invoke();
                inv.key(&k).arg(now);
                let n: i64 = self.call("purge", inv.invoke_async(&mut conn)).await?;
                purged += usize::from(n == 1);
            }
            Ok(purged)
        })
    }

    fn list<'a>(
        &'a self,
        tenant: Option<&'a str>,
        session: Option<&'a str>,
    ) -> StoreFuture<'a, Vec<HandoffRecord>> {
        Box::pin(async move {
            let now = self.now_ms();
            let mut conn = self.conn();
            let mut out = Vec::new();
            for k in self.scan_records().await? {
                let cmd = redis::cmd("HMGET").arg(&k).arg("rec").arg("exp").to_owned();
                let (rec, exp): (Option<Vec<u8>>, Option<u64>) =
                    self.call("list", cmd.query_async(&mut conn)).await?;
                let (Some(rec), Some(exp)) = (rec, exp) else {
                    continue;
                };
                if exp <= now {
                    continue;
                }
                match serde_json::from_slice::<HandoffRecord>(&rec) {
                    // The record must live under its own key, or it would show up in another
                    // tenant's view.
                    Ok(r) if self.key("h", &r.key()) == k => {
                        if tenant.is_none_or(|t| *r.tenant == *t)
                            && session.is_none_or(|s| *r.session == *s)
                        {
                            out.push(r);
                        }
                    }
                    Ok(r) => report_corrupt("redis", &k, &format_args!("a record of {}", r.key())),
                    Err(e) => report_corrupt("redis", &k, &e),
                }
            }
            out.sort_by_key(HandoffRecord::key);
            Ok(out)
        })
    }

    fn affinity<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>> {
        Box::pin(async move {
            let mut conn = self.conn();
            let cmd = redis::cmd("HMGET")
                .arg(self.affinity_key(key))
                .arg("p")
                .arg("a")
                .arg("f")
                .to_owned();
            let (p, a, f): (Option<String>, Option<String>, Option<String>) =
                self.call("affinity", cmd.query_async(&mut conn)).await?;
            let (Some(p), Some(a)) = (p, a) else {
                return Ok(None);
            };
            let foreign = match f.as_deref().map(serde_json::from_str::<Foreign>) {
                Some(Ok(f)) => f,
                None => Foreign::default(),
                Some(Err(e)) => {
                    report_corrupt("redis", key, &format_args!("foreign digests: {e}"));
                    Foreign::default()
                }
            };
            let found = affinity::intern(
                Affinity::new(p, a).with_foreign(foreign.foreign, from_unix_millis(foreign.until)),
            );
            self.inner
                .affinity_cache
                .insert(affinity::key(key), found.clone(), self.now_ms());
            Ok(Some(found))
        })
    }

    fn cached_affinity(&self, key: &HandoffKey) -> Option<Option<Affinity>> {
        let (now, ttl) = (self.now_ms(), self.inner.affinity_cache_ttl);
        affinity::with_key(key, |k| self.inner.affinity_cache.get(k, now, ttl)).map(Some)
    }

    fn set_affinity<'a>(&'a self, key: &'a HandoffKey, a: Affinity) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let now = self.now_ms();
            let cache = &self.inner.affinity_cache;
            let k = affinity::key(key);
            if cache.needs_write(&k, &a, now, self.inner.affinity_cache_ttl) == Write::Skip {
                return Ok(());
            }
            let foreign = serde_json::to_string(&Foreign {
                foreign: (*a.foreign).clone(),
                until: to_unix_millis(a.foreign_expires_at),
            })?;
            let ttl = millis(self.inner.affinity_ttl).max(1);
            let mut inv = self.inner.scripts.set_affinity.prepare_invoke();
            inv.key(self.affinity_key(key))
                .arg(&*a.account().provider)
                .arg(&*a.account().account)
                .arg(ttl)
                .arg(ttl / 4 * 3)
                .arg(foreign);
            let mut conn = self.conn();
            let _: i64 = self
                .call("set_affinity", inv.invoke_async(&mut conn))
                .await?;
            cache.insert(k, affinity::intern(a), now);
            Ok(())
        })
    }

    fn backend(&self) -> &'static str {
        "redis"
    }

    fn secret<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> StoreFuture<'a, [u8; 32]> {
        Box::pin(async move {
            let key = format!("{}secret:{name}", self.inner.prefix);
            let mut conn = self.conn();
            let set = redis::cmd("SET")
                .arg(&key)
                .arg(&candidate[..])
                .arg("NX")
                .to_owned();
            let _: Option<String> = self.call("secret", set.query_async(&mut conn)).await?;
            let get = redis::cmd("GET").arg(&key).to_owned();
            let stored: Option<Vec<u8>> = self.call("secret", get.query_async(&mut conn)).await?;
            stored
                .and_then(|v| <[u8; 32]>::try_from(v.as_slice()).ok())
                .ok_or(StoreError::Redis {
                    op: "secret",
                    reason: format!("{key} does not hold a 32-byte secret"),
                })
        })
    }

    fn begin_generation<'a>(
        &'a self,
        key: &'a HandoffKey,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<GenerationLease>> {
        Box::pin(self.try_begin_generation(key, ttl))
    }

    fn end_generation<'a>(&'a self, lease: &'a GenerationLease) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let Some(token) = lease.token else {
                return Ok(());
            };
            let mut inv = self.inner.scripts.end_generation.prepare_invoke();
            inv.key(self.key("g", &lease.key)).arg(token);
            let mut conn = self.conn();
            let _: i64 = self
                .call("end_generation", inv.invoke_async(&mut conn))
                .await?;
            Ok(())
        })
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
mod tests {
    use super::*;

    #[test]
    fn glob_metacharacters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(glob_escape("context-relay:"), "context-relay:");
    }
}
