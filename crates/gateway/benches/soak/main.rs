//! The soak: three gateway binaries on one Redis, one strict simulated provider in this
//! process, and many coding agents of every API shape sending their turns round-robin to the
//! gateways while accounts are used up at random, Redis is killed and restarted and gateways
//! are SIGKILLed and restarted, for a set duration.
//!
//! ```text
//! cargo bench -p context-relay-gateway --bench soak -- --secs 600 [--sessions 20] [--seed 7]
//!     [--switch-ms 2000] [--gap-ms 6000]
//! ```
//!
//! It prints the requests, the client-visible failures (a non-200 or an incomplete reply; a
//! request whose gateway died under it is sent once more to another gateway and counted apart),
//! the handoffs written / injected / lost, and the resident memory of each gateway over time.
//! It exits non-zero on a lost handoff (a switch whose request carried none while the store
//! held one of the previous account, outside a Redis outage and without a failed store call
//! logged by its gateway during the turn), a failure, a leaked state (after
//! the run and an idle wait, a gateway still counting requests in flight or connections beyond
//! the one reading `/metrics`), or memory growth (after a warm-up of the first fifth of the run,
//! the median resident memory of the last third of gateway 0's samples above 1.5 times that of
//! the first third; gateway 0 is never killed). `SOAK_LOG=<filter>` sets the gateways'
//! `RUST_LOG` and keeps their logs.

#![forbid(unsafe_code)]

mod chaos;
mod fleet;
mod sessions;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use context_relay_sim::{SimProvider, SimQuotaHeaders};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use context_relay_testkit::handoff::{SUMMARY_NEEDLE, summary_reply};
use context_relay_testkit::harness::key_of;
use fleet::{GatewayProcess, Redis};
use sessions::{Shared, get};

/// What a gateway logs when a store call on a request's path failed or was skipped by the
/// circuit breaker (the relay passed the request through).
const STORE_FAILED: &str = "context-relay store";

/// The gateways' log filter: warnings, and the relay's pass-throughs on an unreachable store
/// (logged at debug level).
pub const GATEWAY_LOG: &str = "warn,context_relay_engine::metrics=debug";

/// The memory growth that fails the soak (last third's median over the first third's).
const GROWTH_LIMIT: f64 = 1.5;

struct Args {
    secs: u64,
    sessions: usize,
    seed: u64,
    /// How often an account is used up at random.
    switch_ms: u64,
    /// The least time between two accounts of one provider used up at random.
    gap_ms: u64,
}

fn args() -> Args {
    let mut a = Args {
        secs: 60,
        sessions: 20,
        seed: 0x50a4,
        switch_ms: 2000,
        gap_ms: (chaos::RESET_SECS + 1) * 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} takes a number"))
        };
        match flag.as_str() {
            "--secs" => a.secs = value("--secs"),
            "--sessions" => a.sessions = value("--sessions") as usize,
            "--seed" => a.seed = value("--seed"),
            "--switch-ms" => a.switch_ms = value("--switch-ms"),
            "--gap-ms" => a.gap_ms = value("--gap-ms"),
            // `cargo bench` passes `--bench`.
            _ => {}
        }
    }
    a
}

