//! Serve mode: this bench binary re-executed as the process under test (`--serve
//! gateway-on|gateway-off|plain --upstream URL --port-file F`).

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use context_relay_gateway::{Config, Gateway};
use http::Uri;

use crate::proxy::plain_proxy;
use crate::{API_KEY, BoxError, COMBO, Target};

pub(crate) struct ServeArgs {
    pub(crate) target: Target,
    pub(crate) upstream: String,
    pub(crate) port_file: PathBuf,
}

pub(crate) fn parse_serve_args(args: &[String]) -> Result<ServeArgs, BoxError> {
    let value = |flag: &str| -> Result<&str, BoxError> {
        let i = args
            .iter()
            .position(|a| a == flag)
            .ok_or_else(|| format!("serve mode: expected {flag} VALUE, found no {flag}"))?;
        args.get(i + 1)
            .map(String::as_str)
            .ok_or_else(|| format!("serve mode: expected a value after {flag}, found none").into())
    };
    let mode = value("--serve")?;
    let target = Target::parse(mode)
        .filter(|t| *t != Target::Direct)
        .ok_or_else(|| {
            format!("serve mode: expected gateway-on, gateway-off or plain, found {mode:?}")
        })?;
    Ok(ServeArgs {
        target,
        upstream: value("--upstream")?.trim_end_matches('/').to_owned(),
        port_file: PathBuf::from(value("--port-file")?),
    })
}

pub(crate) fn serve_main(args: &[String]) -> Result<(), BoxError> {
    let args = parse_serve_args(args)?;
    // `GATEWAY_LOAD_LOG=warn` (a `RUST_LOG` filter): the process under test logs to stderr.
    if let Ok(filter) = std::env::var("GATEWAY_LOAD_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    // Worker threads follow the affinity mask: one worker when pinned to one core.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        // Each arm keeps its server alive until the parent goes away.
        let (addr, _keep): (SocketAddr, Box<dyn Send>) = match args.target {
            Target::GatewayOn | Target::GatewayOff => {
                let relay_on = args.target == Target::GatewayOn;
                let gateway = Gateway::new(gateway_config(&args.upstream, relay_on)?)?;
                if gateway.relay_enabled() != relay_on {
                    return Err(format!(
                        "{}: expected the relay {}, found it {}",
                        args.target.name(),
                        if relay_on { "on" } else { "off" },
                        if relay_on { "off" } else { "on" },
                    )
                    .into());
                }
                let running = gateway.spawn(loopback).await?;
                (running.addr(), Box::new(running))
            }
            Target::Plain | Target::Direct => {
                let upstream: Uri = args.upstream.parse()?;
                // The gateway's accept queue: a burst of connections meets the same kernel.
                let listener = context_relay_gateway::listen(loopback)?;
                let addr = listener.local_addr()?;
                let task = tokio::spawn(plain_proxy(listener, upstream));
                (addr, Box::new(AbortOnDrop(task)))
            }
        };
        write_port_file(&args.port_file, addr.port())?;
        // The parent holds our stdin open: end of file means it has gone (even if it was
        // killed without running its guards), so no server outlives the bench.
        tokio::task::spawn_blocking(|| {
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        })
        .await?;
        Ok(())
    })
}

pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub(crate) fn write_port_file(path: &Path, port: u16) -> std::io::Result<()> {
    // Written aside and renamed, so the parent never reads half a number.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, port.to_string())?;
    std::fs::rename(&tmp, path)
}

/// The gateway of both gateway targets: one provider (the simulated one, Codex quota headers),
/// one context-relay combo, handoffs in memory; they differ only in the top-level
/// `relay_enabled` switch (off: neither GenerationLayer nor InjectionLayer is in the stack).
pub(crate) fn gateway_config(upstream: &str, relay_on: bool) -> Result<Config, BoxError> {
    Ok(Config::from_toml_str(
        &gateway_toml(upstream, relay_on),
        |_| None,
    )?)
}

/// The configuration of [`gateway_config`] as the text of its file.
pub(crate) fn gateway_toml(upstream: &str, relay_on: bool) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
relay_enabled = {relay_on}
[store]
backend = "memory"
[relay]
handoff_threshold = 0.85
handoff_providers = ["codex"]
[[providers]]
name = "codex"
base_url = "{upstream}/v1"
quota = "codex"
  [[providers.accounts]]
  id = "acct-bench"
  api_key = "{API_KEY}"
[[combos]]
name = "{COMBO}"
strategy = "context-relay"
targets = ["codex/gpt-bench"]
"#
    )
}
