//! Where a handoff waits between the account that wrote it and the account that consumes it,
//! possibly across a gateway restart and across several gateway replicas.
//!
//! This crate is storage only, under the relay layers: the generation layer upserts handoffs
//! and takes in-flight keys, the injection layer asks [`HandoffStore::may_contain`] on every
//! request (from memory, no I/O), claims a handoff when an account switch happens, and records
//! the serving account as the session's [`Affinity`].
//!
//! The store also keeps the credentials of subscription logins (a login's rotating token
//! pair, written with compare-and-set, and the right to refresh it): see [`login`].
//!
//! Backends, all passing one conformance suite (`tests/conformance.rs`, and
//! `tests/logins.rs` for logins):
//! - [`RedbStore`] (feature `redb`, default): one file, one writer thread that group-commits
//!   everything queued, point reads inline, an in-memory index of live keys;
//! - [`MemoryStore`]: the same semantics without persistence;
//! - `RedisStore` (feature `redis`): for several replicas sharing one Redis, or one Redis
//!   Cluster.
//!
//! Two handoffs per key: an account-switch handoff and a model-switch handoff of one session
//! are kept apart, in the two [`HandoffSlot`]s of the key. The slot is not a parameter of the
//! write: [`HandoffStore::upsert`] stores a record in the slot of its
//! [`kind`](context_relay_core::HandoffRecord::kind) ([`HandoffKind::slot`]), so a record can
//! never sit in the wrong slot and every listing says which slot a record is in by its `kind`.
//! Reads and removals name the slot (`get_in`, `contains_in`, `may_contain_in`, `claim_in`,
//! `delete_in`); the methods without a slot keep meaning the account slot, and a [`Claim`]
//! remembers its slot, so `complete` and `release` touch only that one.
//! [`HandoffStore::freshest`] is the newer of the two. Each backend maps the slots to distinct
//! storage keys (memory and redb: one index and one table per slot; redis: another key
//! prefix), so neither write nor consumption of one can reach the other. Purge, TTL and
//! listing cover both.
//!
//! [`HandoffKind::slot`]: context_relay_core::HandoffKind::slot
//!
//! Decisions the design leaves open, taken here:
//! - Leases (of [`HandoffStore::claim`]) are bookkeeping, not data: redb and memory keep them in
//!   memory only, so a restart frees every lease (the claimant died with the process).
//! - A write is queued when the method is called, not when its future is first polled; dropping
//!   the future does not cancel it.
//! - An upsert replaces the record and ends any lease on the old one.
//! - `complete` deletes when the record is still the claimed version, even if the lease has run
//!   out meanwhile (the handoff was consumed either way).
//! - Affinity entries expire after `affinity_ttl` (default 7 days) without a change or refresh,
//!   so that the table does not grow forever; `set_affinity` rewrites an unchanged entry once a
//!   quarter of that time has passed. Affinities are kept per `(tenant, session, combo)`.
//! - With several replicas (redis), a replica decides whether a request is a switch on the value
//!   Redis holds when the request arrives: its cached view is trusted for at most
//!   `affinity_cache_ttl`, zero by default. The bound on a stale decision is therefore one
//!   concurrent request: a write it can miss is made by another request of the same session, on
//!   another replica, that completes after this read. The provider's rejection of the state
//!   such a decision lets through is then repaired by the injection layer.
//! - The in-memory affinity table is bounded ([`DEFAULT_AFFINITY_CACHE_ENTRIES`] by default):
//!   when full, the least recently used eighth is evicted. redb then reads an evicted entry
//!   back from disk; the memory backend forgets it; Redis reads it from Redis.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::time::{Duration, SystemTime};
//! use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
//! use context_relay_store::{HandoffStore, MemoryStore};
//!
//! let store = MemoryStore::new();
//! let now = SystemTime::now();
//! let record = HandoffRecord {
//!     version: 1,
//!     kind: Default::default(),
//!     tenant: "acme".into(),
//!     session: "s1".into(),
//!     combo: "codex-relay".into(),
//!     from_provider: "codex".into(),
//!     from_account: "alice".into(),
//!     handoff: Handoff { summary: "Refactoring the parser".into(), ..Handoff::default() },
//!     message_count: 12,
//!     conversation: None,
//!     compaction: false,
//!     model: "gpt-5-mini".into(),
//!     threshold: 0.85,
//!     generated_at: now,
//!     expires_at: now + Duration::from_secs(3600),
//! };
//! let key = record.key();
//! store.upsert(record).await?;
//! assert!(store.may_contain(&key));
//! let claim = store.claim(&key, Duration::from_secs(30)).await?.expect("live and unleased");
//! assert!(store.claim(&key, Duration::from_secs(30)).await?.is_none(), "leased");
//! assert!(store.complete(&claim).await?);
//! assert!(!store.contains(&key).await?);
//! # Ok::<(), context_relay_store::StoreError>(())
//! # }).unwrap();
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use context_relay_core::HandoffSlot;
use context_relay_core::portable::ForeignSet;
use context_relay_core::{HandoffKey, HandoffRecord, ResolvedAccount};

