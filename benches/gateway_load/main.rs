//! Loopback load bench for the relay's pass-through budgets: with the relay on, the gateway
//! serves at least 0.95× the requests per second of the same gateway with the relay off, and
//! spends at most 1.3× the CPU per request of a bare hyper reverse proxy, on each of three
//! mixes measured apart:
//!
//! - `1k`: a 1 KB Chat Completions body;
//! - `100k`: a 100 KB Chat Completions body with 45 messages (a long coding session);
//! - `sse`: a 1 KB body asking for a streamed reply of 20 SSE events.
//!
//! Requests carry a bearer key and no session header, as with the OpenAI SDKs, so the gateway
//! derives the session from the body (its fingerprint) on every request. Four targets, sent
//! the same requests by a fixed number of keep-alive HTTP/1.1 connections:
//!
//! - `gateway-on`: the gateway with the relay on (quota reported at 0 %, so nothing
//!   triggers: this is the relay's pass-through cost);
//! - `gateway-off`: the same gateway with the relay off;
//! - `plain`: a bare hyper reverse proxy (hyper-util's pooled client behind a hyper server),
//!   the baseline nothing can undercut;
//! - `direct`: the simulated provider called directly.
//!
//! The modules: [`workload`] (request kinds and mixes, the keep-alive workers), [`proxy`] (the
//! bare proxy), [`serve`] (the child processes' serve mode) and [`harness`] (pinning, children,
//! CPU time).
//!
//! Each process under test is this very binary re-executed in serve mode
//! (`--serve gateway-on|gateway-off|plain --upstream URL --port-file F`), pinned with
//! `taskset -c 1` to its own core, while the load generator and the simulated provider run in
//! this process pinned to core 0. CPU time per request is the child's `utime + stime`
//! (`/proc/<pid>/stat`) over a window divided by the requests it served in that window; the
//! direct target has no CPU figure because the simulated provider shares the load generator's
//! process.
//!
//! Reading the figures: requests per second depend on how busy the shared machine is and on
//! the latency of each target; CPU time per request of the process under test is the figure
//! that tells the targets apart.
//!
//! Rounds run every mix on every target once, targets in an order rotated each round, so that
//! drift of a shared machine spreads over all targets. Misses of a budget are reported, never turned into a
//! failing exit status: timings are not assertions.
//!
//! ```sh
//! cargo bench --bench gateway_load
//! GATEWAY_LOAD_ROUNDS=3 GATEWAY_LOAD_SECS=1 GATEWAY_LOAD_CONCURRENCY=8 cargo bench --bench gateway_load
//! ```
//!
//! `cargo bench --bench gateway_load -- --scale` measures scale instead (see [`scale`]):
//! thousands of open streams and concurrent 1 MiB bodies, gateway against the bare proxy.
//!
//! Environment: `GATEWAY_LOAD_ROUNDS` (5), `GATEWAY_LOAD_SECS` per target per round (3),
//! `GATEWAY_LOAD_WARMUP_SECS` per target before the first round (0.5),
//! `GATEWAY_LOAD_CONCURRENCY` connections (16), `GATEWAY_LOAD_CORES` as `parent,child` (`0,1`),
//! `GATEWAY_LOAD_MIX`, the mixes measured, each apart (`1k,100k,sse`),
//! `GATEWAY_LOAD_GATEWAY_BIN`, another build of the gateway binary (say, `scripts/pgo.sh`'s) run
//! as `gateway-on` on the same configuration instead of this binary's own gateway.

#![forbid(unsafe_code)]

use std::error::Error;
use std::fmt;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use context_relay_sim::{SimProvider, SimQuotaHeaders};

mod counted;
mod harness;
mod proxy;
mod scale;
mod serve;
mod workload;

use harness::{ChildGuard, Pinning, clock_ticks, pin_self, spawn_server};
use serve::{AbortOnDrop, serve_main};
use workload::{Kind, Mix, Window, WindowStats, run_window};

type BoxError = Box<dyn Error + Send + Sync>;

