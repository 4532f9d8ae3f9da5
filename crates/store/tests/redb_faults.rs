//! The redb store against a broken disk: a file damaged in the middle is a clear open error,
//! not a panic, and a store whose disk filled up recovers once there is room again, without a
//! restart.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::record;
use context_relay_core::HandoffKey;
use context_relay_store::{HandoffStore, RedbStore, StoreError};

const HOUR: Duration = Duration::from_secs(3600);

fn rec(key: &HandoffKey, summary: &str) -> context_relay_core::HandoffRecord {
    record(key, summary, std::time::SystemTime::now(), HOUR)
}

fn key(i: usize) -> HandoffKey {
    HandoffKey::new("acme", format!("s{i}"), "codex-relay")
}

#[tokio::test]
async fn a_file_damaged_mid_file_is_a_clear_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handoffs.redb");
    {
        let store = RedbStore::open(&path).unwrap();
        for i in 0..2000 {
            store.upsert(rec(&key(i), "s")).await.unwrap();
        }
    }
    let len = std::fs::metadata(&path).unwrap().len();
    let mut damaged = 0;
    // Garbage over a few pages in the middle, then over more, until the open notices: redb
    // checks what it reads, and where the damage falls decides what it reads.
    for (at, size) in [
        (len / 2, 4096usize),
        (len / 4, 65536),
        (4096, (len / 2) as usize),
    ] {
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(&vec![0xA5; size]).unwrap();
        file.sync_all().unwrap();
        drop(file);
        match RedbStore::open(&path) {
            Ok(store) => drop(store),
            Err(err) => {
                let msg = err.to_string();
                assert!(matches!(err, StoreError::Open { .. }), "{msg}");
                assert!(msg.contains(&*path.to_string_lossy()), "{msg}");
                assert!(msg.contains("damaged"), "{msg}");
                assert!(msg.contains("move it aside"), "{msg}");
                damaged += 1;
                break;
            }
        }
    }
    assert_eq!(damaged, 1, "no damage was ever noticed");
}

/// A tmpfs of `size` mounted at `dir`, or `None` (said on stderr) where this process may not
/// mount one: the full-disk cases need it.
fn small_filesystem(dir: &Path, size: &str) -> Option<Mount> {
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "cannot mount a small filesystem here (not root?): the full-disk case is not run"
        );
    }
    ok.then(|| Mount(dir.to_path_buf()))
}

/// Fills the filesystem of `dir`, then writes records big enough to need new pages until one
/// fails, as a store meets a disk that fills up; returns the filler's path.
async fn break_on_a_full_disk(store: &RedbStore, dir: &Path) -> std::path::PathBuf {
    let filler = fill(dir);
    let mut failed = false;
    for i in 1..200 {
        if store
            .upsert(rec(&key(i), &"x".repeat(32 << 10)))
            .await
            .is_err()
        {
            failed = true;
            break;
        }
    }
    assert!(failed, "no write failed on a full disk");
    filler
}

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the filesystem of `dir` with a file until a write fails; returns the file's path.
fn fill(dir: &Path) -> std::path::PathBuf {
    let filler = dir.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let block = vec![0u8; 64 << 10];
    // Bounded: a tmpfs of a few MiB fills in a few dozen blocks.
    for _ in 0..100_000 {
        if file
            .write_all(&block)
            .and_then(|()| file.sync_all())
            .is_err()
        {
            return filler;
        }
    }
    panic!("the filesystem never filled up");
}

#[tokio::test]
async fn a_full_disk_breaks_writes_until_there_is_room_again() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = small_filesystem(dir.path(), "8m") else {
        return;
    };
    let path = dir.path().join("handoffs.redb");
    // Long enough to see the broken state, short enough to wait for the recovery.
    let store = RedbStore::builder(&path)
        .reopen_backoff(Duration::from_millis(300))
        .open()
        .unwrap();
    store.upsert(rec(&key(0), "s")).await.unwrap();
    assert!(store.health().is_ok());

    let filler = break_on_a_full_disk(&store, dir.path()).await;
    assert!(store.health().is_err(), "a broken store must say so");
    // What was committed before is still readable or reported, never a panic.
    let _ = store.get(&key(0)).await;

    // Room again: the store reopens its file by itself, without a restart.
    std::fs::remove_file(&filler).unwrap();
    tokio::time::timeout(Duration::from_secs(30), store.recovered())
        .await
        .expect("the store never recovered");
    store.upsert(rec(&key(1000), "s")).await.unwrap();
    assert!(store.health().is_ok());
    assert!(store.get(&key(0)).await.unwrap().is_some());
    drop(store);
}

/// A disk that stays full: the store stays broken (an empty commit still succeeds there, so
/// it is no proof that writes can resume), and each later write is answered at once.
#[tokio::test]
async fn a_disk_that_stays_full_keeps_the_store_broken() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = small_filesystem(dir.path(), "8m") else {
        return;
    };
    let path = dir.path().join("handoffs.redb");
    let store = RedbStore::builder(&path)
        .reopen_backoff(Duration::from_millis(100))
        .open()
        .unwrap();
    store.upsert(rec(&key(0), "s")).await.unwrap();
    let _filler = break_on_a_full_disk(&store, dir.path()).await;
    // Several reopen attempts later (100, 200, 400 ms…), the disk still full.
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            store.health().is_err(),
            "the store said it recovered on a disk still full"
        );
        // A write meanwhile is refused, never a panic.
        let _ = store.upsert(rec(&key(500), &"x".repeat(32 << 10))).await;
    }
    drop(store);
}

/// A store created on a disk that is already full fails to open, and leaves no file behind:
/// once there is room, the next start creates it (a half-made file would be refused as
/// damaged at every start).
#[tokio::test]
async fn a_store_created_on_a_full_disk_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = small_filesystem(dir.path(), "300k") else {
        return;
    };
    let path = dir.path().join("handoffs.redb");
    let filler = fill(dir.path());
    assert!(RedbStore::open(&path).is_err(), "opened on a full disk");
    assert!(!path.exists(), "a half-made store file was left behind");
    std::fs::remove_file(&filler).unwrap();
    let store = RedbStore::open(&path).expect("opens once there is room");
    store.upsert(rec(&key(1), "s")).await.unwrap();
}
