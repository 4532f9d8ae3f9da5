//! `wait_for_replicas`: a handoff write returns only once the replica acknowledged it, so a
//! failover right after the write cannot lose it; a write the replicas do not acknowledge in
//! time is kept on the master and returns all the same.
#![cfg(feature = "redis")]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{record, unique_prefix};
use context_relay_core::HandoffKey;
use context_relay_store::{HandoffStore, RedisStore};
use context_relay_testkit::redis_server::spawn_on_free_port;

const HOUR: Duration = Duration::from_secs(3600);

struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new(std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into()))
        .args(["-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A field of `INFO replication`.
fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
        .map(str::to_owned)
}

/// The master's replication offset, and the last offset its replica acknowledged.
fn offsets(master: u16) -> (u64, u64) {
    let info = cli(master, &["info", "replication"]);
    let own = field(&info, "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // slave0:ip=…,port=…,state=online,offset=N,lag=0
    let acked = field(&info, "slave0")
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("offset=").map(str::to_owned))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (own, acked)
}

/// A master and its replica, in sync.
fn pair() -> (Node, Node, u16, u16) {
    let (m, master) = spawn_on_free_port(|port| {
        ["--port", port, "--bind", "127.0.0.1"]
            .map(String::from)
            .to_vec()
    });
    let master = Node(master);
    let ms = m.to_string();
    let (r, replica) = spawn_on_free_port(|port| {
        [
            "--port",
            port,
            "--bind",
            "127.0.0.1",
            "--replicaof",
            "127.0.0.1",
            &ms,
            "--enable-debug-command",
            "yes",
        ]
        .map(String::from)
        .to_vec()
    });
    let replica = Node(replica);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !field(&cli(m, &["info", "replication"]), "slave0").is_some_and(|s| s.contains("online"))
    {
        assert!(Instant::now() < deadline, "the replica never came online");
        std::thread::sleep(Duration::from_millis(20));
    }
    (master, replica, m, r)
}

async fn store(port: u16, wait: Option<Duration>) -> RedisStore {
    let mut b = RedisStore::builder(format!("redis://127.0.0.1:{port}/")).prefix(unique_prefix());
    if let Some(t) = wait {
        b = b.wait_for_replicas(1, t);
    }
    b.connect().await.unwrap()
}

/// The replica stalls (`DEBUG SLEEP`) while a handoff is written: with the wait, the write
/// returns only once the replica acknowledged it; without, at once, the replica behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_returns_once_the_replica_acknowledged_it() {
    let (_master, _replica, m, r) = pair();
    for wait in [Some(Duration::from_secs(5)), None] {
        let store = store(m, wait).await;
        // Reconnected and idle: the replica is level with the master.
        let stall = std::thread::spawn(move || cli(r, &["debug", "sleep", "0.5"]));
        std::thread::sleep(Duration::from_millis(100));
        let key = HandoffKey::new("acme", "s1", "codex-relay");
        // Where the write starts in the replication stream.
        let (before, _) = offsets(m);
        store
            .upsert(record(
                &key,
                "decided: keep the API",
                std::time::SystemTime::now(),
                HOUR,
            ))
            .await
            .unwrap();
        // (The master's own offset also counts the `REPLCONF GETACK` that `WAIT` sends.)
        let (_, acked) = offsets(m);
        if wait.is_some() {
            assert!(
                acked > before,
                "returned before the replica had it: {acked} ≤ {before}"
            );
        } else {
            assert!(
                acked <= before,
                "the replica kept up although it slept: {acked} > {before}"
            );
        }
        stall.join().unwrap();
    }
}

/// Fewer replicas than asked for: the write waits its timeout, then returns, the handoff kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_no_replica_acknowledges_is_kept() {
    let (_master, _replica, m, _) = pair();
    let store = RedisStore::builder(format!("redis://127.0.0.1:{m}/"))
        .prefix(unique_prefix())
        .wait_for_replicas(2, Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let key = HandoffKey::new("acme", "s2", "codex-relay");
    let r = record(
        &key,
        "decided: keep the API",
        std::time::SystemTime::now(),
        HOUR,
    );
    let started = Instant::now();
    store.upsert(r.clone()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(store.get(&key).await.unwrap(), Some(r));
}

/// A write waiting for a replica that does not answer holds its own connection, not the one
/// the request path reads on; and a wait longer than the store's call timeout runs to its end
/// and keeps the write (no error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_write_blocks_no_request_path_call() {
    let (_master, _replica, m, _) = pair();
    let store = std::sync::Arc::new(
        RedisStore::builder(format!("redis://127.0.0.1:{m}/"))
            .prefix(unique_prefix())
            // Two replicas for a master that has one: every wait runs to its end, longer
            // than the store's 2 s limit of a call.
            .wait_for_replicas(2, Duration::from_millis(2_500))
            .connect()
            .await
            .unwrap(),
    );
    let key = HandoffKey::new("acme", "s3", "codex-relay");
    let r = record(&key, "decided", std::time::SystemTime::now(), HOUR);
    let writer = {
        let (store, r) = (std::sync::Arc::clone(&store), r.clone());
        tokio::spawn(async move { store.upsert(r).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Mid-wait, calls with the request path's short limit are answered.
    for _ in 0..5 {
        store.affinity(&key).await.expect("not blocked by the wait");
        assert!(store.contains(&key).await.expect("not blocked by the wait"));
    }
    writer
        .await
        .unwrap()
        .expect("a write kept on the master is no error");
    assert_eq!(store.get(&key).await.unwrap(), Some(r));
}

/// Several writes that each wait their whole timeout take turns on their connection: none
/// spends its time limit queueing behind another's `WAIT` (which failed it and opened the
/// breaker), and every one is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_writes_take_turns_and_all_succeed() {
    let (_master, _replica, m, _) = pair();
    let store = std::sync::Arc::new(
        RedisStore::builder(format!("redis://127.0.0.1:{m}/"))
            .prefix(unique_prefix())
            // Two replicas for a master that has one: each write waits 1.5 s, three of them
            // 4.5 s, well past the 2 s limit of a call.
            .wait_for_replicas(2, Duration::from_millis(1_500))
            .connect()
            .await
            .unwrap(),
    );
    let writes: Vec<_> = (0..3)
        .map(|i| {
            let store = std::sync::Arc::clone(&store);
            tokio::spawn(async move {
                let key = HandoffKey::new("acme", format!("w{i}"), "codex-relay");
                store
                    .upsert(record(&key, "decided", std::time::SystemTime::now(), HOUR))
                    .await
            })
        })
        .collect();
    for w in writes {
        w.await
            .unwrap()
            .expect("a waited write is kept, not failed");
    }
    assert!(!store.is_unavailable(), "no breaker opened");
    for i in 0..3 {
        let key = HandoffKey::new("acme", format!("w{i}"), "codex-relay");
        assert!(store.get(&key).await.unwrap().is_some());
    }
}
