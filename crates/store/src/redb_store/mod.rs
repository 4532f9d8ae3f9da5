//! The redb backend: one file, one writer thread that group-commits, reads inline, and an
//! in-memory index so that the hot path never reads the disk.
//!
//! Layout: table `handoffs` maps `(tenant, session, combo)` to a 17-byte header (layout byte,
//! version, expiry in Unix ms, all little-endian) followed by the record as JSON, for the
//! account slot; table `model_switch_handoffs` does the same for the model slot; table
//! `affinity_by_combo` maps `(tenant, session, combo)` to JSON (an older `affinity` table, keyed
//! without the combo, is no longer read); the serving model is an optional `model` field of
//! that JSON. Opening rebuilds the index (one per slot) from the headers
//! alone, so reopening a million records does not parse a million JSON documents.
//!
//! Ordering: every write updates the index and is queued to the writer while holding the index
//! entry's lock, so the writer applies the writes of one key in index order and disk and index
//! never disagree once the queue has drained.
//!
//! Faults: a failed commit (a full disk, an I/O error) leaves redb unable to write until the
//! file is reopened. The writer thread then marks the store broken ([`RedbStore::health`],
//! `/readyz`), answers writes at once with [`StoreError::Unavailable`], logs once per attempt,
//! and reopens the file with a back-off (1 s, doubling up to a minute); the first reopen that
//! succeeds ends it, without a restart. A file damaged so that it cannot be opened is an open
//! error naming it (redb's own panics on damaged pages included).
//!
//! Files: `open` (tables, value layout, index rebuild), `writer` (the queue and the writer
//! thread, reopening), `reads` (point reads against the index), `store` (the [`HandoffStore`]
//! impl), `login` (subscription logins, table `logins`).
//!
//! [`HandoffStore`]: crate::HandoffStore

mod backoff;
mod login;
mod open;
mod reads;
mod store;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use context_relay_core::{HandoffKey, HandoffSlot};
use redb::Database;

use crate::affinity::AffinityMap;
use crate::clock::{Clock, SystemClock, now_ms};
use crate::index::{FastMap, Meta};
use crate::{DEFAULT_AFFINITY_CACHE_ENTRIES, DEFAULT_AFFINITY_TTL, StoreError};
use writer::Op;

/// Most writes committed in one transaction by default.
pub const DEFAULT_MAX_BATCH: usize = 4096;
/// The first wait before reopening a file after an I/O error; it doubles up to
/// [`MAX_REOPEN_BACKOFF`].
pub const DEFAULT_REOPEN_BACKOFF: Duration = Duration::from_secs(1);

/// Bytes of redb's page cache by default: room for the pages a gateway reads and writes
/// often (the recent handoffs and affinities; the older ones are read back from disk when
/// needed). redb's own default is 1 GiB, which a store of a few hundred thousand sessions
/// fills, and which the process then keeps.
pub const DEFAULT_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// The longest wait between two attempts to reopen a broken file.
pub const MAX_REOPEN_BACKOFF: Duration = Duration::from_secs(60);

/// Options for opening a [`RedbStore`].
#[derive(Debug, Clone)]
pub struct RedbStoreBuilder {
    path: PathBuf,
    clock: Arc<dyn Clock>,
    max_batch: usize,
    affinity_ttl: Duration,
    affinity_entries: usize,
    cache_size: usize,
    reopen_backoff: Duration,
}

impl RedbStoreBuilder {
    /// The first wait before the file is reopened after an I/O error (default
    /// [`DEFAULT_REOPEN_BACKOFF`]); it doubles with each failed attempt, up to
    /// [`MAX_REOPEN_BACKOFF`].
    pub fn reopen_backoff(mut self, wait: Duration) -> Self {
        self.reopen_backoff = wait;
        self
    }

    /// Bytes of redb's page cache (default [`DEFAULT_CACHE_BYTES`]). The in-memory index is
    /// kept apart from it and is not bounded by it.
    pub fn cache_size(mut self, bytes: usize) -> Self {
        self.cache_size = bytes;
        self
    }

    /// Reads the time from `clock` (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Commits at most `n` queued writes together (default 4096; `1` commits each write on its
    /// own, which is only useful to measure what group commit saves).
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// How long an unchanged affinity lives (default 7 days).
    pub fn affinity_ttl(mut self, ttl: Duration) -> Self {
        self.affinity_ttl = ttl;
        self
    }

    /// Most affinities kept in memory (default [`DEFAULT_AFFINITY_CACHE_ENTRIES`]); the least
    /// recently used are evicted and read back from disk when needed.
    pub fn affinity_cache_entries(mut self, n: usize) -> Self {
        self.affinity_entries = n.max(1);
        self
    }

    /// Opens (or creates) the store file, rebuilds the index and starts the writer thread.
    ///
    /// Blocking: it reads every record header. Errors name the path and what is wrong with it.
    pub fn open(self) -> Result<RedbStore, StoreError> {
        RedbStore::open_with(self)
    }
}

