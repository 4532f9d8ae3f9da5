//! The context relay in one run: a coding session moves from one account to another and
//! carries on where it left off.
//!
//! ```sh
//! cargo run --release --example quickstart
//! ```
//!
//! Everything runs in this process, on 127.0.0.1 only:
//!
//! - a **simulated provider** (`context_relay_sim`, a test double) with two accounts,
//!   `acct-a` and `acct-b`. Each turn uses 22 % of the serving account's quota, reported the way
//!   the ChatGPT Codex backend does (`x-codex-primary-used-percent`); an account at 100 % answers
//!   429 `usage_limit_reached`; the summary request of the relay gets a canned JSON note;
//! - the **gateway** (`context-relay-gateway`) with both relay layers and a **redb** handoff store
//!   in a temporary folder, configured with the same TOML a real deployment uses;
//! - a **client** that speaks the Responses API the way Codex CLI does (streamed, with a
//!   `session-id` header and the whole history resent every turn, a tool call included).
//!
//! What to watch for:
//!
//! 1. turns 1–4 go to `acct-a`; at 88 % (over the 85 % threshold) the gateway asks `acct-a`, in
//!    the background, for a structured summary of the session and stores it: the *handoff*;
//! 2. `acct-a` runs out; on turn 5 it answers 429, the gateway retries the same request on
//!    `acct-b` and the client only sees a 200;
//! 3. that retry carries the handoff, as a `<context_handoff>` developer message in front of the
//!    client's own input, so `acct-b` knows what was decided and what comes next;
//! 4. once `acct-b` has answered, the handoff is deleted: it is used exactly once.
//!
//! Reading order: `run` tells the story, `before_switch`, `switch` and `after_switch` narrate
//! and check each phase; the mechanics (the gateway's TOML, the scripted session, the client)
//! are in `session.rs` and the printing in `print.rs`.
//!
//! The lines starting with `[quickstart]` are stable markers that CI greps for. The example
//! exits with status 1 and a message naming what did not happen if any step of the story fails.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use context_relay::core::HandoffRecord;
use context_relay::core::render::render_record;
use context_relay_gateway::Gateway;
use context_relay_gateway::config::Config;
use context_relay_sim::{SimProvider, SimQuotaHeaders};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// Quota each turn uses on the serving account, in percent: turn 4 reaches 88 %.
const QUOTA_STEP: f64 = 22.0;
/// Usage at which the gateway writes a handoff (the `[relay]` default).
const HANDOFF_THRESHOLD: f64 = 0.85;
/// The turn on which acct-a has run out: its 429 makes the gateway move the session.
const ROTATION_TURN: usize = 5;
/// The client's Codex session id, sent as the `session-id` header.
const SESSION: &str = "019a7c1e-quickstart-session";
/// The key the client presents to the gateway (never forwarded to the provider).
const CLIENT_KEY: &str = "sk-quickstart-client";
const ADMIN_TOKEN: &str = "quickstart-admin-token";
const HANDOFF_TAG: &str = "<context_handoff>";

/// Ends the run with an error unless `$cond` holds; the message says what was expected and what
/// was found.
macro_rules! check {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err(format!($($message)+).into());
        }
    };
}

mod print;
mod session;

use print::{marker, print_block, print_handoff};
use session::{
    Outcome, Session, account, canned_summary, carries_handoff, gateway_toml, injected_message,
    items, script,
};

