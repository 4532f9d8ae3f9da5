//! Store budgets (what the relay's hot path may spend): `may_contain`/`contains` of an absent key from memory (≤ 200 ns),
//! `get` of a present key, and upsert throughput with group commit against one commit per
//! upsert. The one-million-record figures (index memory, reopen time) come from
//! `cargo run --release -p context-relay-store --example million`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
use context_relay_store::{HandoffStore, MemoryStore, RedbStore};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn record(key: &HandoffKey) -> HandoffRecord {
    let now = SystemTime::now();
    HandoffRecord {
        version: 1,
        kind: Default::default(),
        tenant: key.tenant.clone(),
        session: key.session.clone(),
        combo: key.combo.clone(),
        from_provider: "codex".into(),
        from_account: "alice".into(),
        handoff: Handoff {
            summary: "Refactoring the streaming parser; tests for the lexer pending. ".repeat(8),
            key_decisions: vec!["keep the parser streaming".into(); 4],
            task_progress: "parser done, lexer next".into(),
            active_entities: vec!["src/parse.rs".into(); 5],
        },
        message_count: 42,
        conversation: None,
        compaction: false,
        model: "gpt-5-mini".into(),
        threshold: 0.85,
        generated_at: now,
        expires_at: now + Duration::from_secs(5 * 3600),
    }
}

fn key(i: usize) -> HandoffKey {
    HandoffKey::new("tenant-a", format!("session-{i:08}"), "codex-relay")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Fills `store` with `n` records, 256 upserts in flight at a time.
fn fill(rt: &tokio::runtime::Runtime, store: &Arc<dyn HandoffStore>, from: usize, n: usize) {
    rt.block_on(async {
        for chunk in (from..from + n).collect::<Vec<_>>().chunks(256) {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|&i| {
                    let store = Arc::clone(store);
                    tokio::spawn(async move { store.upsert(record(&key(i))).await })
                })
                .collect();
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        }
    });
}

fn lookups(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let redb: Arc<dyn HandoffStore> = Arc::new(RedbStore::open(dir.path().join("b.redb")).unwrap());
    let memory: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    fill(&rt, &redb, 0, 10_000);
    fill(&rt, &memory, 0, 10_000);
    let absent = HandoffKey::new("tenant-a", "session-absent", "codex-relay");
    let present = key(4_242);

    let mut g = c.benchmark_group("absent_key");
    for (name, store) in [("redb", &redb), ("memory", &memory)] {
        g.bench_function(format!("may_contain/{name}"), |b| {
            b.iter(|| black_box(store.may_contain(black_box(&absent))));
        });
        g.bench_function(format!("contains/{name}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(store.contains(black_box(&absent)).await.unwrap());
                    }
                    start.elapsed()
                })
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("present_key");
    for (name, store) in [("redb", &redb), ("memory", &memory)] {
        g.bench_function(format!("get/{name}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(store.get(black_box(&present)).await.unwrap());
                    }
                    start.elapsed()
                })
            });
        });
    }
    g.finish();
}

fn upserts(c: &mut Criterion) {
    const IN_FLIGHT: usize = 256;
    let rt = runtime();
    let mut g = c.benchmark_group("upsert_256_concurrent");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(IN_FLIGHT as u64));
    for (name, max_batch) in [("group_commit", 4096), ("commit_each", 1)] {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn HandoffStore> = Arc::new(
            RedbStore::builder(dir.path().join("u.redb"))
                .max_batch(max_batch)
                .open()
                .unwrap(),
        );
        let mut next = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                fill(&rt, &store, next, IN_FLIGHT);
                next += IN_FLIGHT;
            });
        });
    }
    g.finish();
}

criterion_group!(benches, lookups, upserts);
criterion_main!(benches);
