//! `context-relay-pingora`: the example proxy as a process.
//!
//! ```text
//! CONTEXT_RELAY_UPSTREAM=127.0.0.1:9000 \
//! CONTEXT_RELAY_ACCOUNTS=acct-a=sk-a,acct-b=sk-b \
//!   cargo run -p context-relay-pingora-example
//! ```
//!
//! Environment: `CONTEXT_RELAY_UPSTREAM` (host:port of a plain-HTTP provider, required),
//! `CONTEXT_RELAY_ACCOUNTS` (`id=key` pairs separated by commas, required),
//! `CONTEXT_RELAY_LISTEN` (default `127.0.0.1:8787`), `CONTEXT_RELAY_PROVIDER` (default
//! `codex`), `CONTEXT_RELAY_STORE` (the redb file, default `context-relay.redb`),
//! `RUST_LOG` (default `info`).
#![forbid(unsafe_code)]

use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;

use context_relay_engine::Relay;
use context_relay_pingora_example::{Account, Pool, PoolSummarizer, RelayProxy, serve};
use context_relay_store::{HandoffStore, RedbStore};

fn var(name: &str, default: Option<&str>) -> Result<String, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
        _ => default
            .map(str::to_owned)
            .ok_or_else(|| format!("{name} is not set")),
    }
}

fn addr(name: &str, value: &str) -> Result<SocketAddr, String> {
    value
        .to_socket_addrs()
        .map_err(|e| format!("{name}: {value}: {e}"))?
        .next()
        .ok_or_else(|| format!("{name}: {value} resolves to no address"))
}

fn accounts(value: &str) -> Result<Vec<Account>, String> {
    let accounts = value
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((id, key)) if !id.trim().is_empty() && !key.trim().is_empty() => {
                Ok(Account::new(id.trim(), key.trim()))
            }
            _ => Err(format!("CONTEXT_RELAY_ACCOUNTS: `{pair}` is not `id=key`")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if accounts.is_empty() {
        return Err("CONTEXT_RELAY_ACCOUNTS names no account".into());
    }
    Ok(accounts)
}

fn run() -> Result<(), String> {
    let upstream = addr(
        "CONTEXT_RELAY_UPSTREAM",
        &var("CONTEXT_RELAY_UPSTREAM", None)?,
    )?;
    let listen = addr(
        "CONTEXT_RELAY_LISTEN",
        &var("CONTEXT_RELAY_LISTEN", Some("127.0.0.1:8787"))?,
    )?;
    let provider = var("CONTEXT_RELAY_PROVIDER", Some("codex"))?;
    let accounts = accounts(&var("CONTEXT_RELAY_ACCOUNTS", None)?)?;
    let pool = Arc::new(Pool::new(&provider, accounts));
    let path = var("CONTEXT_RELAY_STORE", Some("context-relay.redb"))?;
    let store: Arc<dyn HandoffStore> =
        Arc::new(RedbStore::open(&path).map_err(|e| format!("store {path}: {e}"))?);
    let relay = Relay::builder(store)
        .summarizer(PoolSummarizer::new(upstream, pool.clone()))
        .build();
    tracing::info!(%listen, %upstream, %provider, "context-relay pingora proxy");
    serve(RelayProxy::new(upstream, pool, relay), listen, 2);
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("context-relay-pingora: {e}");
            ExitCode::FAILURE
        }
    }
}
