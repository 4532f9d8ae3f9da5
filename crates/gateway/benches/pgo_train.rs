//! The training run of a profile-guided build (`scripts/pgo.sh`): the gateway binary named by
//! `--gateway` (built with `-Cprofile-generate`) serves, for `--secs` seconds, what it serves
//! in use, and exits on SIGTERM, which writes its profile.
//!
//! ```text
//! cargo bench -p context-relay-gateway --bench pgo_train -- --gateway PATH [--secs 60]
//!     [--agents 10] [--sdk 4]
//! ```
//!
//! The gateway runs the default store (redb, in a temporary directory) with the relay on over
//! two strict simulated providers (the Codex and the Anthropic quota headers), four providers
//! of two accounts each, one combo a provider. Its clients:
//!
//! - `--agents` coding agents of every API shape (Codex CLI's Responses, Claude Code's Messages
//!   with adaptive thinking and with a budget, a Chat Completions agent, Gemini), each a
//!   conversation of tool loops whose whole history is resent every request, a new session
//!   every twelve turns, their sessions named the clients' ways;
//! - `--sdk` SDK callers sending what the OpenAI and Anthropic SDKs send without a session
//!   header: a 1 KB chat, a 100 KB chat of a long conversation, a Messages call, none streamed;
//! - every few seconds an account brought near its limit (the next turn on it writes a
//!   handoff, the one after moves the session and injects it), and refilled once it is out.
//!
//! The profile weighs what runs by how often it runs, so the mix is the one a pooling gateway
//! in front of coding agents sees: mostly pass-through turns of agent sessions, some SDK
//! calls, now and then a switch. It exits non-zero when the gateway cannot be started, exits
//! with a failure status, when no request of a client kind was answered, when more than one
//! request in ten failed, or when no handoff was written and injected: a profile of error
//! paths would train the build for the wrong work.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_sim::{SimProvider, SimQuotaHeaders};
use context_relay_testkit::agents::{Agent, Shape, Step};
use context_relay_testkit::binary::{signal, start_binary};
use context_relay_testkit::clients::contains;
use context_relay_testkit::fleet::{self, FLEET, FleetClient, providers_toml};
use context_relay_testkit::handoff::{HANDOFF_TAG, SUMMARY_NEEDLE, summary_reply};
use context_relay_testkit::harness::{http_client, key_of, wire_bytes};
use serde_json::json;

/// Accounts of each provider of [`FLEET`] the training uses.
const ACCOUNTS: usize = 2;

/// Turns of a session before its agent starts another.
const TURNS_PER_SESSION: usize = 12;
/// The simulators' `reset_secs`: a used-up account is tried again after this long.
const RESET_SECS: u64 = 4;
/// Failures printed (the counts say how many there were).
const PRINTED_FAILURES: u64 = 12;
/// The longest exchange before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

struct Args {
    gateway: PathBuf,
    secs: u64,
    agents: usize,
    sdk: usize,
}

fn args() -> Result<Args, String> {
    let mut gateway = None;
    let (mut secs, mut agents, mut sdk) = (60, 10, 4);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} takes a number"))
        };
        match flag.as_str() {
            "--gateway" => gateway = it.next().map(PathBuf::from),
            "--secs" => secs = number("--secs")?,
            "--agents" => agents = number("--agents")? as usize,
            "--sdk" => sdk = number("--sdk")? as usize,
            // `cargo bench` passes `--bench`.
            _ => {}
        }
    }
    let gateway: PathBuf =
        gateway.ok_or("--gateway PATH (the instrumented gateway binary) is required")?;
    if !gateway.is_file() {
        // `cargo bench` runs the program in the package's directory: a relative path is read
        // from `crates/gateway`, not from where the command was typed.
        return Err(format!(
            "--gateway {}: no such file (a relative path is read from {})",
            gateway.display(),
            std::env::current_dir().map_or_else(|_| "?".into(), |d| d.display().to_string())
        ));
    }
    Ok(Args {
        gateway,
        secs,
        agents,
        sdk,
    })
}

/// What the clients saw, per kind of client.
#[derive(Default)]
struct Counts {
    answered: AtomicU64,
    failed: AtomicU64,
}

