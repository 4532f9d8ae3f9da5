//! The redb backend: one file, one writer thread that group-commits, reads inline, and an
//! in-memory index so that the hot path never reads the disk.
//!
//! Layout: table `handoffs` maps `(tenant, session, combo)` to a 17-byte header (layout byte,
//! version, expiry in Unix ms, all little-endian) followed by the record as JSON; table
//! `affinity_by_combo` maps `(tenant, session, combo)` to JSON (an older `affinity` table, keyed
//! without the combo, is no longer read). Opening rebuilds the index from the headers
//! alone, so reopening a million records does not parse a million JSON documents.
//!
//! Ordering: every write updates the index and is queued to the writer while holding the index
//! entry's lock, so the writer applies the writes of one key in index order and disk and index
//! never disagree once the queue has drained.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use context_relay_core::time::to_unix_millis;
use context_relay_core::{HandoffKey, HandoffRecord};
use dashmap::mapref::entry::Entry;
use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition,
};
use tokio::sync::oneshot;

use crate::affinity::{self, AffinityMap, Stored, Write};
use crate::clock::{Clock, SystemClock, after_ms, now_ms};
use crate::index::{FastMap, Meta};
use crate::{
    Affinity, Claim, DEFAULT_AFFINITY_CACHE_ENTRIES, DEFAULT_AFFINITY_TTL, HandoffStore,
    StoreError, StoreFuture, report_corrupt,
};

const HANDOFFS: TableDefinition<'static, (&str, &str, &str), &[u8]> =
    TableDefinition::new("handoffs");
const AFFINITY: TableDefinition<'static, (&str, &str, &str), &[u8]> =
    TableDefinition::new("affinity_by_combo");
const SECRETS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("secrets");

/// First byte of every stored value: bump it when the header changes.
const LAYOUT: u8 = 1;
const HEADER_LEN: usize = 17;

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

/// The default, durable backend: one redb file (DESIGN §5.2).
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
    index: FastMap<HandoffKey, Meta>,
    affinity: AffinityMap,
    affinity_ttl: Duration,
    clock: Arc<dyn Clock>,
    next: AtomicU64,
    corrupt: AtomicU64,
    // `Option`s so that `Drop` can close the channel first and then wait for the writer.
    tx: Option<mpsc::Sender<Op>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

type Done = oneshot::Sender<Result<(), StoreError>>;
/// Resolves when the queued write is committed (or failed).
type Pending = oneshot::Receiver<Result<(), StoreError>>;

