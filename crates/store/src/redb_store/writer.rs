//! Writes: each one updates the in-memory index (or the affinity table) and is queued, under
//! the index entry's lock, to one writer thread that group-commits whatever is queued in one
//! durable transaction and then answers every caller.

use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use context_relay_core::time::to_unix_millis;
use context_relay_core::{HandoffKey, HandoffRecord, HandoffSlot};
use dashmap::mapref::entry::Entry;
use redb::{Database, ReadableTable, TableDefinition};
use tokio::sync::oneshot;

use super::backoff::ReopenBackoff;
use super::open::{AFFINITY, HANDOFFS, MODEL_HANDOFFS, decode_header, encode};
use super::{DbCell, RedbStore};
use crate::affinity::{self, Stored, Write};
use crate::clock::after_ms;
use crate::index::Meta;
use crate::{Affinity, StoreError};

pub(super) type Done = oneshot::Sender<Result<(), StoreError>>;
/// Resolves when the queued write is committed (or failed).
pub(super) type Pending = oneshot::Receiver<Result<(), StoreError>>;

pub(super) enum Op {
    Put {
        slot: HandoffSlot,
        key: HandoffKey,
        value: Vec<u8>,
        done: Done,
    },
    Delete {
        slot: HandoffSlot,
        key: HandoffKey,
        done: Done,
    },
    /// Deletes records (and affinities) whose stored expiry has passed at `now_ms`: conditional
    /// on what is stored, so a write that raced the purge survives.
    Purge {
        keys: Vec<(HandoffSlot, HandoffKey)>,
        affinities: Vec<String>,
        now_ms: u64,
        affinity_ttl: Duration,
        done: Option<Done>,
    },
    PutAffinity {
        key: HandoffKey,
        value: Vec<u8>,
        done: Done,
    },
}

impl RedbStore {
    pub(super) fn upsert_queue(&self, record: &HandoffRecord) -> Result<Pending, StoreError> {
        // `may` allows every write: `None` does not come back.
        self.put_queue(record, |_| true)?.ok_or(StoreError::Closed)
    }

    /// [`upsert_queue`](Self::upsert_queue) unless the live record of its key is leased:
    /// `None` then, and nothing queued.
    pub(super) fn offer_queue(
        &self,
        record: &HandoffRecord,
    ) -> Result<Option<Pending>, StoreError> {
        let now = self.now_ms();
        self.put_queue(record, |old| !old.is_some_and(|m| m.is_carried(now)))
    }

    /// Queues `record`'s write when `may` allows it given the index entry it replaces
    /// (`None`, with nothing queued, when it does not).
    fn put_queue(
        &self,
        record: &HandoffRecord,
        may: impl FnOnce(Option<&Meta>) -> bool,
    ) -> Result<Option<Pending>, StoreError> {
        let version = self.next();
        let expires_ms = to_unix_millis(record.expires_at);
        let value = encode(version, expires_ms, record)?;
        let key = record.key();
        let slot = record.slot();
        let (done, rx) = oneshot::channel();
        // Index update and queueing under one entry lock: see the module docs on ordering.
        let entry = self.index(slot).entry(key.clone());
        let op = Op::Put {
            slot,
            key,
            value,
            done,
        };
        match entry {
            Entry::Occupied(mut e) => {
                if !may(Some(e.get())) {
                    return Ok(None);
                }
                self.send(op)?;
                e.insert(Meta::new(version, expires_ms));
            }
            Entry::Vacant(e) => {
                if !may(None) {
                    return Ok(None);
                }
                self.send(op)?;
                e.insert(Meta::new(version, expires_ms));
            }
        }
        Ok(Some(rx))
    }

    /// Removes `key` from the index of `slot` when `pred` holds and queues its deletion.
    pub(super) fn remove_queue(
        &self,
        key: &HandoffKey,
        slot: HandoffSlot,
        pred: impl FnOnce(&Meta) -> bool,
    ) -> Result<Option<(Meta, Pending)>, StoreError> {
        match self.index(slot).entry(key.clone()) {
            Entry::Occupied(e) if pred(e.get()) => {
                let (done, rx) = oneshot::channel();
                self.send(Op::Delete {
                    slot,
                    key: key.clone(),
                    done,
                })?;
                Ok(Some((e.remove(), rx)))
            }
            _ => Ok(None),
        }
    }