struct Shared {
    client: FleetClient,
    url: String,
    sims: [SimProvider; 2],
    stop: AtomicBool,
    agents: Counts,
    sdk: Counts,
    /// Failures printed so far.
    printed: AtomicU64,
    /// Summary calls (handoffs written) and turns that carried a handoff, upstream.
    summaries: AtomicU64,
    injected: AtomicU64,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pgo_train: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let args = args()?;
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let mut sims = Vec::new();
    for headers in [SimQuotaHeaders::Codex, SimQuotaHeaders::Anthropic] {
        let mut sim = SimProvider::builder()
            .quota_headers(headers)
            .quota_step(0.0)
            .reset_secs(RESET_SECS)
            .tool_loop(2)
            .summary_reply(SUMMARY_NEEDLE, summary_reply());
        for &id in FLEET.iter().flat_map(|p| &p.accounts[..ACCOUNTS]) {
            sim = sim.account(id, key_of(id));
        }
        sims.push(
            sim.start()
                .await
                .map_err(|e| format!("the simulator: {e}"))?,
        );
    }
    let sims: [SimProvider; 2] = sims.try_into().map_err(|_| "two simulators".to_owned())?;
    let config = dir.path().join("gateway.toml");
    let store = dir.path().join("context-relay.redb");
    std::fs::write(&config, config_text(&sims, &store.display().to_string()))
        .map_err(|e| format!("{}: {e}", config.display()))?;
    let gateway = args.gateway.to_str().ok_or("--gateway: not UTF-8")?;
    let (mut child, url) = start_binary(gateway, &config, "warn", Stdio::inherit());
    println!(
        "pgo_train: {} s, {} agents, {} SDK callers, gateway at {url}",
        args.secs, args.agents, args.sdk
    );
    let shared = Arc::new(Shared {
        client: http_client(),
        url,
        sims,
        stop: AtomicBool::new(false),
        agents: Counts::default(),
        sdk: Counts::default(),
        printed: AtomicU64::new(0),
        summaries: AtomicU64::new(0),
        injected: AtomicU64::new(0),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.agents {
        let s = shared.clone();
        tasks.spawn(async move { agent(&s, i).await });
    }
    for i in 0..args.sdk {
        let s = shared.clone();
        tasks.spawn(async move { sdk(&s, i).await });
    }
    let s = shared.clone();
    tasks.spawn(async move { accounts(&s).await });
    tokio::time::sleep(Duration::from_secs(args.secs)).await;
    shared.stop.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}

    // SIGTERM: the gateway drains and exits, and the exit writes the profile.
    signal(&child, "-TERM");
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the gateway: {e}"))?;
    let count = |c: &Counts| {
        (
            c.answered.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
        )
    };
    let (agents, sdk) = (count(&shared.agents), count(&shared.sdk));
    let summaries = shared.summaries.load(Ordering::Relaxed);
    let injected = shared.injected.load(Ordering::Relaxed);
    println!(
        "pgo_train: agents {} answered, {} failed; SDK calls {} answered, {} failed; \
         handoffs written {summaries}, injected {injected}; the gateway exited with {status}",
        agents.0, agents.1, sdk.0, sdk.1
    );
    if !status.success() {
        return Err(format!("the gateway exited with {status}"));
    }
    if (args.agents > 0 && agents.0 == 0) || (args.sdk > 0 && sdk.0 == 0) {
        return Err("a kind of client had no request answered".into());
    }
    // More than one failure in ten answers: the profile would weigh error paths.
    if agents.1 * 10 > agents.0 || sdk.1 * 10 > sdk.0 {
        return Err("more than one request in ten failed".into());
    }
    // Two ticks of the account schedule bring the first switch.
    if args.agents > 0 && args.secs >= 10 && (summaries == 0 || injected == 0) {
        return Err("no handoff was written and injected: the switch path went untrained".into());
    }
    Ok(())
}

fn config_text(sims: &[SimProvider; 2], store: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n[store]\nbackend = \"redb\"\npath = {store:?}\n\
         [relay]\nhandoff_providers = [\"*\"]\n{}",
        providers_toml([&sims[0].base_url(), &sims[1].base_url()], ACCOUNTS)
    )
}

