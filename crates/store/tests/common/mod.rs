//! Test harness shared by the store's integration tests: backends on a manual clock, records,
//! and a throwaway redis-server.
#![allow(dead_code, unreachable_pub)]

use std::any::Any;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
use context_relay_store::{HandoffStore, ManualClock, MemoryStore, RedbStore};

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
    let clock = clock();
    let server = RedisServer::start();
    let store = context_relay_store::RedisStore::builder(server.url.clone())
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
        keep: vec![Box::new(server)],
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

/// `REDIS_URL` when set; otherwise a redis-server of our own on a free loopback port, killed on
/// drop. Panics (never skips) when neither is possible: the suite must run against Redis.
pub struct RedisServer {
    pub url: String,
    child: Option<Child>,
}

impl RedisServer {
    pub fn start() -> Self {
        if let Ok(url) = std::env::var("REDIS_URL")
            && !url.is_empty()
        {
            return Self { url, child: None };
        }
        Self::start_own()
    }

    /// Always a server of our own (for tests that kill it).
    pub fn start_own() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let mut child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "notice"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "REDIS_URL is not set and `{bin}` cannot be started ({e}): the redis \
                     conformance suite needs a real Redis (install redis-server or set REDIS_URL)"
                )
            });
        // Readiness from the server's own log line, not from a sleep.
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("Ready to accept connections") => break,
                Some(Ok(_)) => {}
                _ => {
                    child.kill().ok();
                    panic!("redis-server on port {port} exited before accepting connections");
                }
            }
        }
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self {
            url: format!("redis://127.0.0.1:{port}/"),
            child: Some(child),
        }
    }

    /// Kills our server now (a no-op on `REDIS_URL`).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    pub fn is_own(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
