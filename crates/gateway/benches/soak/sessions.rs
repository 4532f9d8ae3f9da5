//! The soak's clients: coding agents of every API shape, each sending its turns round-robin to
//! the gateways, and the bookkeeping of what each turn did upstream (which account served it,
//! whether it carried a handoff, whether one the store held went missing).

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_sim::SimProvider;
use http::Request;
use http_body_util::Full;
use serde_json::Value;
use tokio::sync::RwLock;

use context_relay_testkit::agents::{Agent, Shape, Step};
use context_relay_testkit::clients::contains;
use context_relay_testkit::fleet::{FLEET, FleetClient, exchange, post};
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::ADMIN_TOKEN;

/// Turns a conversation lasts before the agent starts a new session (the load stays alike
/// from start to end instead of growing with the histories).
const TURNS_PER_SESSION: usize = 12;
/// Longest a request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What the clients saw.
#[derive(Default, Debug)]
pub struct Stats {
    pub requests: u64,
    /// Non-200 answers, replies that did not complete, retries that failed too.
    pub failures: u64,
    /// Requests whose gateway died under them (or was down), sent once more to another.
    pub retried: u64,
    /// Turns served by another account than the session's previous turn.
    pub switches: u64,
    /// Distinct handoffs the store listed (session, generated_at).
    pub written: HashSet<(String, String)>,
    /// Turns whose upstream request carried a handoff.
    pub injected: u64,
    /// Switched turns for which the store held a handoff of the previous account.
    pub expected: u64,
    /// Of those, switched turns that overlapped a Redis outage and carried none (not judged).
    pub excused: u64,
    /// Of those, turns that carried none outside any outage.
    pub lost: Vec<String>,
    /// Where and when each lost turn ran (gateway, sent, answered): its log lines are shown.
    pub lost_at: Vec<(usize, jiff::Timestamp, jiff::Timestamp)>,
    /// Switches the soak could not judge (the store or the previous gateway was unreachable).
    pub unjudged: u64,
    /// Switched turns sent twice (their first gateway died) that carried none of the handoff
    /// the store held: the first attempt may have delivered it upstream (not judged).
    pub retried_unjudged: u64,
    /// Summary calls the simulator received.
    pub summaries: u64,
    /// Switched turns after the handoff the store held had expired (not expected).
    pub expired: u64,
    /// The first few failures, for the report.
    pub failure_notes: Vec<String>,
}

/// What every client shares.
pub struct Shared {
    /// The simulators (`FleetProvider::sim` says which serves a provider).
    pub sims: [SimProvider; 2],
    pub gateways: Vec<String>,
    pub client: FleetClient,
    pub stats: Mutex<Stats>,
    /// Redis outages: (down at, store usable again by).
    pub outages: Mutex<Vec<(Instant, Option<Instant>)>>,
    /// Held (read) across a turn; the writer clears the simulator's recorded requests.
    pub recorded: RwLock<()>,
    pub stop: AtomicBool,
    next_gateway: AtomicUsize,
}

impl Shared {
    pub fn new(sims: [SimProvider; 2], gateways: Vec<String>, client: FleetClient) -> Self {
        Self {
            sims,
            gateways,
            client,
            stats: Mutex::default(),
            outages: Mutex::default(),
            recorded: RwLock::new(()),
            stop: AtomicBool::new(false),
            next_gateway: AtomicUsize::new(0),
        }
    }

    /// The simulator of provider `provider` of [`FLEET`].
    pub fn sim(&self, provider: usize) -> &SimProvider {
        &self.sims[FLEET[provider].sim()]
    }

    pub fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn during_outage(&self, from: Instant, to: Instant) -> bool {
        let outages = self.outages.lock().unwrap_or_else(|e| e.into_inner());
        outages
            .iter()
            .any(|(down, up)| *down <= to && up.is_none_or(|up| up >= from))
    }