/// Agent `index`: conversations of shape `Shape::ALL[index % 5]` until told to stop.
async fn agent(shared: &Shared, index: usize) {
    let shape = Shape::ALL[index % Shape::ALL.len()];
    let combo = match shape {
        Shape::Codex => FLEET[0].combo,
        Shape::Claude | Shape::ClaudeBudget => FLEET[1].combo,
        Shape::Chat => FLEET[2].combo,
        Shape::Gemini => FLEET[3].combo,
    };
    let mut generation = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        generation += 1;
        let session = format!("0199a1b2-{index:04x}-7000-8000-{generation:012x}");
        let mut agent = Agent::new(
            shape,
            &session,
            combo,
            "Add a --json flag to the CLI and cover it with a test.",
        );
        for _ in 0..TURNS_PER_SESSION {
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            let body = Bytes::from(wire_bytes(&agent.body));
            let reply = post(shared, &agent.path(), &agent.headers, body).await;
            let step = reply.as_deref().and_then(|r| agent.absorb(r));
            match step {
                Some(Step::Called) => {}
                Some(Step::Answered) => agent.ask("Now run the tests."),
                None => {
                    shared.agents.failed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
            shared.agents.answered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// SDK caller `index`: the three SDK requests in turn until told to stop.
async fn sdk(shared: &Shared, index: usize) {
    let system = "You are a helpful assistant. ".repeat(24);
    let small = json!({"model": FLEET[2].combo, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": format!("Caller {index}: explain what a tower Layer is.")}
    ]});
    let mut history = vec![json!({"role": "system", "content": system})];
    for turn in 0..44 {
        let text = format!(
            "Turn {turn}: {}",
            "the build log says the test passed. ".repeat(60)
        );
        let role = ["user", "assistant"][turn % 2];
        history.push(json!({"role": role, "content": text}));
    }
    let large = json!({"model": FLEET[2].combo, "messages": history});
    let messages = json!({"model": FLEET[1].combo, "max_tokens": 1024, "system": system,
        "messages": [{"role": "user", "content": "Summarise the design in three lines."}]});
    let bearer = vec![("authorization".to_owned(), "Bearer sk-sdk".to_owned())];
    let anthropic = vec![
        ("x-api-key".to_owned(), "sdk-key".to_owned()),
        ("anthropic-version".to_owned(), "2023-06-01".to_owned()),
    ];
    let calls = [
        (
            "/v1/chat/completions",
            &bearer,
            Bytes::from(wire_bytes(&small)),
        ),
        (
            "/v1/chat/completions",
            &bearer,
            Bytes::from(wire_bytes(&large)),
        ),
        (
            "/v1/messages",
            &anthropic,
            Bytes::from(wire_bytes(&messages)),
        ),
    ];
    let mut i = index;
    while !shared.stop.load(Ordering::Relaxed) {
        let (path, headers, body) = &calls[i % calls.len()];
        i += 1;
        let counts = &shared.sdk;
        match post(shared, path, headers, body.clone()).await {
            Some(_) => counts.answered.fetch_add(1, Ordering::Relaxed),
            None => counts.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// Every two seconds one account (in turn) is brought to 90 % of its window (its next turn
/// writes a handoff) and the one brought there two seconds before to 96 % (its sessions move
/// to the provider's other account, which injects the handoff). An account at or above 95 % is
/// refilled a second before the simulators' reset time, when the gateway tries it again. The
/// turns themselves use no quota: the accounts move only here.
async fn accounts(shared: &Shared) {
    // The providers' first accounts, then their second ones: two accounts of a provider are
    // eight seconds apart, longer than one stays out.
    let all: Vec<(usize, &str)> = (0..ACCOUNTS)
        .flat_map(|a| FLEET.iter().map(move |p| (p.sim(), p.accounts[a])))
        .collect();
    let mut out_since: Vec<Option<Instant>> = vec![None; all.len()];
    let mut next = 0;
    let mut nearing: Option<usize> = None;
    let mut last = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        for (i, (sim, id)) in all.iter().enumerate() {
            let out = shared.sims[*sim].used(id).is_some_and(|u| u >= 95.0);
            match (out, out_since[i]) {
                (true, None) => out_since[i] = Some(Instant::now()),
                (true, Some(at)) if at.elapsed() >= Duration::from_secs(RESET_SECS - 1) => {
                    shared.sims[*sim].set_used(id, 0.0);
                    out_since[i] = None;
                }
                (false, _) => out_since[i] = None,
                _ => {}
            }
        }
        if last.elapsed() >= Duration::from_secs(2) {
            last = Instant::now();
            // The account brought near its limit two seconds ago is now out.
            if let Some(i) = nearing.take() {
                let (sim, id) = all[i];
                shared.sims[sim].set_used(id, 96.0);
            }
            // Only while the account's partner is in: a provider never has both out.
            let partner = (next + FLEET.len()) % all.len();
            if out_since[partner].is_none() {
                let (sim, id) = all[next];
                shared.sims[sim].set_used(id, 90.0);
                nearing = Some(next);
            }
            next = (next + 1) % all.len();
        }
        for sim in &shared.sims {
            for r in sim.take_requests() {
                if r.summary {
                    shared.summaries.fetch_add(1, Ordering::Relaxed);
                } else if contains(&r.body, HANDOFF_TAG) {
                    shared.injected.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// One POST to the gateway; the whole body of a `200`, `None` otherwise (the first few
/// failures are printed).
async fn post(
    shared: &Shared,
    path: &str,
    headers: &[(String, String)],
    body: Bytes,
) -> Option<Bytes> {
    let url = format!("{}{path}", shared.url);
    let failure = match fleet::post(&shared.client, &url, headers, body, REQUEST_TIMEOUT).await {
        Ok((200, bytes)) => return Some(bytes),
        Ok((status, bytes)) => {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
            format!("{status} {text}")
        }
        Err(e) => e,
    };
    if shared.printed.fetch_add(1, Ordering::Relaxed) < PRINTED_FAILURES {
        eprintln!("pgo_train: POST {path}: {failure}");
    }
    None
}