/// Every request carries this key: the provider accepts it (direct and plain targets forward
/// it), and the gateway swaps it for the account's own (which is the same key here).
const API_KEY: &str = "key-bench";
const COMBO: &str = "bench-relay";
const CHAT_PATH: &str = "/v1/chat/completions";
/// Bounds every request so that a wedged target cannot stall the run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounds every worker loop independently of the clock.
const MAX_REQUESTS_PER_WORKER: u64 = 5_000_000;
const CHILD_START_TIMEOUT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if args.iter().any(|a| a == "--serve") {
        serve_main(&args)
    } else if args.iter().any(|a| a == "--scale") {
        scale::scale_main()
    } else {
        // `cargo bench` passes `--bench` (and maybe a filter): nothing else to parse here.
        bench_main()
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway_load: {e}");
            ExitCode::FAILURE
        }
    }
}

// ───────────────────────────── targets and settings ─────────────────────────────

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    GatewayOn,
    GatewayOff,
    Plain,
    Direct,
}

impl Target {
    const ALL: [Target; 4] = [
        Target::GatewayOn,
        Target::GatewayOff,
        Target::Plain,
        Target::Direct,
    ];

    fn name(self) -> &'static str {
        match self {
            Target::GatewayOn => "gateway-on",
            Target::GatewayOff => "gateway-off",
            Target::Plain => "plain",
            Target::Direct => "direct",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
}

struct Settings {
    rounds: usize,
    window: Duration,
    warmup: Duration,
    concurrency: usize,
    cores: (usize, usize),
    /// Indices into [`Kind::ALL`]: the mixes, each measured in its own windows.
    kinds: Vec<usize>,
}

impl Settings {
    fn from_env() -> Result<Self, BoxError> {
        let secs = |name: &str, default: f64| -> Result<Duration, BoxError> {
            let v = env_or(name, default)?;
            if !(v.is_finite() && (0.0..=600.0).contains(&v)) {
                return Err(format!("{name}: expected seconds in 0..=600, found {v}").into());
            }
            Ok(Duration::from_secs_f64(v))
        };
        let rounds: usize = env_or("GATEWAY_LOAD_ROUNDS", 5)?;
        let concurrency: usize = env_or("GATEWAY_LOAD_CONCURRENCY", 16)?;
        if !(1..=100).contains(&rounds) {
            return Err(format!("GATEWAY_LOAD_ROUNDS: expected 1..=100, found {rounds}").into());
        }
        if !(1..=1024).contains(&concurrency) {
            return Err(format!(
                "GATEWAY_LOAD_CONCURRENCY: expected 1..=1024, found {concurrency}"
            )
            .into());
        }
        let cores = match std::env::var("GATEWAY_LOAD_CORES") {
            Err(_) => (0, 1),
            Ok(v) => v
                .split_once(',')
                .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
                .ok_or_else(|| {
                    format!("GATEWAY_LOAD_CORES: expected `parent,child` core ids, found {v:?}")
                })?,
        };
        Ok(Self {
            rounds,
            window: secs("GATEWAY_LOAD_SECS", 3.0)?,
            warmup: secs("GATEWAY_LOAD_WARMUP_SECS", 0.5)?,
            concurrency,
            cores,
            kinds: kinds_from_env()?,
        })
    }
}

fn kinds_from_env() -> Result<Vec<usize>, BoxError> {
    let Ok(v) = std::env::var("GATEWAY_LOAD_MIX") else {
        return Ok((0..Kind::ALL.len()).collect());
    };
    v.split(',')
        .map(|k| {
            let k = k.trim();
            Kind::ALL
                .iter()
                .position(|kind| kind.key() == k)
                .ok_or_else(|| {
                    format!("GATEWAY_LOAD_MIX: expected a list of 1k, 100k, sse; found {k:?}")
                        .into()
                })
        })
        .collect()
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T, BoxError>
where
    T::Err: fmt::Display,
{
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|e| format!("{name}: expected a number, found {v:?} ({e})").into()),
    }
}

// ───────────────────────────── the run ─────────────────────────────

#[derive(Default)]
struct Totals {
    stats: WindowStats,
    elapsed: Duration,
    cpu_ticks: Option<u64>,
    cpu_us_per_round: Vec<f64>,
}

impl Totals {
    fn add(&mut self, w: Window, tick_us: f64) {
        let served = w.stats.ok + w.stats.errors;
        if let Some(t) = w.cpu_ticks {
            *self.cpu_ticks.get_or_insert(0) += t;
            if served > 0 {
                self.cpu_us_per_round
                    .push(t as f64 * tick_us / served as f64);
            }
        }
        self.elapsed += w.elapsed;
        self.stats.merge(w.stats);
    }