#[tokio::main]
async fn main() {
    let args = args();
    // With `SOAK_LOG` (a `RUST_LOG` filter for the gateways), their logs are kept.
    let keep = std::env::var_os("SOAK_LOG").is_some();
    let dir = tempfile::Builder::new()
        .prefix("soak")
        .disable_cleanup(keep)
        .tempdir()
        .expect("a temporary directory");
    if keep {
        println!("gateway logs kept in {}", dir.path().display());
    }
    let redis = Redis::start();
    let mut sims = Vec::new();
    for headers in [SimQuotaHeaders::Codex, SimQuotaHeaders::Anthropic] {
        let mut sim = SimProvider::builder()
            .quota_headers(headers)
            .quota_step(0.25)
            .reset_secs(chaos::RESET_SECS)
            .tool_loop(2)
            .summary_reply(SUMMARY_NEEDLE, summary_reply());
        for (_, id) in fleet::accounts() {
            sim = sim.account(id, key_of(id));
        }
        sims.push(sim.start().await.expect("the simulated provider starts"));
    }
    let sim_urls = [sims[0].base_url(), sims[1].base_url()];
    let sims: [SimProvider; 2] = sims.try_into().unwrap_or_else(|_| unreachable!());
    let gateways: Vec<GatewayProcess> = (0..3)
        .map(|i| GatewayProcess::start(dir.path(), i, &sim_urls, &redis.url()))
        .collect();
    let urls = gateways.iter().map(|g| g.url.clone()).collect();
    let pids: chaos::Pids = Arc::new(
        gateways
            .iter()
            .map(|g| AtomicU32::new(g.pid().unwrap_or(0)))
            .collect(),
    );
    // No idle connections kept: every turn opens one, and none is left open at the end.
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http();
    let shared = Arc::new(Shared::new(sims, urls, client));
    let redis = Arc::new(Mutex::new(redis));
    let gateways = Arc::new(Mutex::new(gateways));
    let events = Arc::new(Mutex::new(Vec::new()));
    println!(
        "soak: {} s, {} sessions, seed {}, an account used up every {} ms (one a provider \
         per {} ms), gateways {:?}",
        args.secs, args.sessions, args.seed, args.switch_ms, args.gap_ms, shared.gateways
    );
    let start = Instant::now();

    let mut clients = tokio::task::JoinSet::new();
    for i in 0..args.sessions {
        let s = shared.clone();
        clients.spawn(async move { sessions::run(&s, i).await });
    }
    let background = {
        let (s1, s2, s3, s4) = (
            shared.clone(),
            shared.clone(),
            shared.clone(),
            shared.clone(),
        );
        let (p1, p2) = (pids.clone(), pids.clone());
        let (r, g, e) = (redis.clone(), gateways.clone(), events.clone());
        let seed = args.seed;
        let every = Duration::from_millis(args.switch_ms);
        let gap = Duration::from_millis(args.gap_ms);
        (
            tokio::spawn(async move { chaos::accounts(&s1, seed, every, gap).await }),
            tokio::spawn(async move { chaos::faults(&s2, r, g, p1, start, &e).await }),
            tokio::spawn(
                async move { chaos::memory(&s3, p2, start, Duration::from_millis(500)).await },
            ),
            tokio::spawn(async move { clear_recorded(&s4).await }),
        )
    };
    tokio::time::sleep(Duration::from_secs(args.secs)).await;
    shared.stop.store(true, Ordering::Relaxed);
    while clients.join_next().await.is_some() {}
    let _ = background.0.await;
    let _ = background.1.await;
    let samples = background.2.await.unwrap_or_default();
    let _ = background.3.await;
    let ran = start.elapsed();

    let leaks = leaked(&shared).await;
    let summaries = summary_calls(&shared);
    let mut s = shared.stats();
    s.summaries += summaries;
    // A turn whose gateway could not reach Redis in time went through without the relay, as
    // documented (the breaker's pass-through): judged apart, from the gateway's own log.
    let store_failed = {
        let g = gateways.lock().unwrap_or_else(|e| e.into_inner());
        let lost = std::mem::take(&mut s.lost);
        let at = std::mem::take(&mut s.lost_at);
        let mut excused = 0u64;
        for (note, (i, sent, answered)) in lost.into_iter().zip(at) {
            if g[i].log_between(sent, answered).contains(STORE_FAILED) {
                excused += 1;
            } else {
                s.lost.push(note);
                s.lost_at.push((i, sent, answered));
            }
        }
        excused
    };
    println!(
        "\n== soak: {:.0} s, {} sessions ==",
        ran.as_secs_f64(),
        args.sessions
    );
    for e in events.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("{e}");
    }
    println!("requests                 {}", s.requests);
    println!("client-visible failures  {}", s.failures);
    println!("retried on another gw    {}", s.retried);
    println!("account switches         {}", s.switches);
    println!(
        "handoffs written         {} (listed by the admin API)",
        s.written.len()
    );
    println!("handoffs injected        {}", s.injected);
    println!("switches with a handoff  {}", s.expected);
    println!(
        "  during a Redis outage  {} (carried none, not judged)",
        s.excused
    );
    println!(
        "  expired before the turn ended {} (carried none, not judged)",
        s.expired
    );
    println!(
        "  retried after a gateway died {} (carried none, not judged)",
        s.retried_unjudged
    );
    println!("  store call failed on its gateway {store_failed} (carried none, not judged)");
    println!("  lost                   {}", s.lost.len());
    println!(
        "switches not judged      {} (store or gateway unreachable)",
        s.unjudged
    );
    println!("summary calls upstream   {}", s.summaries);
    for note in s.failure_notes.iter().chain(&s.lost) {
        println!("  ! {note}");
    }
    let growth = memory_report(&samples);
    for l in &leaks {
        println!("  ! leaked: {l}");
    }
    let mut verdict = Vec::new();
    if !s.lost.is_empty() {
        verdict.push("a handoff was lost");
    }
    if s.failures > 0 {
        verdict.push("clients saw failures");
    }
    if !leaks.is_empty() {
        verdict.push("state leaked");
    }
    if growth.is_none_or(|g| g > GROWTH_LIMIT) {
        verdict.push("memory grew (or too few samples to tell)");
    }
    if verdict.is_empty() {
        println!("soak: ok");
    } else {
        let g = gateways.lock().unwrap_or_else(|e| e.into_inner());
        for (i, sent, answered) in &s.lost_at {
            let from = sent
                .checked_sub(jiff::SignedDuration::from_secs(2))
                .unwrap_or(*sent);
            println!(
                "-- gateway {i} log around the lost turn sent at {sent} --\n{}",
                g[*i].log_between(from, *answered)
            );
        }
        for (i, gw) in g.iter().enumerate() {
            println!("-- gateway {i} log tail --\n{}", gw.log_tail(20));
        }
        println!("soak: FAILED: {}", verdict.join("; "));
        // `exit` runs no destructor: the gateways, Redis and the temporary directory would be
        // left behind.
        drop(g);
        for gw in gateways
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
        {
            gw.kill();
        }
        redis.lock().unwrap_or_else(|e| e.into_inner()).kill();
        drop(dir);
        std::process::exit(1);
    }
}

