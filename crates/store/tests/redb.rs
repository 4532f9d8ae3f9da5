//! What only the redb backend has to show: durability across SIGKILL, the rebuilt index, open
//! errors that say what is wrong, and unreadable records skipped rather than fatal.

mod common;

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::record;
use context_relay_core::portable::ForeignSet;
use context_relay_core::{HandoffKey, HandoffKind, HandoffSlot};
use context_relay_store::{
    Affinity, Clock, HandoffStore, ManualClock, RedbStore, StoreError, spawn_purger,
};

const HOUR: Duration = Duration::from_secs(3600);
const CHILD_ENV: &str = "CONTEXT_RELAY_STORE_TEST_CHILD";
const WRITERS: usize = 4;

fn key(writer: usize, i: usize) -> HandoffKey {
    HandoffKey::new("acme", format!("w{writer}-{i}"), "codex-relay")
}

/// Child half of `acknowledged_upserts_survive_sigkill`: a no-op unless the parent set
/// `CHILD_ENV`. Upserts forever from several tasks (so group commits really batch) and prints
/// `ack <writer> <i>` after each upsert returned.
#[test]
fn child_upserts_until_killed() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store = Arc::new(RedbStore::open(&path).unwrap());
        println!("ready");
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for i in 0.. {
                        let r = record(&key(w, i), "durable", std::time::SystemTime::now(), HOUR);
                        store.upsert(r).await.unwrap();
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "ack {w} {i}").unwrap();
                        out.flush().unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn acknowledged_upserts_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handoffs.redb");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_upserts_until_killed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acked = Vec::new();
    let mut locked_checked = false;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.ends_with("ready") && !locked_checked {
            // While the child holds the file, a second opener is told it is locked.
            let err = RedbStore::open(&path).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, StoreError::Open { .. }), "{msg}");
            assert!(
                msg.contains("locked") && msg.contains(&*path.to_string_lossy()),
                "{msg}"
            );
            locked_checked = true;
        }
        if let Some(ack) = parse_ack(&line) {
            acked.push(ack);
            if acked.len() >= 300 {
                break;
            }
        }
    }
    assert!(locked_checked, "the child never got ready");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Acks already written before the kill count too.
    acked.extend(lines.map_while(Result::ok).filter_map(|l| parse_ack(&l)));

    let store = RedbStore::open(&path).expect("a SIGKILLed store reopens cleanly");
    assert_eq!(store.corrupt_records(), 0);
    assert!(store.indexed() >= acked.len());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for &(w, i) in &acked {
        let k = key(w, i);
        assert!(store.may_contain(&k), "index lost acknowledged {k}");
        let r = rt.block_on(store.get(&k)).unwrap();
        assert!(
            r.is_some_and(|r| r.handoff.summary == "durable"),
            "disk lost acknowledged {k}"
        );
    }
}

fn parse_ack(line: &str) -> Option<(usize, usize)> {
    let mut parts = line.strip_prefix("ack ")?.split(' ');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[tokio::test]
async fn reopen_rebuilds_index_and_affinity_and_drops_what_expired_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.redb");
    let clock = Arc::new(ManualClock::starting_now());
    let live = key(0, 1);
    let short = key(0, 2);
    {
        let store = RedbStore::builder(&path)
            .clock(clock.clone())
            .open()
            .unwrap();
        store
            .upsert(record(&live, "live", clock.now(), HOUR))
            .await
            .unwrap();
        store
            .upsert(record(
                &short,
                "short",
                clock.now(),
                Duration::from_secs(10),
            ))
            .await
            .unwrap();
        store
            .set_affinity(
                &HandoffKey::new("acme", "w0-1", "combo"),
                Affinity::new("codex", "alice").with_foreign(
                    ForeignSet::from_digests([1, 2]),
                    clock.now() + Duration::from_secs(3600),
                ),
            )
            .await
            .unwrap();
        let claim = store.claim(&live, HOUR).await.unwrap();
        assert!(claim.is_some());
    }
    clock.advance(Duration::from_secs(11));
    let store = RedbStore::builder(&path)
        .clock(clock.clone())
        .open()
        .unwrap();
    assert_eq!(store.indexed(), 1, "the expired record is not indexed");
    assert!(store.may_contain(&live));
    assert!(!store.may_contain(&short));
    let read = store
        .cached_affinity(&HandoffKey::new("acme", "w0-1", "combo"))
        .expect("the table is in memory")
        .expect("kept across the restart");
    assert!(read.is("codex", "alice"));
    assert_eq!(read.foreign.digests(), [1, 2]);
    // Leases are in memory only: a restart frees them.
    assert!(store.claim(&live, HOUR).await.unwrap().is_some());
    drop(store);

    // The expired record was deleted from the file at reopen, not just left unindexed.
    let raw = redb::Database::open(&path).unwrap();
    let r = redb::ReadableDatabase::begin_read(&raw).unwrap();
    let t = r.open_table(HANDOFFS).unwrap();
    assert!(
        redb::ReadableTable::get(&t, ("acme", "w0-2", "codex-relay"))
            .unwrap()
            .is_none()
    );
    assert!(
        redb::ReadableTable::get(&t, ("acme", "w0-1", "codex-relay"))
            .unwrap()
            .is_some()
    );
}

