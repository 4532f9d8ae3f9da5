//! The memory backend: the semantics of every store, nothing persisted.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use context_relay_core::time::to_unix_millis;
use context_relay_core::{HandoffKey, HandoffRecord, HandoffSlot};
use dashmap::mapref::entry::Entry;

use crate::DEFAULT_AFFINITY_CACHE_ENTRIES;
use crate::affinity::{self, AffinityMap, Write};
use crate::clock::{Clock, SystemClock, now_ms};
use crate::index::{FastMap, Meta};
use crate::login::LoginTable;
use crate::{Affinity, Claim, DEFAULT_AFFINITY_TTL, HandoffStore, StoreFuture, StoredLogin};

/// An in-process store for tests and ephemeral gateways; every operation completes without
/// waiting.
///
/// Cloning shares the store.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// One map per slot ([`HandoffSlot::index`]).
    records: [FastMap<HandoffKey, Held>; 2],
    affinity: AffinityMap,
    affinity_ttl: Duration,
    clock: Arc<dyn Clock>,
    next: AtomicU64,
    logins: LoginTable,
}

struct Held {
    meta: Meta,
    record: HandoffRecord,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// Records `a` for the session of `key` (memory only: nothing else to write).
    fn store_affinity(&self, key: &HandoffKey, a: Affinity) {
        let now = self.now_ms();
        let map = &self.inner.affinity;
        let k = affinity::key(key);
        if map.needs_write(&k, &a, now, self.inner.affinity_ttl / 4) == Write::Store {
            map.insert(k, affinity::intern(a), now);
        }
    }

    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store reading the time from `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: Arc::new(Inner {
                records: Default::default(),
                affinity: AffinityMap::new(DEFAULT_AFFINITY_CACHE_ENTRIES),
                affinity_ttl: DEFAULT_AFFINITY_TTL,
                clock,
                next: AtomicU64::new(1),
                logins: LoginTable::default(),
            }),
        }
    }

    /// How many records are held (both slots), expired ones included until purged.
    pub fn len(&self) -> usize {
        self.inner.records.iter().map(FastMap::len).sum()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.inner.records.iter().all(FastMap::is_empty)
    }

    fn records(&self, slot: HandoffSlot) -> &FastMap<HandoffKey, Held> {
        &self.inner.records[slot.index()]
    }

    fn now_ms(&self) -> u64 {
        now_ms(&*self.inner.clock)
    }

    fn next(&self) -> u64 {
        self.inner.next.fetch_add(1, Ordering::Relaxed)
    }

    fn upsert_now(&self, record: HandoffRecord) {
        let meta = Meta::new(self.next(), to_unix_millis(record.expires_at));
        self.records(record.slot())
            .insert(record.key(), Held { meta, record });
    }

    fn offer_now(&self, record: HandoffRecord) -> bool {
        let now = self.now_ms();
        let meta = Meta::new(self.next(), to_unix_millis(record.expires_at));
        match self.records(record.slot()).entry(record.key()) {
            Entry::Occupied(e) if e.get().meta.is_carried(now) => false,
            Entry::Occupied(mut e) => {
                e.insert(Held { meta, record });
                true
            }
            Entry::Vacant(e) => {
                e.insert(Held { meta, record });
                true
            }
        }
    }

    fn get_now(&self, key: &HandoffKey, slot: HandoffSlot) -> Option<HandoffRecord> {
        let now = self.now_ms();
        self.records(slot)
            .get(key)
            .filter(|s| s.meta.is_live(now))
            .map(|s| s.record.clone())
    }

    fn claim_now(&self, key: &HandoffKey, slot: HandoffSlot, lease: Duration) -> Option<Claim> {
        let now = self.now_ms();
        let token = self.next();
        let mut held = self.records(slot).get_mut(key)?;
        if !held.meta.try_lease(now, lease, token) {
            return None;
        }
        Some(Claim {
            record: held.record.clone(),
            slot,
            version: held.meta.version,
            token,
        })
    }

    fn complete_now(&self, claim: &Claim) -> bool {
        match self.records(claim.slot).entry(claim.key()) {
            Entry::Occupied(e) if e.get().meta.version == claim.version => {
                e.remove();
                true
            }
            _ => false,
        }
    }

    fn delete_now(&self, key: &HandoffKey, slot: HandoffSlot) -> bool {
        let now = self.now_ms();
        self.records(slot)
            .remove(key)
            .is_some_and(|(_, s)| s.meta.is_live(now))
    }

    fn purge_now(&self) -> usize {
        let now = self.now_ms();
        let before = self.len();
        for records in &self.inner.records {
            records.retain(|_, s| s.meta.is_live(now));
        }
        self.inner.affinity.purge(now, self.inner.affinity_ttl);
        before.saturating_sub(self.len())
    }

    fn list_now(&self, tenant: Option<&str>, session: Option<&str>) -> Vec<HandoffRecord> {
        let now = self.now_ms();
        let mut out: Vec<HandoffRecord> = self
            .inner
            .records
            .iter()
            .flat_map(|records| records.iter())
            .filter(|s| s.meta.is_live(now))
            .filter(|s| tenant.is_none_or(|t| *s.record.tenant == *t))
            .filter(|s| session.is_none_or(|x| HandoffKey::session_of(&s.record.session) == x))
            .map(|s| s.record.clone())
            .collect();
        out.sort_by_key(|r| (r.key(), r.slot()));
        out
    }
}

fn ready<T: Send + 'static>(value: T) -> StoreFuture<'static, T> {
    Box::pin(std::future::ready(Ok(value)))
}

impl HandoffStore for MemoryStore {
    fn upsert(&self, record: HandoffRecord) -> StoreFuture<'_, ()> {
        self.upsert_now(record);
        ready(())
    }

    fn offer(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        ready(self.offer_now(record))
    }

    fn get<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        self.get_in(key, HandoffSlot::Account)
    }

    fn contains<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        ready(self.may_contain(key))
    }

    fn may_contain(&self, key: &HandoffKey) -> bool {
        self.may_contain_in(key, HandoffSlot::Account)
    }

    fn claim<'a>(&'a self, key: &'a HandoffKey, lease: Duration) -> StoreFuture<'a, Option<Claim>> {
        self.claim_in(key, HandoffSlot::Account, lease)
    }

    fn complete<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, bool> {
        ready(self.complete_now(claim))
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        if let Some(mut held) = self.records(claim.slot).get_mut(&claim.key()) {
            held.meta.release(claim.version, claim.token);
        }
        ready(())
    }

    fn delete<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        self.delete_in(key, HandoffSlot::Account)
    }

    fn purge_expired(&self) -> StoreFuture<'_, usize> {
        ready(self.purge_now())
    }

    fn list<'a>(
        &'a self,
        tenant: Option<&'a str>,
        session: Option<&'a str>,
    ) -> StoreFuture<'a, Vec<HandoffRecord>> {
        ready(self.list_now(tenant, session))
    }

    fn affinity<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>> {
        ready(self.cached_affinity(key).flatten())
    }

    fn cached_affinity(&self, key: &HandoffKey) -> Option<Option<Affinity>> {
        // The table is the store: what it does not hold does not exist.
        let (now, ttl) = (self.now_ms(), self.inner.affinity_ttl);
        Some(affinity::with_key(key, |k| {
            self.inner.affinity.get(k, now, ttl)
        }))
    }

    fn set_affinity<'a>(&'a self, key: &'a HandoffKey, a: Affinity) -> StoreFuture<'a, ()> {
        self.store_affinity(key, a);
        ready(())
    }

    fn set_affinity_now(self: Arc<Self>, key: HandoffKey, a: Affinity) -> StoreFuture<'static, ()> {
        self.store_affinity(&key, a);
        ready(())
    }

    fn backend(&self) -> &'static str {
        "memory"
    }

    fn login<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<StoredLogin>> {
        ready(self.inner.logins.get(name))
    }

    fn put_login<'a>(
        &'a self,
        name: &'a str,
        expected: u64,
        data: &'a [u8],
    ) -> StoreFuture<'a, Option<u64>> {
        ready(self.inner.logins.put(name, expected, data))
    }

    fn get_in<'a>(
        &'a self,
        key: &'a HandoffKey,
        slot: HandoffSlot,
    ) -> StoreFuture<'a, Option<HandoffRecord>> {
        ready(self.get_now(key, slot))
    }

    fn contains_in<'a>(&'a self, key: &'a HandoffKey, slot: HandoffSlot) -> StoreFuture<'a, bool> {
        ready(self.may_contain_in(key, slot))
    }

    fn may_contain_in(&self, key: &HandoffKey, slot: HandoffSlot) -> bool {
        // The clock is read only for a key that is there: an absent key costs one lookup.
        self.records(slot)
            .get(key)
            .is_some_and(|s| s.meta.is_live(self.now_ms()))
    }

    fn claim_in<'a>(
        &'a self,
        key: &'a HandoffKey,
        slot: HandoffSlot,
        lease: Duration,
    ) -> StoreFuture<'a, Option<Claim>> {
        ready(self.claim_now(key, slot, lease))
    }

    fn delete_in<'a>(&'a self, key: &'a HandoffKey, slot: HandoffSlot) -> StoreFuture<'a, bool> {
        ready(self.delete_now(key, slot))
    }

    fn freshest<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        ready(crate::newer(
            self.get_now(key, HandoffSlot::Account),
            self.get_now(key, HandoffSlot::Model),
        ))
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("records", &self.len())
            .field("affinities", &self.inner.affinity.len())
            .field("clock", &self.inner.clock)
            .finish()
    }
}