    /// Every account's usage in its simulator, for a failure note.
    fn usage(&self) -> String {
        crate::fleet::accounts()
            .into_iter()
            .map(|(p, id)| format!("{id} {:.0}%", self.sim(p).used(id).unwrap_or(f64::NAN)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn failed(&self, note: String) {
        let note = format!("{} {note}", jiff::Timestamp::now());
        let mut s = self.stats();
        s.failures += 1;
        if s.failure_notes.len() < 10 {
            s.failure_notes.push(note);
        }
    }
}

/// Client `index`: one agent after another of shape `Shape::ALL[index % 5]` until told to stop.
pub async fn run(shared: &Shared, index: usize) {
    let shape = Shape::ALL[index % Shape::ALL.len()];
    let provider = match shape {
        Shape::Codex => 0,
        Shape::Claude | Shape::ClaudeBudget => 1,
        Shape::Chat => 2,
        Shape::Gemini => 3,
    };
    let combo = FLEET[provider].combo;
    let mut generation = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        generation += 1;
        let session = format!("0199a1b2-{index:04x}-7000-8000-{generation:012x}");
        let token = format!("SOAK-{index}-{generation}");
        let mut agent = Agent::new(
            shape,
            &session,
            combo,
            &format!("{token}: add a --json flag to the CLI and cover it with a test."),
        );
        conversation(shared, shared.sim(provider), &mut agent, &session, &token).await;
    }
}

/// Where the previous turn of a session went.
struct Previous {
    gateway: usize,
    account: String,
}

async fn conversation(
    shared: &Shared,
    sim: &SimProvider,
    agent: &mut Agent,
    session: &str,
    token: &str,
) {
    let mut previous: Option<Previous> = None;
    for turn in 0..TURNS_PER_SESSION {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let stored = match &previous {
            Some(p) => listed(shared, p.gateway, session).await,
            None => Some(Vec::new()),
        };
        let guard = shared.recorded.read().await;
        let before = sim.requests().len();
        let started = Instant::now();
        let wall = jiff::Timestamp::now();
        let Some((gateway, retried, reply)) = send(shared, agent).await else {
            return;
        };
        let upstream: Vec<_> = sim.requests()[before..]
            .iter()
            .filter(|r| !r.summary && contains(&r.body, token))
            .cloned()
            .collect();
        drop(guard);
        let ended = Instant::now();
        let finished = jiff::Timestamp::now();
        let Some(served) = upstream.last() else {
            shared.failed(format!(
                "{session} turn {turn}: no upstream request recorded"
            ));
            return;
        };
        let account = served.account.clone().unwrap_or_default();
        let carried = contains(&served.body, HANDOFF_TAG);
        {
            let mut s = shared.stats();
            s.injected += u64::from(carried);
            for h in stored.iter().flatten() {
                let at = h["generated_at"].as_str().unwrap_or_default().to_owned();
                s.written.insert((session.to_owned(), at));
            }
            if let Some(p) = previous.as_ref().filter(|p| p.account != account) {
                s.switches += 1;
                let held: Vec<&Value> = stored
                    .iter()
                    .flatten()
                    .filter(|h| h["from_account"] == p.account.as_str())
                    .collect();
                if stored.is_none() {
                    s.unjudged += 1;
                } else if retried && !carried && !held.is_empty() {
                    // The attempt on the killed gateway may have taken the handoff upstream
                    // with it (claimed, injected, deleted when the provider's answer ended).
                    s.retried_unjudged += 1;
                } else if carried {
                    s.expected += u64::from(!held.is_empty());
                } else if !held.is_empty() && !held.iter().any(|h| live_until(h, finished)) {
                    // It expired (with the account's reset) before the turn ended.
                    s.expired += 1;
                } else if !held.is_empty() {
                    s.expected += 1;
                    if shared.during_outage(started, ended) {
                        s.excused += 1;
                    } else {
                        let attempts: Vec<String> = upstream
                            .iter()
                            .map(|r| {
                                format!(
                                    "{}{}",
                                    r.account.as_deref().unwrap_or("?"),
                                    if contains(&r.body, HANDOFF_TAG) {
                                        "+handoff"
                                    } else {
                                        ""
                                    }
                                )
                            })
                            .collect();
                        s.lost_at.push((gateway, wall, finished));
                        s.lost.push(format!(
                            "{session} turn {turn} at {wall}: {} → {account} on gateway {gateway} \
                             carried no handoff (upstream attempts {attempts:?}); the store \
                             held {}",
                            p.account,
                            held.iter()
                                .map(|h| format!(
                                    "{} {} until {}",
                                    h["kind"], h["generated_at"], h["expires_at"]
                                ))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                }
            }
        }
        match agent.absorb(&reply) {
            Some(Step::Called) => {}
            Some(Step::Answered) => agent.ask(&format!("{token}: now run the tests.")),
            None => {
                shared.failed(format!(
                    "{session} turn {turn} on gateway {gateway}: the reply did not complete: {}",
                    String::from_utf8_lossy(&reply[..reply.len().min(300)])
                ));
                return;
            }
        }
        previous = Some(Previous { gateway, account });
    }
}

/// Sends the agent's history to the next gateway, and once more to the one after it when the
/// first died under it; the gateway that answered, whether that was the second try, and the
/// whole reply; `None` on a failure.
async fn send(shared: &Shared, agent: &Agent) -> Option<(usize, bool, Bytes)> {
    let first = shared.next_gateway.fetch_add(1, Ordering::Relaxed) % shared.gateways.len();
    let body = Bytes::from(serde_json::to_vec(&agent.body).ok()?);
    let mut gateway = first;
    for attempt in 0..2 {
        shared.stats().requests += 1;
        let url = format!("{}{}", shared.gateways[gateway], agent.path());
        match post(
            &shared.client,
            &url,
            &agent.headers,
            body.clone(),
            REQUEST_TIMEOUT,
        )
        .await
        {
            Ok((200, reply)) => return Some((gateway, attempt > 0, reply)),
            Ok((status, reply)) => {
                shared.failed(format!(
                    "{} on gateway {gateway}: {status} {} (accounts: {})",
                    agent.path(),
                    String::from_utf8_lossy(&reply[..reply.len().min(300)]),
                    shared.usage()
                ));
                return None;
            }
            Err(e) if attempt == 0 => {
                shared.stats().retried += 1;
                tracing::debug!("gateway {gateway}: {e}; retried");
                gateway = (gateway + 1) % shared.gateways.len();
            }
            Err(e) => {
                shared.failed(format!("retry on gateway {gateway}: {e}"));
                return None;
            }
        }
    }
    None
}

/// `GET /admin/handoffs?session=…&settle=true` on gateway `gateway`: the handoffs the store
/// holds for `session`, `None` when that cannot be known (gateway down, store unreachable).
async fn listed(shared: &Shared, gateway: usize, session: &str) -> Option<Vec<Value>> {
    let url = format!(
        "{}/admin/handoffs?session={session}&settle=true",
        shared.gateways[gateway]
    );
    let (status, body) = get(&shared.client, &url).await.ok()?;
    if status != 200 {
        return None;
    }
    let v: Value = serde_json::from_slice(&body).ok()?;
    v["handoffs"].as_array().cloned()
}

/// One authenticated GET (admin or metrics); the status and the body.
pub async fn get(client: &FleetClient, url: &str) -> Result<(u16, Bytes), String> {
    let req = Request::get(url)
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .body(Full::default())
        .map_err(|e| e.to_string())?;
    exchange(client, req, REQUEST_TIMEOUT).await
}

/// Whether handoff `h` (as the admin API lists it) had not expired at `at`.
fn live_until(h: &Value, at: jiff::Timestamp) -> bool {
    h["expires_at"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .is_none_or(|expires| expires > at)
}