enum Op {
    Put {
        key: HandoffKey,
        value: Vec<u8>,
        done: Done,
    },
    Delete {
        key: HandoffKey,
        done: Done,
    },
    /// Deletes records (and affinities) whose stored expiry has passed at `now_ms`: conditional
    /// on what is stored, so a write that raced the purge survives.
    Purge {
        keys: Vec<HandoffKey>,
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

    /// How many keys the in-memory index holds (live records, and expired ones until purged).
    pub fn indexed(&self) -> usize {
        self.inner.index.len()
    }

    /// How many stored records were skipped because they could not be read, since open.
    pub fn corrupt_records(&self) -> u64 {
        self.inner.corrupt.load(Ordering::Relaxed)
    }

    fn open_with(opts: RedbStoreBuilder) -> Result<Self, StoreError> {
        let path = opts.path;
        let mut builder = Database::builder();
        if let Some(bytes) = opts.cache_size {
            builder.set_cache_size(bytes);
        }
        let db = builder.create(&path).map_err(|e| open_error(&path, e))?;
        let fail = |what: &str, e: &dyn fmt::Display| StoreError::Open {
            path: path.clone(),
            reason: format!("{what}: {e}"),
        };
        // Create both tables up front: reads then never meet a missing table, and a foreign redb
        // file with tables of other types is refused here rather than on first use.
        let w = db
            .begin_write()
            .map_err(|e| fail("cannot start a transaction", &e))?;
        {
            w.open_table(HANDOFFS)
                .map_err(|e| fail("not a context-relay store", &e))?;
            w.open_table(AFFINITY)
                .map_err(|e| fail("not a context-relay store", &e))?;
        }
        w.commit().map_err(|e| fail("cannot commit", &e))?;

        let now = now_ms(&*opts.clock);
        let index = FastMap::default();
        let affinity = AffinityMap::new(opts.affinity_entries);
        let mut corrupt = 0u64;
        let mut max_version = 0u64;
        let mut expired = Vec::new();
        let mut stale = Vec::new();
        {
            let r = db
                .begin_read()
                .map_err(|e| fail("cannot start a read", &e))?;
            let table = r
                .open_table(HANDOFFS)
                .map_err(|e| fail("cannot open table handoffs", &e))?;
            let mut interner = Interner::default();
            for item in table
                .iter()
                .map_err(|e| fail("cannot read table handoffs", &e))?
            {
                let (k, v) = item.map_err(|e| fail("cannot read table handoffs", &e))?;
                let (t, s, c) = k.value();
                let key = HandoffKey {
                    tenant: interner.intern(t),
                    session: Arc::from(s),
                    combo: interner.intern(c),
                };
                match decode_header(v.value()) {
                    Ok((version, expires_ms, _)) => {
                        max_version = max_version.max(version);
                        if now < expires_ms {
                            index.insert(key, Meta::new(version, expires_ms));
                        } else {
                            expired.push(key);
                        }
                    }
                    Err(found) => {
                        corrupt += 1;
                        report_corrupt("redb", &key, &found);
                    }
                }
            }
            let table = r
                .open_table(AFFINITY)
                .map_err(|e| fail("cannot open table affinity", &e))?;
            for item in table
                .iter()
                .map_err(|e| fail("cannot read table affinity", &e))?
            {
                let (k, v) = item.map_err(|e| fail("cannot read table affinity", &e))?;
                let (t, s, c) = k.value();
                let key = affinity::key(&HandoffKey::new(t, s, c));
                match serde_json::from_slice::<Stored>(v.value()) {
                    Ok(a) if now < after_ms(a.written_at, opts.affinity_ttl) => {
                        let written = a.written_at;
                        affinity.insert(key, affinity::intern(a.affinity()), written);
                    }
                    Ok(_) => stale.push(key),
                    Err(e) => {
                        corrupt += 1;
                        report_corrupt("redb", &format_args!("affinity {t}/{s}/{c}"), &e);
                    }
                }
            }
        }

        let db = Arc::new(db);
        let (tx, rx) = mpsc::channel();
        if !expired.is_empty() || !stale.is_empty() {
            // Records that expired while the store was closed are not indexed, so the periodic
            // purge would never see them: delete them with the writer's first commit.
            tx.send(Op::Purge {
                keys: expired,
                affinities: stale,
                now_ms: now,
                affinity_ttl: opts.affinity_ttl,
                done: None,
            })
            .ok();
        }
        let writer_db = Arc::clone(&db);
        let max_batch = opts.max_batch;
        let writer = std::thread::Builder::new()
            .name("context-relay-store-redb".into())
            .spawn(move || run_writer(&writer_db, &rx, max_batch))
            .map_err(|e| fail("cannot start the writer thread", &e))?;
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                path,
                index,
                affinity,
                affinity_ttl: opts.affinity_ttl,
                clock: opts.clock,
                next: AtomicU64::new(max_version.saturating_add(1)),
                corrupt: AtomicU64::new(corrupt),
                tx: Some(tx),
                writer: Mutex::new(Some(writer)),
            }),
        })
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

    fn upsert_queue(&self, record: &HandoffRecord) -> Result<Pending, StoreError> {
        let version = self.next();
        let expires_ms = to_unix_millis(record.expires_at);
        let value = encode(version, expires_ms, record)?;
        let key = record.key();
        let (done, rx) = oneshot::channel();
        // Index update and queueing under one entry lock: see the module docs on ordering.
        let entry = self.inner.index.entry(key.clone());
        let op = Op::Put { key, value, done };
        match entry {
            Entry::Occupied(mut e) => {
                self.send(op)?;
                e.insert(Meta::new(version, expires_ms));
            }
            Entry::Vacant(e) => {
                self.send(op)?;
                e.insert(Meta::new(version, expires_ms));
            }
        }
        Ok(rx)
    }

    /// Removes `key` from the index when `pred` holds and queues its deletion.
    fn remove_queue(
        &self,
        key: &HandoffKey,
        pred: impl FnOnce(&Meta) -> bool,
    ) -> Result<Option<(Meta, Pending)>, StoreError> {
        match self.inner.index.entry(key.clone()) {
            Entry::Occupied(e) if pred(e.get()) => {
                let (done, rx) = oneshot::channel();
                self.send(Op::Delete {
                    key: key.clone(),
                    done,
                })?;
                Ok(Some((e.remove(), rx)))
            }
            _ => Ok(None),
        }
    }

    /// Reads the stored record of `key` with its version; a record that cannot be read is
    /// reported, dropped from the index and treated as absent.
    fn read(&self, key: &HandoffKey) -> Result<Option<(u64, HandoffRecord)>, StoreError> {
        let r = self.inner.db.begin_read().map_err(io("read"))?;
        let table = r.open_table(HANDOFFS).map_err(io("read"))?;
        let Some(v) = table
            .get((&*key.tenant, &*key.session, &*key.combo))
            .map_err(io("read"))?
        else {
            return Ok(None);
        };
        Ok(self.decode(key, v.value()))
    }

    fn decode(&self, key: &HandoffKey, bytes: &[u8]) -> Option<(u64, HandoffRecord)> {
        let parsed = decode_header(bytes).and_then(|(version, _, json)| {
            serde_json::from_slice::<HandoffRecord>(json)
                .map(|r| (version, r))
                .map_err(|e| format!("JSON that does not parse as a handoff record ({e})"))
        });
        match parsed {
            // A record stored under another key would leak across keys (and tenants): refuse it.
            Ok((version, record)) if record.key() == *key => Some((version, record)),
            Ok((_, record)) => {
                self.corrupt(key, &format_args!("a record of {}", record.key()));
                None
            }
            Err(found) => {
                self.corrupt(key, &found);
                None
            }
        }
    }

    fn corrupt(&self, key: &HandoffKey, found: &dyn fmt::Display) {
        self.inner.corrupt.fetch_add(1, Ordering::Relaxed);
        report_corrupt("redb", key, found);
        // Out of the index, so the hot path stops offering it; it stays on disk (for inspection)
        // until its expiry purges it.
        self.inner.index.remove(key);
    }

    fn get_now(&self, key: &HandoffKey) -> Result<Option<HandoffRecord>, StoreError> {
        if !self.may_contain(key) {
            return Ok(None);
        }
        let now = self.now_ms();
        Ok(self
            .read(key)?
            .map(|(_, r)| r)
            .filter(|r| now < to_unix_millis(r.expires_at)))
    }

    fn claim_now(&self, key: &HandoffKey, lease: Duration) -> Result<Option<Claim>, StoreError> {
        if !self.may_contain(key) {
            return Ok(None);
        }
        let Some((version, record)) = self.read(key)? else {
            return Ok(None);
        };
        let now = self.now_ms();
        let token = self.next();
        let Some(mut meta) = self.inner.index.get_mut(key) else {
            return Ok(None);
        };
        // A different version means a newer write is still queued: the record read is already
        // replaced, and the new one becomes claimable once it is committed.
        if meta.version != version || !meta.try_lease(now, lease, token) {
            return Ok(None);
        }
        Ok(Some(Claim {
            record,
            version,
            token,
        }))
    }

    fn list_now(
        &self,
        tenant: Option<&str>,
        session: Option<&str>,
    ) -> Result<Vec<HandoffRecord>, StoreError> {
        let now = self.now_ms();
        let mut keys: Vec<HandoffKey> = self
            .inner
            .index
            .iter()
            .filter(|e| e.value().is_live(now))
            .filter(|e| tenant.is_none_or(|t| *e.key().tenant == *t))
            .filter(|e| session.is_none_or(|s| *e.key().session == *s))
            .map(|e| e.key().clone())
            .collect();
        keys.sort();
        let r = self.inner.db.begin_read().map_err(io("list"))?;
        let table = r.open_table(HANDOFFS).map_err(io("list"))?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let v = table
                .get((&*key.tenant, &*key.session, &*key.combo))
                .map_err(io("list"))?;
            if let Some((_, record)) = v.and_then(|v| self.decode(&key, v.value()))
                && now < to_unix_millis(record.expires_at)
            {
                out.push(record);
            }
        }
        Ok(out)
    }

    fn purge_queue(&self) -> Result<(usize, Option<Pending>), StoreError> {
        let now = self.now_ms();
        let mut keys = Vec::new();
        self.inner.index.retain(|k, m| {
            let live = m.is_live(now);
            if !live {
                keys.push(k.clone());
            }
            live
        });
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

    fn set_affinity_queue(
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

    /// An affinity the memory table evicted, read back from disk (and cached again).
    fn read_affinity(&self, key: &HandoffKey) -> Result<Option<Affinity>, StoreError> {
        let r = self.inner.db.begin_read().map_err(io("read"))?;
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

/// Awaits the commit of a queued write.
async fn committed(rx: Pending) -> Result<(), StoreError> {
    rx.await.map_err(|_| StoreError::Closed)?
}

impl HandoffStore for RedbStore {
    fn upsert(&self, record: HandoffRecord) -> StoreFuture<'_, ()> {
        let queued = self.upsert_queue(&record);
        Box::pin(async move { committed(queued?).await })
    }

    fn get<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        Box::pin(std::future::ready(self.get_now(key)))
    }

    fn contains<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Ok(self.may_contain(key))))
    }

    fn may_contain(&self, key: &HandoffKey) -> bool {
        // The clock is read only for a key that is there: an absent key costs one lookup.
        self.inner
            .index
            .get(key)
            .is_some_and(|m| m.is_live(self.now_ms()))
    }

    fn claim<'a>(&'a self, key: &'a HandoffKey, lease: Duration) -> StoreFuture<'a, Option<Claim>> {
        Box::pin(std::future::ready(self.claim_now(key, lease)))
    }

    fn complete<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, bool> {
        let queued = self.remove_queue(&claim.key(), |m| m.version == claim.version);
        Box::pin(async move {
            match queued? {
                Some((_, rx)) => committed(rx).await.map(|()| true),
                None => Ok(false),
            }
        })
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        if let Some(mut meta) = self.inner.index.get_mut(&claim.key()) {
            meta.release(claim.version, claim.token);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn delete<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        let now = self.now_ms();
        let queued = self.remove_queue(key, |_| true);
        Box::pin(async move {
            match queued? {
                Some((meta, rx)) => committed(rx).await.map(|()| meta.is_live(now)),
                None => Ok(false),
            }
        })
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

    fn backend(&self) -> &'static str {
        "redb"
    }

    fn secret<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> StoreFuture<'a, [u8; 32]> {
        let db = self.inner.db.clone();
        let name = name.to_owned();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || stored_secret(&db, &name, candidate))
                .await
                .map_err(|_| StoreError::Closed)?
        })
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

