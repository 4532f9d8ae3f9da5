//! [`HandoffStore`] for [`RedbStore`]: reads answer inline, writes resolve once committed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use context_relay_core::{HandoffKey, HandoffRecord, HandoffSlot};
use redb::{Database, ReadableTable};

use super::RedbStore;
use super::open::SECRETS;
use super::writer::committed;
use crate::affinity;
use crate::{Affinity, Claim, HandoffStore, StoreError, StoreFuture, StoredLogin};

impl HandoffStore for RedbStore {
    fn upsert(&self, record: HandoffRecord) -> StoreFuture<'_, ()> {
        let queued = self.upsert_queue(&record);
        Box::pin(async move { committed(queued?).await })
    }

    fn offer(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        let queued = self.offer_queue(&record);
        Box::pin(async move {
            match queued? {
                Some(rx) => committed(rx).await.map(|()| true),
                None => Ok(false),
            }
        })
    }

    fn get<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        self.get_in(key, HandoffSlot::Account)
    }

    fn contains<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Ok(self.may_contain(key))))
    }

    fn may_contain(&self, key: &HandoffKey) -> bool {
        self.may_contain_in(key, HandoffSlot::Account)
    }

    fn claim<'a>(&'a self, key: &'a HandoffKey, lease: Duration) -> StoreFuture<'a, Option<Claim>> {
        self.claim_in(key, HandoffSlot::Account, lease)
    }

    fn complete<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, bool> {
        let queued = self.remove_queue(&claim.key(), claim.slot, |m| m.version == claim.version);
        Box::pin(async move {
            match queued? {
                Some((_, rx)) => committed(rx).await.map(|()| true),
                None => Ok(false),
            }
        })
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        if let Some(mut meta) = self.index(claim.slot).get_mut(&claim.key()) {
            meta.release(claim.version, claim.token);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn delete<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        self.delete_in(key, HandoffSlot::Account)
    }

    fn purge_expired(&self) -> StoreFuture<'_, usize> {
        let queued = self.purge_queue();
        Box::pin(async move {
            let (n, rx) = queued?;
            if let Some(rx) = rx {
                committed(rx).await?;
            }
            Ok(n)
        })
    }

    fn list<'a>(
        &'a self,
        tenant: Option<&'a str>,
        session: Option<&'a str>,
    ) -> StoreFuture<'a, Vec<HandoffRecord>> {
        Box::pin(std::future::ready(self.list_now(tenant, session)))
    }

    fn affinity<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>> {
        let found = match self.cached_affinity(key) {
            Some(known) => Ok(known),
            // A point read, inline like every redb read.
            None => self.read_affinity(key),
        };
        Box::pin(std::future::ready(found))
    }

    fn cached_affinity(&self, key: &HandoffKey) -> Option<Option<Affinity>> {
        let map = &self.inner.affinity;
        let (now, ttl) = (self.now_ms(), self.inner.affinity_ttl);
        match affinity::with_key(key, |k| map.get(k, now, ttl)) {
            Some(a) => Some(Some(a)),
            // Nothing evicted yet: the table in memory is the whole table.
            None => map.is_complete().then_some(None),
        }
    }

    fn set_affinity<'a>(&'a self, key: &'a HandoffKey, a: Affinity) -> StoreFuture<'a, ()> {
        let queued = self.set_affinity_queue(key, a);
        Box::pin(async move {
            match queued? {
                Some(rx) => committed(rx).await,
                None => Ok(()),
            }
        })
    }

    fn set_affinity_now(self: Arc<Self>, key: HandoffKey, a: Affinity) -> StoreFuture<'static, ()> {
        // The in-memory map is updated when the write is queued, before the commit.
        let queued = self.set_affinity_queue(&key, a);
        Box::pin(async move {
            match queued? {
                Some(rx) => committed(rx).await,
                None => Ok(()),
            }
        })
    }

    fn backend(&self) -> &'static str {
        "redb"
    }

    fn health(&self) -> Result<(), StoreError> {
        RedbStore::health(self)
    }

    fn get_in<'a>(
        &'a self,
        key: &'a HandoffKey,
        slot: HandoffSlot,
    ) -> StoreFuture<'a, Option<HandoffRecord>> {
        Box::pin(std::future::ready(self.get_now(key, slot)))
    }

    fn contains_in<'a>(&'a self, key: &'a HandoffKey, slot: HandoffSlot) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Ok(self.may_contain_in(key, slot))))
    }

    fn may_contain_in(&self, key: &HandoffKey, slot: HandoffSlot) -> bool {
        // The clock is read only for a key that is there: an absent key costs one lookup.
        self.index(slot)
            .get(key)
            .is_some_and(|m| m.is_live(self.now_ms()))
    }

    fn claim_in<'a>(
        &'a self,
        key: &'a HandoffKey,
        slot: HandoffSlot,
        lease: Duration,
    ) -> StoreFuture<'a, Option<Claim>> {
        Box::pin(std::future::ready(self.claim_now(key, slot, lease)))
    }

    fn delete_in<'a>(&'a self, key: &'a HandoffKey, slot: HandoffSlot) -> StoreFuture<'a, bool> {
        let now = self.now_ms();
        let queued = self.remove_queue(key, slot, |_| true);
        Box::pin(async move {
            match queued? {
                Some((meta, rx)) => committed(rx).await.map(|()| meta.is_live(now)),
                None => Ok(false),
            }
        })
    }

    fn freshest<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        let found = self.get_now(key, HandoffSlot::Account).and_then(|account| {
            Ok(crate::newer(
                account,
                self.get_now(key, HandoffSlot::Model)?,
            ))
        });
        Box::pin(std::future::ready(found))
    }

    fn secret<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> StoreFuture<'a, [u8; 32]> {
        let db = self.db("secret");
        let name = name.to_owned();
        Box::pin(async move {
            let db = db?;
            tokio::task::spawn_blocking(move || stored_secret(&db, &name, candidate))
                .await
                .map_err(|_| StoreError::Closed)?
        })
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
}

/// The secret `name` of `db`, storing `candidate` when there is none.
fn stored_secret(db: &Database, name: &str, candidate: [u8; 32]) -> Result<[u8; 32], StoreError> {
    let io = |e: &dyn fmt::Display| StoreError::Io {
        op: "secret",
        reason: e.to_string(),
    };
    let w = db.begin_write().map_err(|e| io(&e))?;
    let secret = {
        let mut table = w.open_table(SECRETS).map_err(|e| io(&e))?;
        let existing = table
            .get(name)
            .map_err(|e| io(&e))?
            .and_then(|v| <[u8; 32]>::try_from(v.value()).ok());
        match existing {
            Some(s) => s,
            None => {
                table.insert(name, &candidate[..]).map_err(|e| io(&e))?;
                candidate
            }
        }
    };
    w.commit().map_err(|e| io(&e))?;
    Ok(secret)
}
