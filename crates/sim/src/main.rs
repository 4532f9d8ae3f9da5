//! `context-relay-sim --listen ADDR --accounts a,b`: the simulated provider as a process, for
//! harnesses and examples that start the gateway as a binary.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use context_relay_sim::{SimProvider, SimQuotaHeaders};

/// A simulated OpenAI/Anthropic provider with several accounts (a test double).
///
/// Each account `ID` answers to the API key `key-ID` (or `ID=KEY` names the key).
#[derive(Debug, Parser)]
#[command(name = "context-relay-sim", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Comma-separated accounts, `ID` or `ID=KEY`.
    #[arg(long, value_name = "IDS", value_delimiter = ',', default_value = "a,b")]
    accounts: Vec<String>,
    /// Percent of quota each turn uses.
    #[arg(long, value_name = "PERCENT", default_value_t = 10.0)]
    quota_step: f64,
    /// Send Anthropic unified rate-limit headers instead of Codex ones.
    #[arg(long)]
    anthropic_headers: bool,
    /// Answer the relay's summary requests (a body holding its prompt's words "writing a
    /// handoff note") with a handoff note in the relay's JSON format, using no quota, as a
    /// model would write one; without it they are answered like any turn.
    #[arg(long)]
    summaries: bool,
}

/// Words of the relay's summary prompt: the simulator does not depend on the relay, so it
/// recognises the prompt by them (as a test does).
const SUMMARY_PROMPT_WORDS: &[u8] = b"writing a handoff note";

/// The handoff note a summary request gets with `--summaries`: it names the account that
/// wrote it, and says it is the simulator's.
fn summary_note(req: &context_relay_sim::SummaryRequest<'_>) -> String {
    serde_json::json!({
        "summary": format!("Summary written on account {} by the simulated provider.", req.account),
        "keyDecisions": ["keep the public API as it is"],
        "taskProgress": "work in progress",
        "activeEntities": [],
    })
    .to_string()
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> std::io::Result<()> {
    let mut builder = SimProvider::builder()
        .listen(args.listen)
        .quota_step(args.quota_step);
    if args.anthropic_headers {
        builder = builder.quota_headers(SimQuotaHeaders::Anthropic);
    }
    if args.summaries {
        builder = builder.summary_reply_with(
            |body| {
                body.windows(SUMMARY_PROMPT_WORDS.len())
                    .any(|w| w == SUMMARY_PROMPT_WORDS)
            },
            summary_note,
        );
    }
    let mut keys = Vec::new();
    for account in args.accounts.iter().filter(|a| !a.is_empty()) {
        let (id, key) = match account.split_once('=') {
            Some((id, key)) => (id.to_owned(), key.to_owned()),
            None => (account.clone(), format!("key-{account}")),
        };
        keys.push(format!("{id}={key}"));
        builder = builder.account(id, key);
    }
    let sim = builder.start().await?;
    // Plain lines on stdout, for scripts that start the simulator on port 0.
    println!("listening on {}", sim.base_url());
    println!("accounts {}", keys.join(","));
    tokio::signal::ctrl_c().await?;
    sim.shutdown().await;
    Ok(())
}