mod affinity;
pub mod breaker;
pub mod clock;
pub mod cooldown;
mod error;
mod generation_lease;
mod index;
pub mod inflight;
pub mod login;
mod memory;
mod purger;
#[cfg(feature = "redb")]
mod redb_store;
#[cfg(feature = "redis")]
mod redis_store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use cooldown::CoolDown;
pub use error::StoreError;
pub use generation_lease::GenerationLease;
pub use inflight::{InFlight, InFlightGuard};
pub use login::{LoginLock, StoredLogin};
pub use memory::MemoryStore;
pub use purger::{DEFAULT_PURGE_INTERVAL, PurgerHandle, spawn_purger};
#[cfg(feature = "redb")]
pub use redb_store::{
    DEFAULT_CACHE_BYTES, DEFAULT_MAX_BATCH, DEFAULT_REOPEN_BACKOFF, MAX_REOPEN_BACKOFF, RedbStore,
    RedbStoreBuilder,
};
#[cfg(feature = "redis")]
pub use redis_store::{
    DEFAULT_AFFINITY_CACHE_TTL, DEFAULT_REQUEST_TIMEOUT as DEFAULT_REDIS_REQUEST_TIMEOUT,
    DEFAULT_TIMEOUT as DEFAULT_REDIS_TIMEOUT, RedisStore, RedisStoreBuilder,
};

/// Most affinities kept in memory by default (see the crate docs).
pub const DEFAULT_AFFINITY_CACHE_ENTRIES: usize = 100_000;

