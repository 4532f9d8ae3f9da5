//! Opening a store file: the tables and the layout of a stored value, creating the tables,
//! rebuilding the in-memory index and the affinity table from what is on disk, and queueing
//! the deletion of what expired while the file was closed.

use std::fmt;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, mpsc};

use context_relay_core::{HandoffKey, HandoffRecord, HandoffSlot};
use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition,
};

use super::writer::{Op, Reopen, run_writer};
use super::{DbCell, Inner, RedbStore, RedbStoreBuilder};
use crate::affinity::{self, AffinityMap, Stored};
use crate::clock::{after_ms, now_ms};
use crate::index::{FastMap, Meta};
use crate::{StoreError, report_corrupt};

pub(super) const HANDOFFS: TableDefinition<'static, (&str, &str, &str), &[u8]> =
    TableDefinition::new("handoffs");
pub(super) const MODEL_HANDOFFS: TableDefinition<'static, (&str, &str, &str), &[u8]> =
    TableDefinition::new("model_switch_handoffs");
pub(super) const AFFINITY: TableDefinition<'static, (&str, &str, &str), &[u8]> =
    TableDefinition::new("affinity_by_combo");
pub(super) const SECRETS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("secrets");

/// First byte of every stored value: bump it when the header changes.
pub(super) const LAYOUT: u8 = 1;
pub(super) const HEADER_LEN: usize = 17;

/// The table of `slot`'s records.
pub(super) fn handoffs(
    slot: HandoffSlot,
) -> TableDefinition<'static, (&'static str, &'static str, &'static str), &'static [u8]> {
    match slot {
        HandoffSlot::Account => HANDOFFS,
        HandoffSlot::Model => MODEL_HANDOFFS,
    }
}

/// Whether the file at `path` holds nothing but zeros in its first page (a file created and
/// never written; redb writes its header there first).
fn never_written(path: &Path) -> bool {
    use std::io::Read;
    let mut page = [0u8; 4096];
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    match file.read(&mut page) {
        Ok(n) => page[..n].iter().all(|b| *b == 0),
        Err(_) => false,
    }
}

/// Opens (or creates) the redb file at `path`.
pub(super) fn open_database(path: &Path, cache_size: usize) -> Result<Database, StoreError> {
    let mut builder = Database::builder();
    builder.set_cache_size(cache_size);
    builder.create(path).map_err(|e| open_error(path, e))
}

impl RedbStore {
    pub(super) fn open_with(opts: RedbStoreBuilder) -> Result<Self, StoreError> {
        let path = opts.path.clone();
        let existed = std::fs::symlink_metadata(&path).is_ok();
        let opened = Self::open_caught(opts);
        // A file this open created and could not finish (a full disk) holds nothing: left
        // behind, it would be refused as damaged at every later start. Only a file that never
        // got its header: another process that opened the same new path (and holds its lock)
        // has written one.
        if opened.is_err() && !existed && never_written(&path) {
            let _ = std::fs::remove_file(&path);
        }
        opened
    }

    fn open_caught(opts: RedbStoreBuilder) -> Result<Self, StoreError> {
        let path = opts.path.clone();
        // redb checks what it reads and panics on some damaged pages: a damaged file must be
        // an error that names it, not a crash at every start.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Self::open_checked(opts))) {
            Ok(opened) => opened,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a check failed");
                Err(StoreError::Open {
                    path,
                    reason: damaged(what),
                })
            }
        }
    }

    fn open_checked(opts: RedbStoreBuilder) -> Result<Self, StoreError> {
        let path = opts.path;
        let db = open_database(&path, opts.cache_size)?;
        let fail = |what: &str, e: &dyn fmt::Display| StoreError::Open {
            path: path.clone(),
            reason: format!("{what}: {e}"),
        };
        // Reading what the file holds fails only on a damaged file.
        let unreadable_file = |what: &str, e: &dyn fmt::Display| StoreError::Open {
            path: path.clone(),
            reason: format!("{what}: {}", damaged(&e.to_string())),
        };
        // Create every table up front: reads then never meet a missing table, and a foreign redb
        // file with tables of other types is refused here rather than on first use.
        let w = db
            .begin_write()
            .map_err(|e| unreadable_file("cannot start a transaction", &e))?;
        {
            for slot in HandoffSlot::ALL {
                w.open_table(handoffs(slot))
                    .map_err(|e| fail("not a context-relay store", &e))?;
            }
            w.open_table(AFFINITY)
                .map_err(|e| fail("not a context-relay store", &e))?;
        }
        w.commit()
            .map_err(|e| unreadable_file("cannot commit", &e))?;

        let now = now_ms(&*opts.clock);
        let index: [FastMap<HandoffKey, Meta>; 2] = Default::default();
        let affinity = AffinityMap::new(opts.affinity_entries);
        let mut corrupt = 0u64;
        let mut max_version = 0u64;
        let mut expired = Vec::new();
        let mut stale = Vec::new();
        {
            let r = db
                .begin_read()
                .map_err(|e| unreadable_file("cannot start a read", &e))?;
            let mut interner = Interner::default();
            for slot in HandoffSlot::ALL {
                let def = handoffs(slot);
                let table = r
                    .open_table(def)
                    .map_err(|e| unreadable_file(&format!("cannot open table {def}"), &e))?;
                let unreadable =
                    |e: &dyn fmt::Display| unreadable_file(&format!("cannot read table {def}"), e);
                for item in table.iter().map_err(|e| unreadable(&e))? {
                    let (k, v) = item.map_err(|e| unreadable(&e))?;
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
                                index[slot.index()].insert(key, Meta::new(version, expires_ms));
                            } else {
                                expired.push((slot, key));
                            }
                        }
                        Err(found) => {
                            corrupt += 1;
                            report_corrupt("redb", &key, &found);
                        }
                    }
                }
            }
            let table = r
                .open_table(AFFINITY)
                .map_err(|e| unreadable_file("cannot open table affinity", &e))?;
            for item in table
                .iter()
                .map_err(|e| unreadable_file("cannot read table affinity", &e))?
            {
                let (k, v) = item.map_err(|e| unreadable_file("cannot read table affinity", &e))?;
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

        let db = Arc::new(DbCell::new(db));
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
        let reopen = Reopen {
            cell: Arc::clone(&db),
            path: path.clone(),
            cache_size: opts.cache_size,
            first_backoff: opts.reopen_backoff,
        };
        let max_batch = opts.max_batch;
        let writer = std::thread::Builder::new()
            .name("context-relay-store-redb".into())
            .spawn(move || run_writer(&reopen, &rx, max_batch))
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
}

pub(super) fn encode(
    version: u64,
    expires_ms: u64,
    record: &HandoffRecord,
) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(HEADER_LEN + 512);
    out.push(LAYOUT);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&expires_ms.to_le_bytes());
    serde_json::to_writer(&mut out, record)?;
    Ok(out)
}

/// `(version, expires_ms, json)` of a stored value, or what was found instead.
pub(super) fn decode_header(bytes: &[u8]) -> Result<(u64, u64, &[u8]), String> {
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

/// What to do about a damaged file.
const MOVE_ASIDE: &str = "move it aside (keep it for inspection) and start again: a new, empty store is created in its place and sessions start over without their pending handoffs";

/// The reason of a damaged file.
fn damaged(what: &str) -> String {
    format!("not a redb file, or a damaged one ({what}); {MOVE_ASIDE}")
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
            format!("not a redb file, or a damaged one ({io}); {MOVE_ASIDE}")
        }
        DatabaseError::Storage(StorageError::Corrupted(what)) => damaged(what),
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
