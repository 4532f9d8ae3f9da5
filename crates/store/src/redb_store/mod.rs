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
//! Files: `open` (tables, value layout, index rebuild), `writer` (the queue and the writer
//! thread), `reads` (point reads against the index), `store` (the [`HandoffStore`] impl),
//! `login` (subscription logins, table `logins`).
//!
//! [`HandoffStore`]: crate::HandoffStore

mod login;
mod open;
mod reads;
mod store;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use context_relay_core::{HandoffKey, HandoffSlot};
use redb::Database;

use crate::affinity::AffinityMap;
use crate::clock::{Clock, SystemClock, now_ms};
use crate::index::{FastMap, Meta};
use crate::{DEFAULT_AFFINITY_CACHE_ENTRIES, DEFAULT_AFFINITY_TTL, StoreError};
use writer::Op;

/// Most writes committed in one transaction by default.
pub const DEFAULT_MAX_BATCH: usize = 4096;

/// Options for opening a [`RedbStore`].
#[derive(Debug, Clone)]
pub struct RedbStoreBuilder {
    path: PathBuf,
    clock: Arc<dyn Clock>,
    max_batch: usize,
    affinity_ttl: Duration,
    affinity_entries: usize,
    cache_size: Option<usize>,
}

impl RedbStoreBuilder {
    /// Bytes of redb's page cache (default: redb's own default). The in-memory index is kept
    /// apart from it and is not bounded by it.
    pub fn cache_size(mut self, bytes: usize) -> Self {
        self.cache_size = Some(bytes);
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
    db: Arc<Database>,
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
            cache_size: None,
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

fn io<E: fmt::Display>(op: &'static str) -> impl Fn(E) -> StoreError {
    move |e| StoreError::Io {
        op,
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests;