/// How long an unchanged affinity lives by default.
pub const DEFAULT_AFFINITY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The boxed future every [`HandoffStore`] operation returns (the trait is object-safe).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A store of handoffs keyed by `(tenant, session, combo)`: one live handoff per key and
/// [`HandoffSlot`], consumed at most once (claimed under a lease, then completed or released).
///
/// The methods that take no slot are about the account slot. The `…_in` methods and
/// [`freshest`](Self::freshest) have defaults for stores that keep only the account slot (they
/// answer for it and hold nothing in the model slot); every backend of this crate overrides
/// them.
///
/// Object-safe: the layers hold an `Arc<dyn HandoffStore>`. Expired records are absent from
/// every read. Every backend passes the same conformance suite.
///
/// The relay awaits some calls while a request waits for them (the session's affinity, a
/// handoff's read, claim and release, the offer of one built at a switch): a store bounds its
/// own latency, as the backends of this crate do, and fails a call it cannot finish in time.
/// The relay gives up on such a call after a few seconds all the same (and goes on as after a
/// store error), then leaves the store alone for a back-off ([`breaker::Breaker`]), so that a
/// store that never answers delays one request now and then, not every request.
pub trait HandoffStore: Send + Sync + 'static {
    /// Inserts the record, or replaces the record of its key in its slot (the slot of its
    /// `kind`; the other slot is untouched), ending any lease on the replaced one.
    fn upsert(&self, record: HandoffRecord) -> StoreFuture<'_, ()>;

    /// [`upsert`](Self::upsert) unless the live record of its key in its slot is leased (a
    /// request carries it now), atomically: whether `record` was stored. The default is a
    /// plain upsert: a store that keeps leases must override it, and a wrapper forward it.
    fn offer(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        let stored = self.upsert(record);
        Box::pin(async move { stored.await.map(|()| true) })
    }

    /// [`offer`](Self::offer) by a request that carries the record at once (a handoff built at
    /// a switch, claimed right after): on the request's path, so a store with a shorter limit
    /// there applies it, and waits for no replica (the record is consumed before a failover
    /// could matter). The default is [`offer`](Self::offer); a wrapper forwards it.
    fn offer_at_switch(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        self.offer(record)
    }

    /// The live record of `key`.
    fn get<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>>;

    /// Whether `key` has a live record (leased or not). redb and memory answer from memory.
    fn contains<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool>;

    /// Synchronous, from memory, no I/O: `false` means "certainly no live handoff here" (the hot
    /// path); redb and memory answer exactly, redis answers `true` ("ask me").
    fn may_contain(&self, key: &HandoffKey) -> bool;

    /// Takes the live, unleased record of `key` for `lease`; a second claim during the lease gets
    /// `None`.
    fn claim<'a>(&'a self, key: &'a HandoffKey, lease: Duration) -> StoreFuture<'a, Option<Claim>>;

    /// Deletes the claimed record if it is still the claimed version (a newer upsert survives);
    /// `true` when it deleted.
    fn complete<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, bool>;

    /// Ends the lease of `claim` and keeps the record (the handoff was not used).
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()>;

    /// Deletes the record of `key`; `true` when there was a live one.
    fn delete<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool>;

    /// Removes expired records (and stale affinities); returns how many records it removed.
    fn purge_expired(&self) -> StoreFuture<'_, usize>;

    /// Live records, optionally only of one tenant and/or one session (the admin view). A
    /// session's records include those of its other conversations (keys made by
    /// [`HandoffKey::conversation`]).
    fn list<'a>(
        &'a self,
        tenant: Option<&'a str>,
        session: Option<&'a str>,
    ) -> StoreFuture<'a, Vec<HandoffRecord>>;

    /// The last account that served the session of `key` through its combo, with the
    /// digests of the account-bound state it must treat as foreign.
    fn affinity<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>>;

    /// Synchronous cache look-up: `Some(x)` when the in-memory cache knows the answer (`x` may be
    /// `None` = known absent), `None` when only [`affinity`](Self::affinity) can tell (the entry
    /// was evicted, or, with a shared backend, another replica may have written it since).
    fn cached_affinity(&self, key: &HandoffKey) -> Option<Option<Affinity>>;

    /// Records `affinity` for the session of `key`; writes only when it changed (or is due for
    /// a refresh).
    fn set_affinity<'a>(&'a self, key: &'a HandoffKey, affinity: Affinity) -> StoreFuture<'a, ()>;

    /// [`set_affinity`](Self::set_affinity) for a caller that does not wait for the write:
    /// what this process reads ([`cached_affinity`](Self::cached_affinity)) knows the new
    /// affinity when this returns (Redis: only with an affinity cache TTL, zero by default;
    /// otherwise, and for other replicas, once the write is done), so the session's next
    /// request sees it even when it comes before the write; the returned future finishes the
    /// write.
    ///
    /// The default, for a backend without a view of its own, does everything in the future:
    /// until it has run, a read may still give the previous affinity.
    fn set_affinity_now(
        self: Arc<Self>,
        key: HandoffKey,
        affinity: Affinity,
    ) -> StoreFuture<'static, ()> {
        Box::pin(async move { self.set_affinity(&key, affinity).await })
    }

    /// Backend name for logs and metrics (`"redb"`, `"memory"`, `"redis"`).
    fn backend(&self) -> &'static str;

    /// Whether the store can write now, from memory (no I/O): an error while it is known to be
    /// broken (a redb file after an I/O error, until it is reopened). `/readyz` reads it.
    fn health(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The live record of `key` in `slot`.
    fn get_in<'a>(
        &'a self,
        key: &'a HandoffKey,
        slot: HandoffSlot,
    ) -> StoreFuture<'a, Option<HandoffRecord>> {
        match slot {
            HandoffSlot::Account => self.get(key),
            HandoffSlot::Model => Box::pin(std::future::ready(Ok(None))),
        }
    }

    /// Whether `key` has a live record in `slot` (leased or not).
    fn contains_in<'a>(&'a self, key: &'a HandoffKey, slot: HandoffSlot) -> StoreFuture<'a, bool> {
        match slot {
            HandoffSlot::Account => self.contains(key),
            HandoffSlot::Model => Box::pin(std::future::ready(Ok(false))),
        }
    }

    /// [`may_contain`](Self::may_contain) for `slot`: synchronous, from memory, `false` means
    /// "certainly no live handoff of `key` in `slot`".
    fn may_contain_in(&self, key: &HandoffKey, slot: HandoffSlot) -> bool {
        match slot {
            HandoffSlot::Account => self.may_contain(key),
            HandoffSlot::Model => false,
        }
    }

    /// [`claim`](Self::claim) in `slot`: the claim's `complete` and `release` touch that slot
    /// only.
    fn claim_in<'a>(
        &'a self,
        key: &'a HandoffKey,
        slot: HandoffSlot,
        lease: Duration,
    ) -> StoreFuture<'a, Option<Claim>> {
        match slot {
            HandoffSlot::Account => self.claim(key, lease),
            HandoffSlot::Model => Box::pin(std::future::ready(Ok(None))),
        }
    }

    /// Deletes the record of `key` in `slot`; `true` when there was a live one.
    fn delete_in<'a>(&'a self, key: &'a HandoffKey, slot: HandoffSlot) -> StoreFuture<'a, bool> {
        match slot {
            HandoffSlot::Account => self.delete(key),
            HandoffSlot::Model => Box::pin(std::future::ready(Ok(false))),
        }
    }

    /// The newer (by `generated_at`) of the live records of `key` in the two slots; on a tie,
    /// the model-switch one. Reads without claiming: what a model switch injects.
    fn freshest<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        Box::pin(async move {
            let account = self.get_in(key, HandoffSlot::Account).await?;
            let model = self.get_in(key, HandoffSlot::Model).await?;
            Ok(newer(account, model))
        })
    }

    /// Takes the store-wide right to generate the summary of `key` for at most `ttl`.
    ///
    /// Complements the process-local [`InFlight`] registry: a distributed backend (redis) grants
    /// it to one replica at a time; single-process backends always grant it.
    fn begin_generation<'a>(
        &'a self,
        key: &'a HandoffKey,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<GenerationLease>> {
        let _ = ttl;
        Box::pin(std::future::ready(Ok(Some(GenerationLease::local(key)))))
    }

    /// Gives back a lease taken by [`begin_generation`](Self::begin_generation) (a no-op when it
    /// already ran out or was local).
    fn end_generation<'a>(&'a self, lease: &'a GenerationLease) -> StoreFuture<'a, ()> {
        let _ = lease;
        Box::pin(std::future::ready(Ok(())))
    }

    /// The deployment secret called `name`: the one stored earlier, or `candidate`, stored now
    /// when there is none (the first writer wins, so replicas sharing a store agree). Durable
    /// backends keep it across restarts; the default (memory) keeps nothing and returns
    /// `candidate`.
    fn secret<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> StoreFuture<'a, [u8; 32]> {
        let _ = name;
        Box::pin(std::future::ready(Ok(candidate)))
    }

    /// The stored credentials of subscription login `name` (see [`login`]),
    /// `None` when none are stored. The default keeps nothing.
    fn login<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<StoredLogin>> {
        let _ = name;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Stores `data` as the credentials of login `name` if the stored version is still
    /// `expected` (0: none stored), and returns the new version; `None` when another writer
    /// got there first (the stored version is another). Durable backends have committed the
    /// write when it returns. The default keeps nothing and always succeeds.
    fn put_login<'a>(
        &'a self,
        name: &'a str,
        expected: u64,
        data: &'a [u8],
    ) -> StoreFuture<'a, Option<u64>> {
        let _ = (name, data);
        Box::pin(std::future::ready(Ok(Some(expected + 1))))
    }

    /// Takes the store-wide right to refresh login `name` for at most `ttl`; `None` while
    /// another holder has it. A distributed backend (redis) grants it to one replica at a time;
    /// single-process backends always grant it (the process serialises its own refreshes).
    fn lock_login<'a>(
        &'a self,
        name: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<LoginLock>> {
        let _ = ttl;
        Box::pin(std::future::ready(Ok(Some(LoginLock::local(name)))))
    }

    /// Gives back a lock taken by [`lock_login`](Self::lock_login) (a no-op when it already
    /// ran out, was taken over, or was local).
    fn unlock_login<'a>(&'a self, lock: &'a LoginLock) -> StoreFuture<'a, ()> {
        let _ = lock;
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The newer of two records by `generated_at`, `b` on a tie.
pub(crate) fn newer(a: Option<HandoffRecord>, b: Option<HandoffRecord>) -> Option<HandoffRecord> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if a.generated_at > b.generated_at {
            a
        } else {
            b
        }),
        (a, b) => a.or(b),
    }
}

