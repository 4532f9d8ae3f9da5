//! [`HandoffStore`] for [`RedisStore`]: every operation is one command or one script call.

use std::sync::Arc;
use std::time::Duration;

use context_relay_core::time::to_unix_millis;
use context_relay_core::{HandoffKey, HandoffRecord, HandoffSlot};

use super::RedisStore;
use super::scripts::{glob_escape, millis, record_tag};
use crate::affinity;
use crate::clock::after_ms;
use crate::{
    Affinity, Claim, GenerationLease, HandoffStore, LoginLock, StoreError, StoreFuture,
    StoredLogin, report_corrupt,
};

impl RedisStore {
    /// Takes the cluster-wide right to summarise `key` for `ttl` (`SET NX PX`); `None` when
    /// another replica holds it. Same as [`HandoffStore::begin_generation`].
    pub async fn try_begin_generation(
        &self,
        key: &HandoffKey,
        ttl: Duration,
    ) -> Result<Option<GenerationLease>, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let token = self.inner.ids.fresh();
        let cmd = redis::cmd("SET")
            .arg(self.key("g", key))
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .to_owned();
        let mut conn = self.conn();
        let taken: Option<String> = self
            .call("begin_generation", cmd.query_async(&mut conn))
            .await?;
        Ok(taken.map(|_| GenerationLease {
            key: key.clone(),
            token: Some(token),
        }))
    }

    /// Parses a stored record, reporting (and skipping) one that does not parse or belongs to
    /// another key or slot.
    fn decode(&self, key: &HandoffKey, slot: HandoffSlot, json: &[u8]) -> Option<HandoffRecord> {
        match serde_json::from_slice::<HandoffRecord>(json) {
            Ok(r) if r.key() == *key && r.slot() == slot => Some(r),
            Ok(r) if r.key() == *key => {
                let kind = r.kind.as_str();
                report_corrupt(
                    "redis",
                    key,
                    &format_args!("a {kind} record in the {slot:?} slot"),
                );
                None
            }
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

    async fn fetch(
        &self,
        key: &HandoffKey,
        slot: HandoffSlot,
    ) -> Result<Option<HandoffRecord>, StoreError> {
        let mut conn = self.conn();
        let cmd = redis::cmd("HMGET")
            .arg(self.record_key(key, slot))
            .arg("rec")
            .arg("exp")
            .to_owned();
        let (rec, exp): (Option<Vec<u8>>, Option<u64>) =
            self.call("get", cmd.query_async(&mut conn)).await?;
        let now = self.now_ms();
        match (rec, exp) {
            (Some(rec), Some(exp)) if now < exp => Ok(self.decode(key, slot, &rec)),
            _ => Ok(None),
        }
    }

    /// Every record key of `slot` under the prefix (SCAN: never blocks the server like KEYS
    /// would).
    async fn scan_records(&self, slot: HandoffSlot) -> Result<Vec<String>, StoreError> {
        let pattern = format!("{}{}:*", glob_escape(&self.inner.prefix), record_tag(slot));
        let mut keys = Vec::new();
        for target in self.scan_targets().await? {
            let mut cursor = 0u64;
            loop {
                let cmd = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .to_owned();
                let (next, batch) = self.scan_step(target, cmd).await?;
                keys.extend(batch);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        // SCAN may return a key twice.
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }
}

impl RedisStore {
    /// Writes `record` (see `UPSERT`: an offer at the current time when `offer`); whether it
    /// did.
    async fn put(&self, record: HandoffRecord, put: Put) -> Result<bool, StoreError> {
        let json = serde_json::to_vec(&record)?;
        let mut inv = self.inner.scripts.upsert.prepare_invoke();
        inv.key(self.record_key(&record.key(), record.slot()))
            .arg(json)
            .arg(to_unix_millis(record.expires_at))
            .arg(self.inner.ids.fresh())
            .arg(if put == Put::Upsert {
                "upsert"
            } else {
                "offer"
            })
            .arg(self.now_ms());
        let at_switch = put == Put::OfferAtSwitch;
        let waiting = self.inner.waiting.as_ref().filter(|_| !at_switch);
        // One waited write at a time on its connection (see `Inner::waiting`); the queue is
        // here, off Redis and off the time limits.
        let _turn = match waiting {
            Some((_, turn)) => Some(turn.lock().await),
            None => None,
        };
        let mut conn = waiting.map_or_else(|| self.conn(), |(conn, _)| conn.clone());
        let op = if at_switch {
            "offer_at_switch"
        } else {
            "upsert"
        };
        let stored: i64 = self.call(op, inv.invoke_async(&mut conn)).await?;
        if stored == 1
            && waiting.is_some()
            && let Some(wait) = self.inner.wait
        {
            self.wait_for_replicas(wait, &mut conn).await?;
        }
        Ok(stored == 1)
    }
}

/// How [`RedisStore::put`] stores a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Put {
    Upsert,
    Offer,
    /// An offer on a request's path: the short timeout, no replica wait.
    OfferAtSwitch,
}

impl HandoffStore for RedisStore {
    fn upsert(&self, record: HandoffRecord) -> StoreFuture<'_, ()> {
        Box::pin(async move { self.put(record, Put::Upsert).await.map(|_| ()) })
    }

    fn offer(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        Box::pin(async move { self.put(record, Put::Offer).await })
    }

    fn offer_at_switch(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        Box::pin(async move { self.put(record, Put::OfferAtSwitch).await })
    }

    fn get<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        self.get_in(key, HandoffSlot::Account)
    }

    fn contains<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        self.contains_in(key, HandoffSlot::Account)
    }

    fn may_contain(&self, key: &HandoffKey) -> bool {
        self.may_contain_in(key, HandoffSlot::Account)
    }

    fn claim<'a>(&'a self, key: &'a HandoffKey, lease: Duration) -> StoreFuture<'a, Option<Claim>> {
        self.claim_in(key, HandoffSlot::Account, lease)
    }

    fn get_in<'a>(
        &'a self,
        key: &'a HandoffKey,
        slot: HandoffSlot,
    ) -> StoreFuture<'a, Option<HandoffRecord>> {
        Box::pin(self.fetch(key, slot))
    }

    fn contains_in<'a>(&'a self, key: &'a HandoffKey, slot: HandoffSlot) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut conn = self.conn();
            let cmd = redis::cmd("HGET")
                .arg(self.record_key(key, slot))
                .arg("exp")
                .to_owned();
            let exp: Option<u64> = self.call("contains", cmd.query_async(&mut conn)).await?;
            Ok(exp.is_some_and(|e| self.now_ms() < e))
        })
    }

    fn may_contain_in(&self, _key: &HandoffKey, _slot: HandoffSlot) -> bool {
        // Another replica may have written it: only Redis knows.
        true
    }

    fn delete_in<'a>(&'a self, key: &'a HandoffKey, slot: HandoffSlot) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.delete.prepare_invoke();
            inv.key(self.record_key(key, slot)).arg(self.now_ms());
            let mut conn = self.conn();
            let n: i64 = self.call("delete", inv.invoke_async(&mut conn)).await?;
            Ok(n == 1)
        })
    }

    fn freshest<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        Box::pin(async move {
            // Both in one round trip.
            let mut conn = self.conn();
            let mut pipe = redis::pipe();
            for slot in HandoffSlot::ALL {
                pipe.cmd("HMGET")
                    .arg(self.record_key(key, slot))
                    .arg("rec")
                    .arg("exp");
            }
            type Found = (Option<Vec<u8>>, Option<u64>);
            let (account, model): (Found, Found) =
                self.call("freshest", pipe.query_async(&mut conn)).await?;
            let now = self.now_ms();
            let live = |slot, found: Found| match found {
                (Some(rec), Some(exp)) if now < exp => self.decode(key, slot, &rec),
                _ => None,
            };
            Ok(crate::newer(
                live(HandoffSlot::Account, account),
                live(HandoffSlot::Model, model),
            ))
        })
    }

    fn claim_in<'a>(
        &'a self,
        key: &'a HandoffKey,
        slot: HandoffSlot,
        lease: Duration,
    ) -> StoreFuture<'a, Option<Claim>> {
        Box::pin(async move {
            let now = self.now_ms();
            let token = self.inner.ids.fresh();
            let mut inv = self.inner.scripts.claim.prepare_invoke();
            inv.key(self.record_key(key, slot))
                .arg(now)
                .arg(after_ms(now, lease))
                .arg(token);
            let mut conn = self.conn();
            let got: Option<(Vec<u8>, u64)> =
                self.call("claim", inv.invoke_async(&mut conn)).await?;
            let Some((json, version)) = got else {
                return Ok(None);
            };
            match self.decode(key, slot, &json) {
                Some(record) => Ok(Some(Claim {
                    record,
                    slot,
                    version,
                    token,
                })),
                None => {
                    // Unreadable: give the lease back so the record's fate stays its expiry.
                    let mut inv = self.inner.scripts.release.prepare_invoke();
                    inv.key(self.record_key(key, slot)).arg(version).arg(token);
                    let _: i64 = self.call("release", inv.invoke_async(&mut conn)).await?;
                    Ok(None)
                }
            }
        })
    }

    fn complete<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.complete.prepare_invoke();
            inv.key(self.record_key(&claim.key(), claim.slot))
                .arg(claim.version);
            let mut conn = self.conn();
            let n: i64 = self.call("complete", inv.invoke_async(&mut conn)).await?;
            Ok(n == 1)
        })
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.release.prepare_invoke();
            inv.key(self.record_key(&claim.key(), claim.slot))
                .arg(claim.version)
                .arg(claim.token);
            let mut conn = self.conn();
            let _: i64 = self.call("release", inv.invoke_async(&mut conn)).await?;
            Ok(())
        })
    }

    fn delete<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        self.delete_in(key, HandoffSlot::Account)
    }

    fn purge_expired(&self) -> StoreFuture<'_, usize> {
        // Redis TTLs already drop records once the server clock passes their expiry; this sweeps
        // what the callers' clock considers expired earlier (clock skew, tests).
        Box::pin(async move {
            let now = self.now_ms();
            // Unwritten affinities of sessions that never came back go with the affinity TTL.
            let ttl = millis(self.inner.affinity_ttl);
            self.inner.unwritten.purge(now, ttl);
            // The cache of what Redis holds: past their window, a switch's digests are
            // forgotten there too (and an entry past the affinity's lifetime is gone in Redis).
            self.inner
                .affinity_cache
                .purge(now, self.inner.affinity_ttl);
            let mut conn = self.conn();
            let mut purged = 0usize;
            let mut keys = self.scan_records(HandoffSlot::Account).await?;
            keys.extend(self.scan_records(HandoffSlot::Model).await?);
            for k in keys {
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
            let mut keys = self.scan_records(HandoffSlot::Account).await?;
            keys.extend(self.scan_records(HandoffSlot::Model).await?);
            for k in keys {
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
                    // The record must live under its own key and slot, or it would show up in
                    // another tenant's view, or as another kind.
                    Ok(r) if self.record_key(&r.key(), r.slot()) == k => {
                        if tenant.is_none_or(|t| *r.tenant == *t)
                            && session.is_none_or(|s| HandoffKey::session_of(&r.session) == s)
                        {
                            out.push(r);
                        }
                    }
                    Ok(r) => report_corrupt("redis", &k, &format_args!("a record of {}", r.key())),
                    Err(e) => report_corrupt("redis", &k, &e),
                }
            }
            out.sort_by_key(|r| (r.key(), r.slot()));
            Ok(out)
        })
    }

    fn affinity<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>> {
        Box::pin(self.read_affinity(key))
    }

    fn cached_affinity(&self, key: &HandoffKey) -> Option<Option<Affinity>> {
        let (now, ttl) = (self.now_ms(), self.inner.affinity_cache_ttl);
        affinity::with_key(key, |k| self.inner.affinity_cache.get(k, now, ttl)).map(Some)
    }

    fn set_affinity<'a>(&'a self, key: &'a HandoffKey, a: Affinity) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let k = affinity::key(key);
            let Some(base) = self.needs_write(&k, &a) else {
                return Ok(());
            };
            let written = self.write_affinity(key, &a).await;
            self.after_write(k, a, base, &written);
            written
        })
    }

    fn set_affinity_now(self: Arc<Self>, key: HandoffKey, a: Affinity) -> StoreFuture<'static, ()> {
        // This replica's cache first: its next request of the session sees the new affinity at
        // once (while the cache entry is fresh); other replicas see it once Redis has it.
        let k = affinity::key(&key);
        let Some(base) = self.needs_write(&k, &a) else {
            return Box::pin(std::future::ready(Ok(())));
        };
        self.inner
            .affinity_cache
            .insert(k.clone(), affinity::intern(a.clone()), self.now_ms());
        Box::pin(async move {
            let written = self.write_affinity(&key, &a).await;
            self.after_write(k, a, base, &written);
            written
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

    fn login<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<StoredLogin>> {
        self.login_now(name)
    }

    fn put_login<'a>(
        &'a self,
        name: &'a str,
        expected: u64,
        data: &'a [u8],
    ) -> StoreFuture<'a, Option<u64>> {
        self.put_login_now(name, expected, data)
    }

    fn lock_login<'a>(
        &'a self,
        name: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<LoginLock>> {
        self.lock_login_now(name, ttl)
    }

    fn unlock_login<'a>(&'a self, lock: &'a LoginLock) -> StoreFuture<'a, ()> {
        self.unlock_login_now(lock)
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