    pub(super) fn purge_queue(&self) -> Result<(usize, Option<Pending>), StoreError> {
        let now = self.now_ms();
        let mut keys = Vec::new();
        for slot in HandoffSlot::ALL {
            self.index(slot).retain(|k, m| {
                let live = m.is_live(now);
                if !live {
                    keys.push((slot, k.clone()));
                }
                live
            });
        }
        let affinities = self.inner.affinity.purge(now, self.inner.affinity_ttl);
        if keys.is_empty() && affinities.is_empty() {
            return Ok((0, None));
        }
        let n = keys.len();
        let (done, rx) = oneshot::channel();
        self.send(Op::Purge {
            keys,
            affinities,
            now_ms: now,
            affinity_ttl: self.inner.affinity_ttl,
            done: Some(done),
        })?;
        Ok((n, Some(rx)))
    }

    pub(super) fn set_affinity_queue(
        &self,
        key: &HandoffKey,
        a: Affinity,
    ) -> Result<Option<Pending>, StoreError> {
        let now = self.now_ms();
        let map = &self.inner.affinity;
        let k = affinity::key(key);
        if map.needs_write(&k, &a, now, self.inner.affinity_ttl / 4) == Write::Skip {
            return Ok(None);
        }
        let value = serde_json::to_vec(&Stored::new(&a, now))?;
        let (done, rx) = oneshot::channel();
        // Two racing writers of one session may queue in either order; the last one queued wins
        // on disk and the last one inserted wins in memory. They can disagree only until the
        // next change, and either answer is an account that just served the session.
        self.send(Op::PutAffinity {
            key: key.clone(),
            value,
            done,
        })?;
        map.insert(k, affinity::intern(a), now);
        Ok(Some(rx))
    }
}

/// Awaits the commit of a queued write.
pub(super) async fn committed(rx: Pending) -> Result<(), StoreError> {
    rx.await.map_err(|_| StoreError::Closed)?
}

/// What the writer needs to reopen the file after an I/O error.
pub(super) struct Reopen {
    pub(super) cell: Arc<DbCell>,
    pub(super) path: PathBuf,
    pub(super) cache_size: usize,
    pub(super) first_backoff: Duration,
}

/// The writer: blocks for one write, takes whatever else is queued (up to `max_batch`), commits
/// it all in one durable transaction, then answers every caller.
///
/// After a failed commit the store is broken: writes are answered at once with
/// [`StoreError::Unavailable`] while the file is reopened with a back-off; the log says so
/// once per attempt, not once per write.
pub(super) fn run_writer(reopen: &Reopen, rx: &mpsc::Receiver<Op>, max_batch: usize) {
    let cell = &reopen.cell;
    let mut backoff = ReopenBackoff::new(reopen.first_backoff);
    // While broken: when to try again.
    let mut next_attempt: Option<Instant> = None;
    loop {
        let first = match next_attempt {
            None => match rx.recv() {
                Ok(op) => Some(op),
                Err(_) => return,
            },
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(op) => Some(op),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            },
        };
        if let Some(at) = next_attempt
            && Instant::now() >= at
        {
            match recover(reopen) {
                Ok(()) => {
                    next_attempt = None;
                    backoff.reopened();
                    cell.works();
                    tracing::info!(path = %reopen.path.display(), "redb store reopened; writes resume");
                }
                Err(e) => {
                    let wait = backoff.reopen_failed();
                    let at = Instant::now() + wait;
                    next_attempt = Some(at);
                    cell.broke(at);
                    cell.take();
                    tracing::error!(error = %e, retry_in = ?wait, "redb store still broken; trying again later");
                }
            }
        }
        let Some(first) = first else {
            continue;
        };
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let result = match (next_attempt, cell.get("commit")) {
            // Broken: answered at once, until the next attempt.
            (Some(_), _) => cell.health("commit"),
            (None, Err(unavailable)) => Err(unavailable),
            (None, Ok(db)) => apply(&db, &batch).map_err(|e| {
                let wait = backoff.commit_failed();
                let at = Instant::now() + wait;
                tracing::error!(
                    error = %e, writes = batch.len(), path = %reopen.path.display(), retry_in = ?wait,
                    "redb commit failed; the store is broken until its file is reopened"
                );
                next_attempt = Some(at);
                cell.broke(at);
                drop(db);
                // redb refuses every write after an I/O error until the file is reopened.
                cell.take();
                StoreError::Io {
                    op: "commit",
                    reason: e.to_string(),
                }
            }),
        };
        if result.is_ok() {
            backoff.committed();
        }
        for op in batch {
            let done = match op {
                Op::Put { done, .. } | Op::Delete { done, .. } | Op::PutAffinity { done, .. } => {
                    Some(done)
                }
                Op::Purge { done, .. } => done,
            };
            if let Some(done) = done {
                // The caller may have gone away (dropped its future): nothing to tell then.
                done.send(match &result {
                    Ok(()) => Ok(()),
                    Err(StoreError::Unavailable { op, retry_in }) => Err(StoreError::Unavailable {
                        op,
                        retry_in: *retry_in,
                    }),
                    Err(e) => Err(StoreError::Io {
                        op: "commit",
                        reason: e.to_string(),
                    }),
                })
                .ok();
            }
        }
    }
}