#[tokio::main]
async fn main() -> ExitCode {
    init_logs();
    let dir = match tempfile::Builder::new()
        .prefix("context-relay-quickstart-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("[quickstart] FAILED: cannot create a temporary folder: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A bound, not a wait: the story takes well under a second; if a step hangs, fail
    // clearly instead of blocking CI.
    let outcome = match tokio::time::timeout(Duration::from_secs(60), run(dir.path())).await {
        Ok(result) => result,
        Err(_) => Err("the story did not finish within 60 s".into()),
    };
    let cleaned = dir.close();
    match (outcome, cleaned) {
        (Ok(()), Ok(())) => {
            marker("ok");
            ExitCode::SUCCESS
        }
        (Err(e), _) => {
            eprintln!("[quickstart] FAILED: {e}");
            ExitCode::FAILURE
        }
        (Ok(()), Err(e)) => {
            eprintln!("[quickstart] FAILED: cannot remove the temporary folder: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logs() {
    // Quiet by default so the narration reads cleanly; `RUST_LOG=debug` shows the layers at
    // work. Logs go to stderr, the narration to stdout.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// The story: set up the provider and the gateway, play the session turn by turn, and check at
/// each step that what should happen did.
async fn run(store_dir: &Path) -> Result<()> {
    println!("context-relay quickstart: one Codex session, two accounts, one rotation\n");

    // The provider: two accounts, quota climbing each turn, Codex headers, 429 at 100 %.
    let sim = SimProvider::builder()
        .account("acct-a", "sim-key-a")
        .account("acct-b", "sim-key-b")
        .quota_step(QUOTA_STEP)
        .quota_headers(SimQuotaHeaders::Codex)
        .summary_reply("You are writing a handoff note", canned_summary())
        .start()
        .await?;

    // The gateway, from the same TOML a deployment uses, with its redb file in `store_dir`.
    let mut config = Config::from_toml_str(&gateway_toml(&sim.base_url()), |_| None)?;
    config.store.path = store_dir.join("handoffs.redb");
    let store_path = config.store.path.clone();
    let gateway = Gateway::new(config)?;
    let server = gateway.spawn(([127, 0, 0, 1], 0).into()).await?;

    println!("setup");
    println!(
        "  provider (simulated)  {}  accounts acct-a, acct-b; +{QUOTA_STEP} % quota per turn; 429 at 100 %",
        sim.base_url()
    );
    println!(
        "  gateway               {}  model \"codex-relay\" -> codex/gpt-5.5; handoff at {} %, rotation at 95 %",
        server.url(),
        HANDOFF_THRESHOLD * 100.0
    );
    println!("  handoff store         redb at {}", store_path.display());
    println!("  client                Responses API like Codex CLI, session-id: {SESSION}\n");

    let mut session = Session {
        sim,
        gateway,
        server,
        client: Client::builder(TokioExecutor::new()).build_http(),
        history: Vec::new(),
        seen: 0,
    };
    let script = script();
    let mut stored_handoff = None;
    for (i, turn) in script.iter().enumerate() {
        let n = i + 1;
        if n == ROTATION_TURN {
            // The account's quota is shared with whatever else uses it (another session, the
            // user's other machine): here it runs out between two turns, so the gateway only
            // learns it from a 429, the case the transparent retry is for.
            session.sim.set_used("acct-a", 100.0);
            println!(
                "\n        meanwhile acct-a's quota runs out elsewhere (the simulator sets it to 100 %)\n"
            );
        }
        println!("turn {n}  {}", turn.caption);
        let acct_a_turns = session.sim.turns("acct-a");
        let out = session.send(turn).await?;
        if n < ROTATION_TURN {
            if let Some(record) = before_switch(&session, n, &out).await? {
                stored_handoff = Some(record);
            }
        } else if n == ROTATION_TURN {
            let record = stored_handoff.as_ref().ok_or(
                "expected a handoff stored before acct-a ran out, found none (no summary was made)",
            )?;
            let still_a = session.sim.turns("acct-a") == acct_a_turns;
            switch(&session, &out, record, still_a).await?;
        } else {
            after_switch(n, &out)?;
        }
        if let Some(call) = &turn.tool_call {
            println!(
                "        the reply also calls {}({}) (scripted: the simulator answers text only); Codex runs it",
                call["name"].as_str().unwrap_or("?"),
                call["arguments"].as_str().unwrap_or("")
            );
        }
    }

    let Session {
        sim,
        gateway,
        server,
        ..
    } = session;
    let summaries = sim.requests().iter().filter(|r| r.summary).count();
    let injected = sim.requests().iter().filter(|r| carries_handoff(r)).count();
    check!(
        summaries == 1 && injected == 1,
        "expected one summary request and one injection in the session, found {summaries} and {injected}"
    );
    server.shutdown().await?;
    // The gateway holds the redb file open: drop it before the folder is removed.
    drop(gateway);
    sim.shutdown().await;

    println!(
        "\nsummary\n  \
        The session ran {} turns through one gateway URL, and the client saw 200 every time. \
        While acct-a served turns 1-{}, its quota climbed to {} %; crossing {} % made the gateway \
        ask acct-a, in the background, for a structured summary of the session, which it stored \
        in redb. When acct-a ran out, the 429 never reached the client: the gateway retried turn \
        {ROTATION_TURN} on acct-b and put the summary in front of the request as a \
        <context_handoff> developer message, so acct-b continued knowing the goal, the decisions \
        and the failing test. Once acct-b had answered, the handoff was deleted, and the turns \
        after it went to acct-b as plain requests.\n",
        script.len(),
        ROTATION_TURN - 1,
        QUOTA_STEP * (ROTATION_TURN - 1) as f64,
        HANDOFF_THRESHOLD * 100.0,
    );
    Ok(())
}

/// Turns on acct-a: below the threshold nothing happens; over it, one summary call and one
/// stored handoff, which is returned.
async fn before_switch(
    session: &Session,
    n: usize,
    out: &Outcome,
) -> Result<Option<HandoffRecord>> {
    let served = out.served(n)?;
    // Below rotation, the session sticks to the account it started on.
    check!(
        out.attempts.len() == 1 && account(served) == "acct-a",
        "turn {n}: expected one attempt on acct-a, found {} ending on {}",
        out.attempts.len(),
        account(served)
    );
    check!(
        !carries_handoff(served),
        "turn {n}: expected no handoff before any rotation, found one"
    );
    println!(
        "        200 from acct-a, now at {} % used: \"{}\"",
        out.quota, out.reply
    );
    let stored = session.gateway.store().list(None, Some(SESSION)).await?;
    if out.summaries.is_empty() {
        check!(
            stored.is_empty(),
            "turn {n}: expected no handoff below the threshold, found {}",
            stored.len()
        );
        println!(
            "        below the {} % threshold: nothing else happens",
            HANDOFF_THRESHOLD * 100.0
        );
        return Ok(None);
    }

    // Over the threshold: one summary call, to the account the session is on.
    check!(
        out.summaries.len() == 1 && account(&out.summaries[0]) == "acct-a",
        "turn {n}: expected one summary request to acct-a, found {}",
        out.summaries.len()
    );
    check!(
        stored.len() == 1,
        "turn {n}: expected one stored handoff after the summary, found {}",
        stored.len()
    );
    println!(
        "        {} % >= {} %: after the reply, the gateway asked acct-a for a summary in the background",
        out.quota,
        HANDOFF_THRESHOLD * 100.0
    );
    marker("handoff generated");
    let listed = session.admin_handoffs().await?;
    check!(
        listed.len() == 1,
        "expected GET /admin/handoffs to list 1 handoff, found {}",
        listed.len()
    );
    println!("        stored in redb; GET /admin/handoffs shows it:");
    print_handoff(&listed[0]);
    Ok(stored.into_iter().next())
}

/// The rotation turn: a 429 on acct-a, the retry on acct-b carrying `record`, then its deletion.
/// `acct_a_served_nothing` says whether acct-a's count of served turns stayed the same.
async fn switch(
    session: &Session,
    out: &Outcome,
    record: &HandoffRecord,
    acct_a_served_nothing: bool,
) -> Result<()> {
    let n = ROTATION_TURN;
    // Two attempts for one client request: the 429 on acct-a, then the retry on acct-b.
    let [first, retry] = out.attempts.as_slice() else {
        return Err(format!(
            "turn {n}: expected two attempts (acct-a, then acct-b), found {}",
            out.attempts.len()
        )
        .into());
    };
    check!(
        account(first) == "acct-a" && acct_a_served_nothing,
        "turn {n}: expected acct-a to refuse the first attempt with a 429, found it sent to {} (served: {})",
        account(first),
        !acct_a_served_nothing
    );
    check!(
        !carries_handoff(first),
        "turn {n}: expected no handoff on acct-a, which wrote it, found one"
    );
    println!(
        "        attempt 1 -> acct-a: 429 usage_limit_reached (acct-a is now exhausted until its reset)"
    );
    check!(
        account(retry) == "acct-b",
        "turn {n}: expected the retry on acct-b, found {}",
        account(retry)
    );
    println!("        attempt 2 -> acct-b: the same request, retried by the gateway");
    marker("rotated to acct-b");
    println!(
        "        the client saw only: 200, acct-b at {} % used: \"{}\"",
        out.quota, out.reply
    );

    // The retry starts with the handoff, rendered from the stored record, and then carries the
    // client's input exactly as sent.
    let injected = injected_message(retry).ok_or_else(|| {
        format!("turn {n}: expected the retry on acct-b to start with the <context_handoff> message, found none")
    })?;
    check!(
        injected == render_record(record),
        "turn {n}: expected the injected message to render the stored handoff, found:\n{injected}"
    );
    let sent = items(&out.sent);
    let received = retry.json().map(|v| items(&v)).unwrap_or_default();
    check!(
        received.get(1..) == Some(&sent[..]),
        "turn {n}: expected the client's {} input items after the handoff, unchanged, found {} items",
        sent.len(),
        received.len().saturating_sub(1)
    );
    marker("handoff injected");
    println!(
        "        acct-b received this developer message first in `input`, then the client's {} items unchanged:",
        sent.len()
    );
    print_block(&injected);

    // The reply completed, so the relay deleted the handoff (`send` awaited that).
    let stored = session.gateway.store().list(None, None).await?;
    let listed = session.admin_handoffs().await?;
    check!(
        stored.is_empty() && listed.is_empty(),
        "turn {n}: expected the handoff deleted after acct-b's reply, found {} in the store and {} listed",
        stored.len(),
        listed.len()
    );
    marker("handoff consumed");
    println!(
        "        acct-b's reply completed, so the handoff was deleted: GET /admin/handoffs lists none, the redb store holds none"
    );
    Ok(())
}

/// Turns after the switch: acct-b serves, and the handoff is not sent again.
fn after_switch(n: usize, out: &Outcome) -> Result<()> {
    let served = out.served(n)?;
    check!(
        out.attempts.len() == 1 && account(served) == "acct-b",
        "turn {n}: expected one attempt on acct-b, found {} ending on {}",
        out.attempts.len(),
        account(served)
    );
    check!(
        !carries_handoff(served),
        "turn {n}: expected the handoff only once, found it again"
    );
    println!(
        "        200 from acct-b, now at {} % used: \"{}\" (no handoff: it was used once)",
        out.quota, out.reply
    );
    Ok(())
}