/// A claimed handoff: the record plus the slot, version and lease it was claimed at.
#[derive(Clone, PartialEq)]
pub struct Claim {
    /// The claimed record.
    pub record: HandoffRecord,
    pub(crate) slot: HandoffSlot,
    pub(crate) version: u64,
    pub(crate) token: u64,
}

impl Claim {
    /// The key of the claimed record.
    pub fn key(&self) -> HandoffKey {
        self.record.key()
    }

    /// The slot the record was claimed in.
    pub fn slot(&self) -> HandoffSlot {
        self.slot
    }
}

impl fmt::Debug for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claim")
            .field("key", &self.record.key())
            .field("slot", &self.slot)
            .field("version", &self.version)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// The account that last served a session through one combo, and what that account must not
/// be sent.
///
/// Kept per `(tenant, session, combo)`: two combos of one session may be served by different
/// accounts. `foreign` holds the digests of the account-bound state the session carried when
/// `account` took it over (see [`ForeignSet`]); it is kept until `foreign_expires_at` (the
/// handoff TTL after the switch), and reads after that give an empty set.
///
/// The serving account is a [`ResolvedAccount`], compared with `==` (its provider is lower
/// case whichever way it was spelled):
///
/// ```
/// use context_relay_core::ResolvedAccount;
/// use context_relay_store::Affinity;
///
/// let alice = ResolvedAccount::new("codex", "alice");
/// let a = Affinity::of(alice.clone());
/// assert!(a.serves(&alice));
/// assert_eq!(a, Affinity::new("Codex", "alice"));
/// assert!(a.is("CODEX", "alice") && !a.is("codex", "bob"));
/// assert_eq!(a.account(), &alice);
/// ```
///
/// It also records the model that served (`provider/model`), so that a request routed to
/// another model is recognised as a model switch; an affinity written before models were
/// recorded has none:
///
/// ```
/// use context_relay_store::Affinity;
///
/// let a = Affinity::new("codex", "alice").with_model("codex/gpt-5.5");
/// assert_eq!(a.model(), Some("codex/gpt-5.5"));
/// assert_ne!(a, Affinity::new("codex", "alice"), "the model is part of the affinity");
/// assert_eq!(Affinity::new("codex", "alice").model(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Affinity {
    /// The serving account.
    account: ResolvedAccount,
    /// The model that served (`provider/model`), when known.
    model: Option<Arc<str>>,
    /// Digests of the state minted by earlier accounts.
    pub foreign: Arc<ForeignSet>,
    /// When `foreign` is forgotten; until then the session is in its switch window (see
    /// [`Affinity::in_switch_window`]).
    pub foreign_expires_at: SystemTime,
    /// The opening digest of the session's primary conversation (see
    /// `context_relay_core::session::opening`): the conversation keyed by the session itself.
    conversation: Option<u64>,
    /// The account that served before the last switch (kept with `foreign`).
    previous: Option<ResolvedAccount>,
}