/// Reopens the file when it is closed, then proves it writable: a commit that writes
/// [`PROBE_BYTES`] and one that takes them out again. An empty commit is no proof: it passes
/// on a disk that is still full.
fn recover(reopen: &Reopen) -> Result<(), StoreError> {
    if !reopen.cell.is_open() {
        let db = super::open::open_database(&reopen.path, reopen.cache_size)?;
        reopen.cell.put(db);
    }
    let db = reopen.cell.get("commit")?;
    probe(&db).map_err(|e| StoreError::Io {
        op: "commit",
        reason: e.to_string(),
    })
}

/// What the reopen probe writes: as much as a large record (a handoff, a switched session's
/// affinity with its foreign digests).
const PROBE_BYTES: usize = 64 << 10;

/// The table the probe writes to and empties again.
const PROBE: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("write_probe");

fn probe(db: &Database) -> Result<(), redb::Error> {
    let w = db.begin_write()?;
    w.open_table(PROBE)?
        .insert("probe", vec![0u8; PROBE_BYTES].as_slice())?;
    w.commit()?;
    let w = db.begin_write()?;
    w.open_table(PROBE)?.remove("probe")?;
    w.commit()?;
    Ok(())
}

fn apply(db: &Database, batch: &[Op]) -> Result<(), redb::Error> {
    let w = db.begin_write()?;
    {
        let mut handoffs = [w.open_table(HANDOFFS)?, w.open_table(MODEL_HANDOFFS)?];
        let mut affinities = w.open_table(AFFINITY)?;
        for op in batch {
            match op {
                Op::Put {
                    slot, key, value, ..
                } => {
                    handoffs[slot.index()]
                        .insert((&*key.tenant, &*key.session, &*key.combo), value.as_slice())?;
                }
                Op::Delete { slot, key, .. } => {
                    handoffs[slot.index()].remove((&*key.tenant, &*key.session, &*key.combo))?;
                }
                Op::Purge {
                    keys,
                    affinities: stale,
                    now_ms,
                    affinity_ttl,
                    ..
                } => {
                    for (slot, key) in keys {
                        let table = &mut handoffs[slot.index()];
                        let k = (&*key.tenant, &*key.session, &*key.combo);
                        let expired = table.get(k)?.is_some_and(|v| {
                            decode_header(v.value()).is_ok_and(|(_, e, _)| e <= *now_ms)
                        });
                        if expired {
                            table.remove(k)?;
                        }
                    }
                    for key in stale {
                        let Some(k) = affinity::split_key(key) else {
                            continue;
                        };
                        let expired = affinities.get(k)?.is_some_and(|v| {
                            serde_json::from_slice::<Stored>(v.value())
                                .is_ok_and(|a| after_ms(a.written_at, *affinity_ttl) <= *now_ms)
                        });
                        if expired {
                            affinities.remove(k)?;
                        }
                    }
                }
                Op::PutAffinity { key, value, .. } => {
                    affinities
                        .insert((&*key.tenant, &*key.session, &*key.combo), value.as_slice())?;
                }
            }
        }
    }
    w.commit()?;
    Ok(())
}
