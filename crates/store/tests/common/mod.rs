//! Test harness shared by the store's integration tests: backends on a manual clock and
//! records (the throwaway redis-server and cluster are the test kit's).
#![allow(dead_code, unreachable_pub)]

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
use context_relay_store::{HandoffStore, ManualClock, MemoryStore, RedbStore};
#[cfg(feature = "redis")]
use context_relay_testkit::redis_cluster::RedisCluster;
#[cfg(feature = "redis")]
use context_relay_testkit::redis_server::RedisServer;

/// `mod $backend { #[tokio::test] async fn $case() { cases::$case(&$make().await) } … }`: the
/// cases of the including file's `cases` module against one backend.
#[allow(unused_macros)]
macro_rules! backend {
    ($backend:ident, $make:path, [$($case:ident),* $(,)?]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let h = $make().await;
                    super::cases::$case(&h).await;
                }
            )*
        }
    };
}

/// The cases against every backend (redis with the `redis` feature).
#[allow(unused_macros)]
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        backend!(memory, crate::common::memory, [$($case),*]);
        backend!(redb, crate::common::redb, [$($case),*]);
        #[cfg(feature = "redis")]
        backend!(redis, crate::common::redis, [$($case),*]);
        #[cfg(feature = "redis")]
        cluster!([$($case),*]);
    };
}

/// Every case against one three-master Redis Cluster, each under a key prefix of its own
/// (starting a cluster per case would cost seconds each).
#[allow(unused_macros)]
macro_rules! cluster {
    ([$($case:ident),* $(,)?]) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn redis_cluster() {
            let cluster = context_relay_testkit::redis_cluster::RedisCluster::start();
            $(
                eprintln!("redis cluster: {}", stringify!($case));
                let h = crate::common::redis_cluster(&cluster).await;
                crate::cases::$case(&h).await;
            )*
        }
    };
}

/// A store under test, its clock, and whatever must live as long as it (a temp dir, a server).
pub struct Harness {
    pub store: Arc<dyn HandoffStore>,
    pub clock: Arc<ManualClock>,
    pub keep: Vec<Box<dyn Any + Send>>,
}

impl Harness {
    pub fn now(&self) -> SystemTime {
        use context_relay_store::Clock;
        self.clock.now()
    }

    /// A record for `(tenant, session, combo)` written now, living `ttl`.
    pub fn record(&self, key: &HandoffKey, summary: &str, ttl: Duration) -> HandoffRecord {
        record(key, summary, self.now(), ttl)
    }
}

pub fn record(key: &HandoffKey, summary: &str, now: SystemTime, ttl: Duration) -> HandoffRecord {
    HandoffRecord {
        version: 1,
        kind: Default::default(),
        tenant: key.tenant.clone(),
        session: key.session.clone(),
        combo: key.combo.clone(),
        from_provider: "codex".into(),
        from_account: "alice".into(),
        handoff: Handoff {
            summary: summary.into(),
            key_decisions: vec!["keep the parser streaming".into()],
            task_progress: "parser done, lexer next".into(),
            active_entities: vec!["src/parse.rs".into()],
        },
        message_count: 42,
        conversation: None,
        compaction: false,
        model: "gpt-5-mini".into(),
        threshold: 0.85,
        // Stored times have millisecond resolution: keep test values exact.
        generated_at: round_ms(now),
        expires_at: round_ms(now + ttl),
    }
}

fn round_ms(t: SystemTime) -> SystemTime {
    use context_relay_core::time::{from_unix_millis, to_unix_millis};
    from_unix_millis(to_unix_millis(t))
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::starting_now())
}

pub async fn memory() -> Harness {
    let clock = clock();
    Harness {
        store: Arc::new(MemoryStore::with_clock(clock.clone())),
        clock,
        keep: Vec::new(),
    }
}

pub async fn redb() -> Harness {
    let clock = clock();
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::builder(dir.path().join("handoffs.redb"))
        .clock(clock.clone())
        .open()
        .unwrap();
    Harness {
        store: Arc::new(store),
        clock,
        keep: vec![Box::new(dir)],
    }
}

#[cfg(feature = "redis")]
pub async fn redis() -> Harness {
    let server = RedisServer::start();
    let mut h = redis_at(&server.url, false).await;
    h.keep.push(Box::new(server));
    h
}

/// A store on `cluster` under a prefix of its own (many stores share one cluster).
#[cfg(feature = "redis")]
pub async fn redis_cluster(cluster: &RedisCluster) -> Harness {
    redis_at(&cluster.url, true).await
}

#[cfg(feature = "redis")]
async fn redis_at(url: &str, cluster: bool) -> Harness {
    let clock = clock();
    let store = context_relay_store::RedisStore::builder(url)
        .cluster(cluster)
        .prefix(unique_prefix())
        .clock(clock.clone())
        // Semantics, not latency: a test machine busy with builds must not time calls out.
        .request_timeout(context_relay_store::DEFAULT_REDIS_TIMEOUT)
        .connect()
        .await
        .unwrap();
    Harness {
        store: Arc::new(store),
        clock,
        keep: Vec::new(),
    }
}

/// A key prefix no other test (or run, on a shared `REDIS_URL`) uses.
pub fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "cr-test:{}:{nanos}:{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
