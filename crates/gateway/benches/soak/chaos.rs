//! What happens to the soak's fleet while the clients talk: accounts used up at random and
//! refilled once their reset time has passed, Redis killed and restarted, gateways killed
//! (SIGKILL) and restarted, and the resident memory of each gateway sampled.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fleet::{self, GatewayProcess, Redis};
use crate::sessions::{Shared, get};
use context_relay_testkit::fleet::FLEET;

/// The simulator's `reset_secs`: an account used up comes back after this long.
pub const RESET_SECS: u64 = 5;

/// The gateways' default `rotate_at` in percent: an account at or above it takes no turns,
/// so it counts as used up here too.
const ROTATE_PERCENT: f64 = 95.0;

/// The usage at which an account of a provider that has another account out has its window
/// rolled over (see [`accounts`]): a few turns before [`ROTATE_PERCENT`].
const NEARING_PERCENT: f64 = 90.0;

/// How long an account stays used up in the simulator: shorter than [`RESET_SECS`], so that
/// when a gateway tries it again at the announced reset it is full again.
const REFILL_AFTER: Duration = Duration::from_secs(RESET_SECS - 2);

/// A small xorshift generator: the soak is random but replayable from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Refills every account that has been used up for [`REFILL_AFTER`], rolls over the window of
/// an account nearing its limit while another of its provider is out, and every `every` uses
/// one up (or nearly: 90 %, so the next turn on it writes a handoff) at random, at most one
/// account of a provider per `gap` and only while the others are usable and well below their
/// limit.
pub async fn accounts(shared: &Shared, seed: u64, every: Duration, gap: Duration) {
    let mut rng = Rng::new(seed);
    let all = fleet::accounts();
    let mut used_up: Vec<Option<Instant>> = vec![None; all.len()];
    let mut refilled: Vec<Option<Instant>> = vec![None; all.len()];
    let mut next_switch = Instant::now() + every;
    let mut last_forced = [None; FLEET.len()];
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for (i, (provider, id)) in all.iter().enumerate() {
            let sim = shared.sim(*provider);
            let full = sim.used(id).is_some_and(|u| u >= ROTATE_PERCENT);
            match (full, used_up[i]) {
                (true, None) => used_up[i] = Some(Instant::now()),
                (true, Some(at)) if at.elapsed() >= REFILL_AFTER => {
                    sim.set_used(id, 0.0);
                    used_up[i] = None;
                    refilled[i] = Some(Instant::now());
                }
                (false, _) => used_up[i] = None,
                _ => {}
            }
        }
        // The gateways see an account used up until the reset it announced, which comes after
        // the refill above. While one account of a provider is out, the turns of its sessions
        // use up the others: an account of that provider nearing its limit has its window
        // rolled over early (as a real window would, sooner or later), so that the provider
        // never has every account out. A provider with every account out is an honest 429
        // (the gateway says when the next account comes back) that the soak does not mean
        // to cause.
        let out = |i: usize| {
            used_up[i].is_some()
                || refilled[i].is_some_and(|at| at.elapsed() < Duration::from_secs(RESET_SECS + 1))
        };
        for (i, (provider, id)) in all.iter().enumerate() {
            let other_out = all
                .iter()
                .enumerate()
                .any(|(j, (p, _))| j != i && p == provider && out(j));
            let sim = shared.sim(*provider);
            if other_out && !out(i) && sim.used(id).is_some_and(|u| u >= NEARING_PERCENT) {
                sim.set_used(id, 0.0);
            }
        }
        if Instant::now() >= next_switch {
            next_switch += every;
            let (provider, id) = all[rng.below(all.len() as u64) as usize];
            // One forced account per provider within a reset period: the gateways' view of
            // an account lags the simulator's, and a provider with every account out is a
            // 429 the soak does not mean to cause.
            let quiet = last_forced[provider].is_none_or(|at: Instant| at.elapsed() >= gap);
            let others_usable = all
                .iter()
                .enumerate()
                .filter(|(_, (p, o))| *p == provider && *o != id)
                .all(|(j, (p, o))| !out(j) && shared.sim(*p).used(o).is_some_and(|u| u < 85.0));
            if quiet && others_usable {
                last_forced[provider] = Some(Instant::now());
                let percent = if rng.below(2) == 0 { 90.0 } else { 100.0 };
                shared.sim(provider).set_used(id, percent);
            }
        }
    }
}