impl Affinity {
    /// An affinity to `account`, with nothing foreign.
    pub fn of(account: ResolvedAccount) -> Self {
        Self {
            account,
            model: None,
            foreign: Arc::default(),
            foreign_expires_at: SystemTime::UNIX_EPOCH,
            conversation: None,
            previous: None,
        }
    }

    /// An affinity to `account` of `provider`, with nothing foreign: `Affinity::of` of
    /// [`ResolvedAccount::new`].
    pub fn new(provider: impl Into<Arc<str>>, account: impl Into<Arc<str>>) -> Self {
        Self::of(ResolvedAccount::new(provider, account))
    }

    /// The same affinity with `foreign` kept until `expires_at`.
    pub fn with_foreign(mut self, foreign: ForeignSet, expires_at: SystemTime) -> Self {
        self.foreign = Arc::new(foreign);
        self.foreign_expires_at = expires_at;
        self
    }

    /// The same affinity with `model` (`provider/model`) as the serving model.
    pub fn with_model(mut self, model: impl Into<Arc<str>>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The model that served (`provider/model`); `None` when it was not recorded (an affinity
    /// written before models were).
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The serving account.
    pub fn account(&self) -> &ResolvedAccount {
        &self.account
    }

    /// Whether `account` is the serving account.
    pub fn serves(&self, account: &ResolvedAccount) -> bool {
        self.account == *account
    }

    /// Whether `account` of `provider` is the serving account (the provider compared
    /// case-insensitively, as [`ResolvedAccount::is`]).
    pub fn is(&self, provider: &str, account: &str) -> bool {
        self.account.is(provider, account)
    }

    /// The foreign digests still kept at `now` (empty once they expired).
    pub fn foreign_at(&self, now: SystemTime) -> Option<&ForeignSet> {
        (now < self.foreign_expires_at && !self.foreign.is_empty()).then_some(&*self.foreign)
    }

    /// Whether the session switched accounts recently (until `foreign_expires_at`, the
    /// handoff TTL after the switch), whether or not its requests carried account-bound
    /// state: other conversations of the session may still have to cross.
    pub fn in_switch_window(&self, now: SystemTime) -> bool {
        now < self.foreign_expires_at
    }

    /// The same affinity with `digest` as its primary conversation's opening.
    pub fn with_conversation(mut self, digest: u64) -> Self {
        self.conversation = Some(digest);
        self
    }

    /// The opening digest of the session's primary conversation, when recorded.
    pub fn conversation(&self) -> Option<u64> {
        self.conversation
    }

    /// The same affinity remembering `previous` as the account that served before the switch.
    pub fn with_previous(mut self, previous: ResolvedAccount) -> Self {
        self.previous = Some(previous);
        self
    }

    /// The account that served before the last switch, while the switch window lasts.
    pub fn previous_at(&self, now: SystemTime) -> Option<&ResolvedAccount> {
        self.previous
            .as_ref()
            .filter(|_| self.in_switch_window(now))
    }
}

/// Metric counting stored records skipped because they could not be read.
pub const CORRUPT_RECORDS_METRIC: &str = "context_relay_store_corrupt_records_total";

/// Reports a stored record that could not be read: logged, counted, skipped.
pub(crate) fn report_corrupt(
    backend: &'static str,
    key: &dyn fmt::Display,
    why: &dyn fmt::Display,
) {
    tracing::warn!(backend, key = key.to_string().as_str(), error = %why, "skipping a stored handoff that cannot be read");
    metrics::counter!(CORRUPT_RECORDS_METRIC, "backend" => backend).increment(1);
}

#[cfg(test)]
mod tests;