    fn served(&self) -> u64 {
        self.stats.ok + self.stats.errors
    }

    fn rps(&self) -> f64 {
        self.served() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn cpu_us(&self, tick_us: f64) -> Option<f64> {
        let served = self.served();
        self.cpu_ticks
            .filter(|_| served > 0)
            .map(|t| t as f64 * tick_us / served as f64)
    }
}

fn percentile_ms(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted_us.len() as f64).ceil() as usize;
    sorted_us[rank.clamp(1, sorted_us.len()) - 1] as f64 / 1000.0
}

fn bench_main() -> Result<(), BoxError> {
    let settings = Settings::from_env()?;
    // Before the runtime exists, so that its threads inherit the mask.
    let pinning = pin_self(settings.cores);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(settings, pinning))
}

async fn run(settings: Settings, pinning: Pinning) -> Result<(), BoxError> {
    let ticks = clock_ticks();
    let tick_us = 1e6 / ticks as f64;
    let sim = Arc::new(
        SimProvider::builder()
            .account("acct-bench", API_KEY)
            // Usage stays at 0 %: below every threshold, so the relay only passes through.
            .quota_step(0.0)
            .quota_headers(SimQuotaHeaders::Codex)
            // Role, 16 deltas, finish reason, usage, [DONE]: 20 events.
            .chat_deltas(16)
            .start()
            .await?,
    );
    // The provider records every request for tests; a load run would pile up gigabytes.
    let clearer = {
        let sim = sim.clone();
        AbortOnDrop(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                sim.clear_requests();
            }
        }))
    };
    let upstream = format!("http://{}", sim.addr());
    let dir = tempfile::tempdir()?;
    let mut guard = ChildGuard::default();
    let mut places: Vec<(Target, SocketAddr, Option<u32>)> = Vec::new();
    for target in Target::ALL {
        if target == Target::Direct {
            places.push((target, sim.addr(), None));
        } else {
            let (pid, addr) = spawn_server(
                &mut guard,
                target,
                &upstream,
                dir.path(),
                pinning.child_core,
                &[],
            )?;
            places.push((target, addr, Some(pid)));
        }
    }
    let mixes: Vec<Arc<Mix>> = settings
        .kinds
        .iter()
        .map(|&k| Arc::new(Mix::new(vec![k])))
        .collect();
    let sizes = Mix::new(Vec::new());

    println!("gateway_load: loopback load bench (pass-through budgets)");
    println!("  placement: {}", pinning.note);
    println!(
        "  mixes, each measured apart: {} (1k: {} B chat; 100k: {} B chat, 45 messages; sse: {} B chat, 20-event SSE reply); {} keep-alive connections",
        settings
            .kinds
            .iter()
            .map(|&k| Kind::ALL[k].key())
            .collect::<Vec<_>>()
            .join(","),
        sizes.small.len(),
        sizes.large.len(),
        sizes.stream.len(),
        settings.concurrency
    );
    println!(
        "  {} rounds × {} mixes × {} targets × {:.1} s (after {:.1} s warm-up each); CPU clock {ticks} ticks/s",
        settings.rounds,
        mixes.len(),
        places.len(),
        settings.window.as_secs_f64(),
        settings.warmup.as_secs_f64()
    );
    println!(
        "  no session header (the body's fingerprint is the session); gateway-on: relay_enabled = true, quota at 0 %; gateway-off: relay_enabled = false"
    );

    for mix in &mixes {
        for &(target, addr, pid) in &places {
            let w = run_window(addr, pid, settings.warmup, settings.concurrency, mix).await?;
            if w.stats.ok == 0 && settings.warmup > Duration::ZERO {
                return Err(format!(
                    "{}: expected 2xx answers during warm-up, found none (first error: {})",
                    target.name(),
                    w.stats.first_error.as_deref().unwrap_or("none")
                )
                .into());
            }
        }
    }

    let mut totals: Vec<Vec<Totals>> = mixes
        .iter()
        .map(|_| places.iter().map(|_| Totals::default()).collect())
        .collect();
    for round in 0..settings.rounds {
        for (m, mix) in mixes.iter().enumerate() {
            let kind = Kind::ALL[mix.kinds[0]];
            let mut line = format!("  round {}/{} {}:", round + 1, settings.rounds, kind.key());
            for k in 0..places.len() {
                let i = (k + round) % places.len();
                let (target, addr, pid) = places[i];
                let w = run_window(addr, pid, settings.window, settings.concurrency, mix).await?;
                let served = w.stats.ok + w.stats.errors;
                line.push_str(&format!(
                    " {} {:.0}/s",
                    target.name(),
                    served as f64 / w.elapsed.as_secs_f64().max(1e-9)
                ));
                totals[m][i].add(w, tick_us);
            }
            println!("{line}");
        }
    }
    drop(clearer);
    drop(guard);

    for (mix, totals) in mixes.iter().zip(totals.iter_mut()) {
        report(Kind::ALL[mix.kinds[0]], &places, totals, tick_us);
    }
    Ok(())
}