/// Process ids of the gateways now running (0: down), read by the memory sampler.
pub type Pids = Arc<Vec<AtomicU32>>;

/// The faults, repeated every minute of the run: Redis killed at 15 s and 39 s (down 2 s),
/// gateway 1 killed at 24 s and gateway 2 at 48 s (down 1 s). Gateway 0 is never killed: its
/// memory is the one judged for growth.
pub async fn faults(
    shared: &Shared,
    redis: Arc<Mutex<Redis>>,
    gateways: Arc<Mutex<Vec<GatewayProcess>>>,
    pids: Pids,
    start: Instant,
    log: &Mutex<Vec<String>>,
) {
    const PLAN: [(u64, Fault); 4] = [
        (15, Fault::Redis),
        (24, Fault::Gateway(1)),
        (39, Fault::Redis),
        (48, Fault::Gateway(2)),
    ];
    let mut minute = 0u64;
    'run: loop {
        for (at, fault) in PLAN {
            let when = start + Duration::from_secs(minute * 60 + at);
            while Instant::now() < when {
                if shared.stop.load(Ordering::Relaxed) {
                    break 'run;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let t = format!(
                "{:6.1}s ({})",
                start.elapsed().as_secs_f64(),
                jiff::Timestamp::now()
            );
            match fault {
                Fault::Redis => {
                    let down = Instant::now();
                    lock(&redis).kill();
                    shared
                        .outages
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((down, None));
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    let r = redis.clone();
                    tokio::task::spawn_blocking(move || lock(&r).restart())
                        .await
                        .expect("redis restarts");
                    let ready = all_ready(shared).await;
                    let up = Instant::now();
                    if let Some(last) = shared
                        .outages
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .last_mut()
                    {
                        last.1 = Some(up);
                    }
                    lock(log).push(format!(
                        "{t}  redis killed; restarted, {} after {:.1}s",
                        if ready {
                            "every gateway ready"
                        } else {
                            "NOT every gateway ready"
                        },
                        (up - down).as_secs_f64()
                    ));
                }
                Fault::Gateway(i) => {
                    pids[i].store(0, Ordering::Relaxed);
                    lock(&gateways)[i].kill();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let g = gateways.clone();
                    let pid = tokio::task::spawn_blocking(move || {
                        let mut g = lock(&g);
                        g[i].restart();
                        g[i].pid().unwrap_or(0)
                    })
                    .await
                    .expect("the gateway restarts");
                    pids[i].store(pid, Ordering::Relaxed);
                    lock(log).push(format!(
                        "{t}  gateway {i} SIGKILLed; restarted as pid {pid}"
                    ));
                }
            }
        }
        minute += 1;
    }
}

#[derive(Clone, Copy)]
enum Fault {
    Redis,
    Gateway(usize),
}

/// Waits (at most 20 s) until every gateway's `/readyz` says `ready` again.
async fn all_ready(shared: &Shared) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    for url in &shared.gateways {
        loop {
            let ready = get(&shared.client, &format!("{url}/readyz"))
                .await
                .ok()
                .and_then(|(_, b)| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .is_some_and(|v| v["status"] == "ready");
            if ready {
                break;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    true
}

/// Samples the resident memory (KiB) of every gateway each `every`: (seconds since start, one
/// value per gateway, `None` while it is down).
pub async fn memory(
    shared: &Shared,
    pids: Pids,
    start: Instant,
    every: Duration,
) -> Vec<(f64, Vec<Option<u64>>)> {
    let mut samples = Vec::new();
    while !shared.stop.load(Ordering::Relaxed) {
        let row = pids
            .iter()
            .map(|p| match p.load(Ordering::Relaxed) {
                0 => None,
                pid => fleet::rss_kib(pid),
            })
            .collect();
        samples.push((start.elapsed().as_secs_f64(), row));
        tokio::time::sleep(every).await;
    }
    samples
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