/// Empties the simulator's record of requests every few seconds (between turns: the clients
/// hold the read side across a turn), so the soak's own memory stays flat.
async fn clear_recorded(shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let _held = shared.recorded.write().await;
        let summaries = summary_calls(shared);
        shared.stats().summaries += summaries;
        for sim in &shared.sims {
            sim.clear_requests();
        }
    }
}

/// Summary calls the simulators recorded (since they were last cleared).
fn summary_calls(shared: &Shared) -> u64 {
    shared
        .sims
        .iter()
        .flat_map(|s| s.requests())
        .filter(|r| r.summary)
        .count() as u64
}

/// After the run: every gateway's background work settled, then (within 15 s) no request in
/// flight and no connection but the one reading `/metrics`; what still is, per gateway.
async fn leaked(shared: &Shared) -> Vec<String> {
    let mut left = Vec::new();
    for (i, url) in shared.gateways.iter().enumerate() {
        let _ = get(&shared.client, &format!("{url}/admin/handoffs?settle=true")).await;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let text = get(&shared.client, &format!("{url}/metrics"))
                .await
                .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let gauge = |name: &str| -> f64 {
                text.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
                    .unwrap_or(f64::NAN)
            };
            let in_flight = gauge("context_relay_gateway_requests_in_flight");
            let connections = gauge("context_relay_gateway_connections");
            let pending = gauge("context_relay_gateway_connections_pending");
            let store_errors: u64 = text
                .lines()
                .filter(|l| l.starts_with("context_relay_store_errors_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum();
            let clean = in_flight <= 1.0 && connections + pending <= 1.0;
            if clean || Instant::now() >= deadline {
                println!(
                    "gateway {i} after the run: requests_in_flight {in_flight}, connections \
                     {connections}, connections_pending {pending} (this scrape included); \
                     store errors since its last start {store_errors}"
                );
                if !clean {
                    left.push(format!(
                        "gateway {i}: in flight {in_flight}, connections {connections}, \
                         pending {pending}"
                    ));
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    left
}

/// Prints the resident memory over time and returns gateway 0's growth (last third's median
/// over the first third's, after the warm-up), `None` with too few samples.
fn memory_report(samples: &[(f64, Vec<Option<u64>>)]) -> Option<f64> {
    println!("\nresident memory (MiB; - while down):");
    println!("{:>8} {:>8} {:>8} {:>8}", "t (s)", "gw 0", "gw 1", "gw 2");
    let step = (samples.len() / 12).max(1);
    for (t, row) in samples.iter().step_by(step) {
        let cells: Vec<String> = row
            .iter()
            .map(|v| v.map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0)))
            .collect();
        println!("{t:>8.1} {:>8} {:>8} {:>8}", cells[0], cells[1], cells[2]);
    }
    let judged: Vec<u64> = samples
        .iter()
        .skip(samples.len() / 5)
        .filter_map(|(_, row)| row[0])
        .collect();
    if judged.len() < 6 {
        return None;
    }
    let third = judged.len() / 3;
    let first = median(&judged[..third]);
    let last = median(&judged[judged.len() - third..]);
    let growth = last as f64 / first as f64;
    println!(
        "gateway 0 median RSS: first third {:.1} MiB, last third {:.1} MiB: x{growth:.2} \
         (limit x{GROWTH_LIMIT})",
        first as f64 / 1024.0,
        last as f64 / 1024.0
    );
    Some(growth)
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}