fn report(
    kind: Kind,
    places: &[(Target, SocketAddr, Option<u32>)],
    totals: &mut [Totals],
    tick_us: f64,
) {
    println!();
    println!("mix {} ({}):", kind.key(), kind.name());
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>11} {:>17} {:>8}",
        "target", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "per round min–max", "errors"
    );
    for ((target, _, _), t) in places.iter().zip(totals.iter_mut()) {
        let mut all: Vec<u64> = t.stats.latencies_us.concat();
        all.sort_unstable();
        let cpu = t
            .cpu_us(tick_us)
            .map_or_else(|| "—".to_owned(), |c| format!("{c:.1}"));
        let spread = if t.cpu_us_per_round.is_empty() {
            "—".to_owned()
        } else {
            let min = t.cpu_us_per_round.iter().copied().fold(f64::MAX, f64::min);
            let max = t.cpu_us_per_round.iter().copied().fold(f64::MIN, f64::max);
            format!("{min:.1}–{max:.1}")
        };
        println!(
            "{:<12} {:>9.0} {:>9.2} {:>9.2} {:>11} {:>17} {:>8}",
            target.name(),
            t.rps(),
            percentile_ms(&all, 50.0),
            percentile_ms(&all, 99.0),
            cpu,
            spread,
            t.stats.errors
        );
        if let Some(e) = &t.stats.first_error {
            println!("{:<12} first error: {e}", "");
        }
    }
    let find = |target: Target| {
        places
            .iter()
            .position(|p| p.0 == target)
            .map(|i| &totals[i])
    };
    let (Some(on), Some(off), Some(plain)) = (
        find(Target::GatewayOn),
        find(Target::GatewayOff),
        find(Target::Plain),
    ) else {
        return;
    };
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    budget(
        "relay-on req/s ÷ relay-off req/s",
        Some(on.rps() / off.rps()),
        Bound::AtLeast(0.95),
    );
    budget(
        "relay-on CPU/req ÷ plain CPU/req",
        ratio(on.cpu_us(tick_us), plain.cpu_us(tick_us)),
        Bound::AtMost(1.3),
    );
    budget(
        "relay-off CPU/req ÷ plain CPU/req",
        ratio(off.cpu_us(tick_us), plain.cpu_us(tick_us)),
        Bound::Info,
    );
    budget(
        "relay-on CPU/req ÷ relay-off CPU/req",
        ratio(on.cpu_us(tick_us), off.cpu_us(tick_us)),
        Bound::Info,
    );
}

enum Bound {
    AtLeast(f64),
    AtMost(f64),
    Info,
}

fn budget(name: &str, value: Option<f64>, bound: Bound) {
    let Some(v) = value.filter(|v| v.is_finite()) else {
        println!("  {name:<38} n/a (no CPU figures: unpinned or no /proc?)");
        return;
    };
    let verdict = match bound {
        Bound::AtLeast(b) if v >= b => format!("PASS (budget ≥ {b})"),
        Bound::AtLeast(b) => format!("MISS (budget ≥ {b})"),
        Bound::AtMost(b) if v <= b => format!("PASS (budget ≤ {b})"),
        Bound::AtMost(b) => format!("MISS (budget ≤ {b})"),
        Bound::Info => "(information)".to_owned(),
    };
    println!("  {name:<38} {v:>6.3}  {verdict}");
}