const HANDOFFS: redb::TableDefinition<'static, (&str, &str, &str), &[u8]> =
    redb::TableDefinition::new("handoffs");

#[test]
fn foreign_file_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-store.redb");
    std::fs::write(&path, "user,email\nalice,a@example.com\n".repeat(200)).unwrap();
    let err = RedbStore::open(&path).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{msg}");
    assert!(msg.contains(&*path.to_string_lossy()), "{msg}");
    assert!(msg.contains("not a redb file"), "{msg}");
}

#[test]
fn redb_file_of_another_program_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<'_, u64, u64> = redb::TableDefinition::new("handoffs");
            let mut t = w.open_table(def).unwrap();
            t.insert(1, 2).unwrap();
        }
        w.commit().unwrap();
    }
    let msg = RedbStore::open(&path).unwrap_err().to_string();
    assert!(msg.contains("not a context-relay store"), "{msg}");
}

#[test]
fn directory_path_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let msg = RedbStore::open(dir.path()).unwrap_err().to_string();
    assert!(msg.contains(&*dir.path().to_string_lossy()), "{msg}");
}

#[tokio::test]
async fn unreadable_records_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.redb");
    let now = std::time::SystemTime::now();
    let good = key(0, 0);
    let bad_json = key(0, 1);
    let elsewhere = key(0, 2);
    {
        let store = RedbStore::open(&path).unwrap();
        store
            .upsert(record(&good, "good", now, HOUR))
            .await
            .unwrap();
    }
    {
        let db = redb::Database::open(&path).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(HANDOFFS).unwrap();
            let far = u64::MAX.to_le_bytes();
            let mut header = vec![1u8];
            header.extend_from_slice(&7u64.to_le_bytes());
            header.extend_from_slice(&far);
            // A valid header followed by JSON that is not a record.
            let mut v = header.clone();
            v.extend_from_slice(br#"{"summary": 3"#);
            t.insert(("acme", "w0-1", "codex-relay"), v.as_slice())
                .unwrap();
            // A valid record filed under another key (and tenant): must not leak.
            let mut v = header.clone();
            let other = record(&HandoffKey::new("globex", "x", "c"), "theirs", now, HOUR);
            v.extend_from_slice(&serde_json::to_vec(&other).unwrap());
            t.insert(("acme", "w0-2", "codex-relay"), v.as_slice())
                .unwrap();
            // Too short for a header at all.
            t.insert(("acme", "w0-3", "codex-relay"), [1u8, 2, 3].as_slice())
                .unwrap();
        }
        w.commit().unwrap();
    }
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(
        store.corrupt_records(),
        1,
        "the headerless record is skipped at open"
    );
    assert!(
        store.may_contain(&bad_json),
        "headers alone are read at open"
    );
    assert_eq!(store.get(&bad_json).await.unwrap(), None);
    assert_eq!(store.corrupt_records(), 2);
    assert!(
        !store.may_contain(&bad_json),
        "an unreadable record leaves the index"
    );
    assert!(store.claim(&elsewhere, HOUR).await.unwrap().is_none());
    assert_eq!(store.corrupt_records(), 3);
    let listed = store.list(None, None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key(), good);
}

#[tokio::test]
async fn one_commit_per_write_stores_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        RedbStore::builder(dir.path().join("h.redb"))
            .max_batch(1)
            .open()
            .unwrap(),
    );
    let now = std::time::SystemTime::now();
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.upsert(record(&key(1, i), "x", now, HOUR)).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(store.list(None, None).await.unwrap().len(), 50);
}

