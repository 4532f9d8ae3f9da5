//! One million stored handoffs: how long filling, reopening (index rebuild) takes, and how much
//! memory the rebuilt index uses. Prints figures; run with
//! `cargo run --release -p context-relay-store --example million [COUNT]`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
use context_relay_store::{HandoffStore, RedbStore};

fn record(i: usize, now: SystemTime) -> HandoffRecord {
    HandoffRecord {
        version: 1,
        kind: Default::default(),
        tenant: format!("tenant-{}", i % 50).into(),
        session: format!("session-{i:08}").into(),
        combo: "codex-relay".into(),
        from_provider: "codex".into(),
        from_account: "alice".into(),
        handoff: Handoff {
            summary: "Refactoring the streaming parser; lexer tests pending.".into(),
            key_decisions: vec!["keep the parser streaming".into()],
            task_progress: "parser done, lexer next".into(),
            active_entities: vec!["src/parse.rs".into()],
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

/// Resident memory of this process, from /proc (Linux), in KiB.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, path, count] = args.as_slice()
        && flag == "--reopen"
    {
        return reopen(std::path::Path::new(path), count.parse()?);
    }
    let count: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("million.redb");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    let start = Instant::now();
    {
        let store: Arc<dyn HandoffStore> = Arc::new(RedbStore::open(&path)?);
        let now = SystemTime::now();
        rt.block_on(async {
            let per_task = count.div_ceil(512);
            let tasks: Vec<_> = (0..512)
                .map(|t| {
                    let store = Arc::clone(&store);
                    tokio::spawn(async move {
                        for i in t * per_task..((t + 1) * per_task).min(count) {
                            store.upsert(record(i, now)).await?;
                        }
                        Ok::<_, context_relay_store::StoreError>(())
                    })
                })
                .collect();
            for t in tasks {
                t.await??;
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    }
    let fill = start.elapsed();
    let file_mib = std::fs::metadata(&path)?.len() as f64 / (1024.0 * 1024.0);

    // Reopen in a fresh process: in this one the allocator still holds what the fill freed,
    // which would hide the index in the RSS figures.
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("--reopen")
        .arg(&path)
        .arg(count.to_string())
        .output()?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    println!(
        "fill (512 writers): {fill:.2?} ({:.0} upserts/s)",
        count as f64 / fill.as_secs_f64()
    );
    println!("file size:          {file_mib:.1} MiB");
    Ok(())
}

/// The second half, in its own process: reopen, measure, look up.
fn reopen(path: &std::path::Path, count: usize) -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let before = rss_kib();
    let start = Instant::now();
    // A small page cache, so that the RSS growth measures the index rather than cached pages.
    let store = RedbStore::builder(path).cache_size(16 << 20).open()?;
    let reopen = start.elapsed();
    let after = rss_kib();

    let absent = HandoffKey::new("tenant-1", "session-absent", "codex-relay");
    let present = HandoffKey::new("tenant-7", "session-00000007", "codex-relay");
    let n = 1_000_000u32;
    let start = Instant::now();
    let mut hits = 0u32;
    for _ in 0..n {
        hits += u32::from(store.may_contain(std::hint::black_box(&absent)));
    }
    let absent_ns = start.elapsed().as_nanos() as f64 / f64::from(n);
    let got = rt.block_on(store.get(&present))?;

    println!("records:            {}", store.indexed());
    println!("reopen + rebuild:   {reopen:.2?}");
    if let (Some(b), Some(a)) = (before, after) {
        let grown = a.saturating_sub(b);
        println!(
            "index memory (RSS growth at open, incl. <= 16 MiB page cache): {:.1} MiB ({:.0} B/record)",
            grown as f64 / 1024.0,
            grown as f64 * 1024.0 / count.max(1) as f64
        );
    }
    println!("may_contain absent: {absent_ns:.1} ns (hits {hits})");
    println!(
        "get present:        {}",
        if got.is_some() { "found" } else { "MISSING" }
    );
    Ok(())
}
