//! Reads: inline point reads of the file, checked against the in-memory index, which answers
//! alone when a key is absent.

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use context_relay_core::time::to_unix_millis;
use context_relay_core::{HandoffKey, HandoffRecord, HandoffSlot};
use redb::ReadableDatabase;

use super::RedbStore;
use super::io;
use super::open::{AFFINITY, decode_header, handoffs};
use crate::affinity::{self, Stored};
use crate::clock::after_ms;
use crate::{Affinity, Claim, HandoffStore, StoreError, report_corrupt};

impl RedbStore {
    /// Reads the stored record of `key` in `slot` with its version; a record that cannot be
    /// read is reported, dropped from the index and treated as absent.
    pub(super) fn read(
        &self,
        key: &HandoffKey,
        slot: HandoffSlot,
    ) -> Result<Option<(u64, HandoffRecord)>, StoreError> {
        let r = self.db("read")?.begin_read().map_err(io("read"))?;
        let table = r.open_table(handoffs(slot)).map_err(io("read"))?;
        let Some(v) = table
            .get((&*key.tenant, &*key.session, &*key.combo))
            .map_err(io("read"))?
        else {
            return Ok(None);
        };
        Ok(self.decode(key, slot, v.value()))
    }

    pub(super) fn decode(
        &self,
        key: &HandoffKey,
        slot: HandoffSlot,
        bytes: &[u8],
    ) -> Option<(u64, HandoffRecord)> {
        let parsed = decode_header(bytes).and_then(|(version, _, json)| {
            serde_json::from_slice::<HandoffRecord>(json)
                .map(|r| (version, r))
                .map_err(|e| format!("JSON that does not parse as a handoff record ({e})"))
        });
        match parsed {
            // A record stored under another key would leak across keys (and tenants): refuse it.
            // So would a record of the other slot's kind.
            Ok((version, record)) if record.key() == *key && record.slot() == slot => {
                Some((version, record))
            }
            Ok((_, record)) if record.key() == *key => {
                let kind = record.kind.as_str();
                self.corrupt(
                    key,
                    slot,
                    &format_args!("a {kind} record in the {slot:?} slot"),
                );
                None
            }
            Ok((_, record)) => {
                self.corrupt(key, slot, &format_args!("a record of {}", record.key()));
                None
            }
            Err(found) => {
                self.corrupt(key, slot, &found);
                None
            }
        }
    }

    pub(super) fn corrupt(&self, key: &HandoffKey, slot: HandoffSlot, found: &dyn fmt::Display) {
        self.inner.corrupt.fetch_add(1, Ordering::Relaxed);
        report_corrupt("redb", key, found);
        // Out of the index, so the hot path stops offering it; it stays on disk (for inspection)
        // until its expiry purges it.
        self.index(slot).remove(key);
    }

    pub(super) fn get_now(
        &self,
        key: &HandoffKey,
        slot: HandoffSlot,
    ) -> Result<Option<HandoffRecord>, StoreError> {
        if !self.may_contain_in(key, slot) {
            return Ok(None);
        }
        let now = self.now_ms();
        Ok(self
            .read(key, slot)?
            .map(|(_, r)| r)
            .filter(|r| now < to_unix_millis(r.expires_at)))
    }

    pub(super) fn claim_now(
        &self,
        key: &HandoffKey,
        slot: HandoffSlot,
        lease: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        if !self.may_contain_in(key, slot) {
            return Ok(None);
        }
        let Some((version, record)) = self.read(key, slot)? else {
            return Ok(None);
        };
        let now = self.now_ms();
        let token = self.next();
        let Some(mut meta) = self.index(slot).get_mut(key) else {
            return Ok(None);
        };
        // A different version means a newer write is still queued: the record read is already
        // replaced, and the new one becomes claimable once it is committed.
        if meta.version != version || !meta.try_lease(now, lease, token) {
            return Ok(None);
        }
        Ok(Some(Claim {
            record,
            slot,
            version,
            token,
        }))
    }

    pub(super) fn list_now(
        &self,
        tenant: Option<&str>,
        session: Option<&str>,
    ) -> Result<Vec<HandoffRecord>, StoreError> {
        let now = self.now_ms();
        let mut keys: Vec<(HandoffKey, HandoffSlot)> = HandoffSlot::ALL
            .iter()
            .flat_map(|&slot| {
                self.index(slot)
                    .iter()
                    .filter(|e| e.value().is_live(now))
                    .filter(|e| tenant.is_none_or(|t| *e.key().tenant == *t))
                    .filter(|e| {
                        session.is_none_or(|s| HandoffKey::session_of(&e.key().session) == s)
                    })
                    .map(|e| (e.key().clone(), slot))
                    .collect::<Vec<_>>()
            })
            .collect();
        keys.sort();
        let r = self.db("list")?.begin_read().map_err(io("list"))?;
        let tables = [
            r.open_table(handoffs(HandoffSlot::Account))
                .map_err(io("list"))?,
            r.open_table(handoffs(HandoffSlot::Model))
                .map_err(io("list"))?,
        ];
        let mut out = Vec::with_capacity(keys.len());
        for (key, slot) in keys {
            let v = tables[slot.index()]
                .get((&*key.tenant, &*key.session, &*key.combo))
                .map_err(io("list"))?;
            if let Some((_, record)) = v.and_then(|v| self.decode(&key, slot, v.value()))
                && now < to_unix_millis(record.expires_at)
            {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// An affinity the memory table evicted, read back from disk (and cached again).
    pub(super) fn read_affinity(&self, key: &HandoffKey) -> Result<Option<Affinity>, StoreError> {
        let r = self.db("read")?.begin_read().map_err(io("read"))?;
        let table = r.open_table(AFFINITY).map_err(io("read"))?;
        let Some(v) = table
            .get((&*key.tenant, &*key.session, &*key.combo))
            .map_err(io("read"))?
        else {
            return Ok(None);
        };
        let stored = match serde_json::from_slice::<Stored>(v.value()) {
            Ok(s) => s,
            Err(e) => {
                report_corrupt("redb", &format_args!("affinity {key}"), &e);
                return Ok(None);
            }
        };
        let now = self.now_ms();
        if now >= after_ms(stored.written_at, self.inner.affinity_ttl) {
            return Ok(None);
        }
        let written = stored.written_at;
        let a = affinity::intern(stored.affinity());
        self.inner
            .affinity
            .insert(affinity::key(key), a.clone(), written);
        Ok(Some(a))
    }
}