impl fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.inner.path)
            .field("indexed", &self.inner.index.len())
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

/// The writer: blocks for one write, takes whatever else is queued (up to `max_batch`), commits
/// it all in one durable transaction, then answers every caller.
fn run_writer(db: &Database, rx: &mpsc::Receiver<Op>, max_batch: usize) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let result = apply(db, &batch);
        if let Err(e) = &result {
            tracing::error!(error = %e, writes = batch.len(), "redb commit failed");
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

fn apply(db: &Database, batch: &[Op]) -> Result<(), redb::Error> {
    let w = db.begin_write()?;
    {
        let mut handoffs = w.open_table(HANDOFFS)?;
        let mut affinities = w.open_table(AFFINITY)?;
        for op in batch {
            match op {
                Op::Put { key, value, .. } => {
                    handoffs
                        .insert((&*key.tenant, &*key.session, &*key.combo), value.as_slice())?;
                }
                Op::Delete { key, .. } => {
                    handoffs.remove((&*key.tenant, &*key.session, &*key.combo))?;
                }
                Op::Purge {
                    keys,
                    affinities: stale,
                    now_ms,
                    affinity_ttl,
                    ..
                } => {
                    for key in keys {
                        let k = (&*key.tenant, &*key.session, &*key.combo);
                        let expired = handoffs.get(k)?.is_some_and(|v| {
                            decode_header(v.value()).is_ok_and(|(_, e, _)| e <= *now_ms)
                        });
                        if expired {
                            handoffs.remove(k)?;
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

fn encode(version: u64, expires_ms: u64, record: &HandoffRecord) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(HEADER_LEN + 512);
    out.push(LAYOUT);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&expires_ms.to_le_bytes());
    serde_json::to_writer(&mut out, record)?;
    Ok(out)
}

/// `(version, expires_ms, json)` of a stored value, or what was found instead.
fn decode_header(bytes: &[u8]) -> Result<(u64, u64, &[u8]), String> {
    let (header, json) = bytes.split_at_checked(HEADER_LEN).ok_or_else(|| {
        format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        )
    })?;
    if header[0] != LAYOUT {
        return Err(format!("layout byte {} instead of {LAYOUT}", header[0]));
    }
    let word = |at: usize| {
        header
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            .unwrap_or_default()
    };
    Ok((word(1), word(9), json))
}

fn io<E: fmt::Display>(op: &'static str) -> impl Fn(E) -> StoreError {
    move |e| StoreError::Io {
        op,
        reason: e.to_string(),
    }
}

/// Says what is wrong with the file in the words of someone fixing a deployment.
fn open_error(path: &Path, e: DatabaseError) -> StoreError {
    let reason = match &e {
        DatabaseError::DatabaseAlreadyOpen => {
            "the file is locked: another process (or another store in this process) has it open"
                .to_owned()
        }
        DatabaseError::Storage(StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            format!("permission denied ({io})")
        }
        // redb reports a foreign file (wrong magic number) as invalid data.
        DatabaseError::Storage(StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::InvalidData =>
        {
            format!("not a redb file, or a damaged one ({io})")
        }
        DatabaseError::Storage(StorageError::Corrupted(what)) => {
            format!("not a redb file, or a damaged one ({what})")
        }
        DatabaseError::UpgradeRequired(v) => {
            format!("the file uses redb format {v}, which this build cannot read")
        }
        other => other.to_string(),
    };
    StoreError::Open {
        path: path.to_path_buf(),
        reason,
    }
}

/// Shares the `Arc<str>` of repeated tenants and combos while rebuilding the index: a million
/// keys usually name a handful of each.
#[derive(Default)]
struct Interner {
    seen: std::collections::HashSet<Arc<str>>,
}

impl Interner {
    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.seen.get(s) {
            return Arc::clone(a);
        }
        let a: Arc<str> = Arc::from(s);
        self.seen.insert(Arc::clone(&a));
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn header_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_header(&bytes);
        }
    }
}