/// The default, durable backend: one redb file that survives restarts (see the module docs for
/// its layout and write ordering).
///
/// Cloning shares the store. Dropping the last clone stops the writer after it has committed
/// everything queued, and closes the file.
#[derive(Clone)]
pub struct RedbStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<DbCell>,
    path: PathBuf,
    /// One index per slot ([`HandoffSlot::index`]).
    index: [FastMap<HandoffKey, Meta>; 2],
    affinity: AffinityMap,
    affinity_ttl: Duration,
    clock: Arc<dyn Clock>,
    next: AtomicU64,
    corrupt: AtomicU64,
    // `Option`s so that `Drop` can close the channel first and then wait for the writer.
    tx: Option<mpsc::Sender<Op>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl RedbStore {
    /// Opens (or creates) the store at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::builder(path).open()
    }

    /// Options for opening the store at `path`.
    pub fn builder(path: impl AsRef<Path>) -> RedbStoreBuilder {
        RedbStoreBuilder {
            path: path.as_ref().to_path_buf(),
            clock: Arc::new(SystemClock),
            max_batch: DEFAULT_MAX_BATCH,
            affinity_ttl: DEFAULT_AFFINITY_TTL,
            affinity_entries: DEFAULT_AFFINITY_CACHE_ENTRIES,
            cache_size: DEFAULT_CACHE_BYTES,
            reopen_backoff: DEFAULT_REOPEN_BACKOFF,
        }
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many records the in-memory index holds, both slots together (live records, and
    /// expired ones until purged).
    pub fn indexed(&self) -> usize {
        self.inner.index.iter().map(FastMap::len).sum()
    }

    /// The index of `slot`.
    fn index(&self, slot: HandoffSlot) -> &FastMap<HandoffKey, Meta> {
        &self.inner.index[slot.index()]
    }

    /// How many stored records were skipped because they could not be read, since open.
    pub fn corrupt_records(&self) -> u64 {
        self.inner.corrupt.load(Ordering::Relaxed)
    }

    /// `Ok` while the store can write; from a failed commit (an I/O error) until a commit
    /// succeeds again on the reopened file, [`StoreError::Unavailable`] with the time to the
    /// next attempt.
    pub fn health(&self) -> Result<(), StoreError> {
        self.inner.db.health("write")
    }

    /// Completes once [`health`](Self::health) is `Ok` (at once when it is).
    pub async fn recovered(&self) {
        self.inner.db.recovered().await;
    }

    /// The open database for `op`, or why there is none.
    fn db(&self, op: &'static str) -> Result<Arc<Database>, StoreError> {
        self.inner.db.get(op)
    }

    fn now_ms(&self) -> u64 {
        now_ms(&*self.inner.clock)
    }

    fn next(&self) -> u64 {
        self.inner.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues `op`; the receiver yields the result of its commit.
    fn send(&self, op: Op) -> Result<(), StoreError> {
        self.inner
            .tx
            .as_ref()
            .ok_or(StoreError::Closed)?
            .send(op)
            .map_err(|_| StoreError::Closed)
    }
}

impl fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.inner.path)
            .field("indexed", &self.indexed())
            .field("affinities", &self.inner.affinity.len())
            .field("clock", &self.inner.clock)
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel lets the writer commit what is queued and exit; waiting for it
        // releases the file lock before the store is considered gone (a reopen then succeeds).
        drop(self.tx.take());
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(writer) = writer
            && writer.join().is_err()
        {
            tracing::error!(path = %self.path.display(), "the redb writer thread panicked");
        }
    }
}

/// The database of a store, swapped when the file is reopened after an I/O error, and whether
/// it is broken.
pub(super) struct DbCell {
    db: RwLock<Option<Arc<Database>>>,
    /// From a failed commit until a commit succeeds again: the next attempt.
    broken: Mutex<Option<Instant>>,
    /// Told when a broken store works again.
    recovered: tokio::sync::Notify,
}

impl DbCell {
    pub(super) fn new(db: Database) -> Self {
        Self {
            db: RwLock::new(Some(Arc::new(db))),
            broken: Mutex::new(None),
            recovered: tokio::sync::Notify::new(),
        }
    }

    /// The open database (reads work on a reopened file before writes are tried again).
    pub(super) fn get(&self, op: &'static str) -> Result<Arc<Database>, StoreError> {
        self.db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| self.unavailable(op))
    }

    pub(super) fn is_open(&self) -> bool {
        self.db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    fn unavailable(&self, op: &'static str) -> StoreError {
        let next = *self.broken.lock().unwrap_or_else(PoisonError::into_inner);
        StoreError::Unavailable {
            op,
            retry_in: next.map_or(Duration::ZERO, |n| {
                n.saturating_duration_since(Instant::now())
            }),
        }
    }

    pub(super) fn health(&self, op: &'static str) -> Result<(), StoreError> {
        if self
            .broken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
        {
            return Err(self.unavailable(op));
        }
        Ok(())
    }

    /// Marks the store broken until at least `next`.
    pub(super) fn broke(&self, next: Instant) {
        *self.broken.lock().unwrap_or_else(PoisonError::into_inner) = Some(next);
    }

    /// Ends the broken state.
    pub(super) fn works(&self) {
        *self.broken.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.recovered.notify_waiters();
    }

    /// Completes once the store is not broken.
    pub(super) async fn recovered(&self) {
        loop {
            let notified = self.recovered.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.health("write").is_ok() {
                return;
            }
            notified.await;
        }
    }

    /// Takes the database out (readers then get [`StoreError::Unavailable`]) and waits, briefly,
    /// for the readers that hold it, so that its file lock is released.
    pub(super) fn take(&self) {
        let old = self
            .db
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut old) = old {
            // Point reads are short; a reader that holds on longer only delays the reopen.
            for _ in 0..1000 {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        drop(db);
                        return;
                    }
                    Err(still) => old = still,
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Puts a reopened database in (the store stays broken until a commit succeeds).
    pub(super) fn put(&self, db: Database) {
        *self.db.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(db));
    }
}

fn io<E: fmt::Display>(op: &'static str) -> impl Fn(E) -> StoreError {
    move |e| StoreError::Io {
        op,
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests;