#[tokio::test(start_paused = true)]
async fn purger_runs_on_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::starting_now());
    let store = RedbStore::builder(dir.path().join("h.redb"))
        .clock(clock.clone())
        .open()
        .unwrap();
    let k = key(2, 0);
    store
        .upsert(record(&k, "x", clock.now(), Duration::from_secs(60)))
        .await
        .unwrap();
    let store: Arc<dyn HandoffStore> = Arc::new(store);
    let purger = spawn_purger(Arc::clone(&store), Duration::from_secs(600));
    let mut runs = purger.runs();
    clock.advance(Duration::from_secs(120));
    assert!(store.list(None, None).await.unwrap().is_empty());
    // Paused time jumps straight to the next tick.
    runs.changed().await.unwrap();
    assert_eq!(*runs.borrow(), 1);
    assert_eq!(
        store.purge_expired().await.unwrap(),
        0,
        "the purger already removed it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_affinities_are_read_back_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::builder(dir.path().join("relay.redb"))
        .affinity_cache_entries(8)
        .open()
        .unwrap();
    let k = |i: usize| HandoffKey::new("acme", format!("s{i}").as_str(), "combo");
    for i in 0..100 {
        store
            .set_affinity(&k(i), Affinity::new("codex", format!("acct-{i}").as_str()))
            .await
            .unwrap();
    }
    // The oldest entries left memory: the cache no longer knows, the disk does.
    assert_eq!(store.cached_affinity(&k(0)), None);
    for i in 0..100 {
        let a = store.affinity(&k(i)).await.unwrap().expect("on disk");
        assert!(a.is("codex", &format!("acct-{i}")));
    }
    assert_eq!(
        store
            .affinity(&HandoffKey::new("acme", "never", "combo"))
            .await
            .unwrap(),
        None
    );
}

const AFFINITY: redb::TableDefinition<'static, (&str, &str, &str), &[u8]> =
    redb::TableDefinition::new("affinity_by_combo");

#[tokio::test]
async fn reopen_keeps_both_slots_and_the_serving_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.redb");
    let clock = Arc::new(ManualClock::starting_now());
    let k = key(0, 1);
    let account = record(&k, "account", clock.now(), HOUR);
    let mut model = record(&k, "model", clock.now(), HOUR);
    model.kind = HandoffKind::ModelSwitch;
    let served = Affinity::new("anthropic", "bob").with_model("anthropic/claude-sonnet-4-5");
    {
        let store = RedbStore::builder(&path)
            .clock(clock.clone())
            .open()
            .unwrap();
        store.upsert(account.clone()).await.unwrap();
        store.upsert(model.clone()).await.unwrap();
        store.set_affinity(&k, served.clone()).await.unwrap();
    }
    let store = RedbStore::builder(&path)
        .clock(clock.clone())
        .open()
        .unwrap();
    assert_eq!(store.indexed(), 2, "one record per slot");
    assert!(store.may_contain(&k));
    assert!(store.may_contain_in(&k, HandoffSlot::Model));
    assert_eq!(store.get(&k).await.unwrap(), Some(account));
    assert_eq!(
        store.get_in(&k, HandoffSlot::Model).await.unwrap(),
        Some(model.clone())
    );
    assert_eq!(store.cached_affinity(&k), Some(Some(served)));
    let claim = store.claim_in(&k, HandoffSlot::Model, HOUR).await.unwrap();
    assert!(store.complete(&claim.expect("live")).await.unwrap());
    drop(store);

    // On disk, the model handoff had its own table, and only it was deleted.
    let raw = redb::Database::open(&path).unwrap();
    let r = redb::ReadableDatabase::begin_read(&raw).unwrap();
    let t = r.open_table(HANDOFFS).unwrap();
    let stored = redb::ReadableTable::get(&t, ("acme", "w0-1", "codex-relay")).unwrap();
    assert!(stored.is_some(), "the account handoff is untouched");
    let json = String::from_utf8_lossy(&stored.unwrap().value()[17..]).into_owned();
    assert!(json.contains(r#""kind":"generated""#), "{json}");
}

#[tokio::test]
async fn an_affinity_written_by_the_previous_layout_loads_without_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.redb");
    let now = context_relay_core::time::to_unix_millis(std::time::SystemTime::now());
    {
        // The file as the code before model-switch handoffs left it: its two tables, an affinity
        // as it wrote them.
        let db = redb::Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        {
            w.open_table(HANDOFFS).unwrap();
            let mut t = w.open_table(AFFINITY).unwrap();
            let old = format!(
                r#"{{"provider":"codex","account":"acct-A","written_at":{now},"foreign":[5],"foreign_until":{now}}}"#
            );
            t.insert(("acme", "s1", "combo"), old.as_bytes()).unwrap();
        }
        w.commit().unwrap();
    }
    let store = RedbStore::open(&path).unwrap();
    let k = HandoffKey::new("acme", "s1", "combo");
    let a = store.affinity(&k).await.unwrap().expect("loaded");
    assert!(a.is("codex", "acct-A"));
    assert_eq!(a.model(), None);
    assert_eq!(a.foreign.digests(), [5]);
    assert_eq!(store.get_in(&k, HandoffSlot::Model).await.unwrap(), None);
    // Recording a model over it is a change, kept across a reopen.
    let with = a.clone().with_model("codex/gpt-5.5");
    store.set_affinity(&k, with.clone()).await.unwrap();
    drop(store);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.affinity(&k).await.unwrap(), Some(with));
}
