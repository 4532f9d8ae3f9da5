//! Loopback load bench for the pass-through budgets of DESIGN §11.
//!
//! One interleaved run measures four targets with the same request mix (a 1 KB and a 100 KB
//! Chat Completions body, and a 1 KB body asking for an SSE stream), sent by a fixed number of
//! keep-alive HTTP/1.1 connections:
//!
//! - `gateway-on`: the gateway with the relay on (a session header on every request, quota
//!   reported at 0 % so nothing triggers: this is the relay's pass-through cost);
//! - `gateway-off`: the same gateway with the relay off;
//! - `plain`: a bare hyper reverse proxy (hyper-util's pooled client behind a hyper server),
//!   the baseline nothing can undercut;
//! - `direct`: the simulated provider called directly.
//!
//! Each process under test is this very binary re-executed in serve mode
//! (`--serve gateway-on|gateway-off|plain --upstream URL --port-file F`), pinned with
//! `taskset -c 1` to its own core, while the load generator and the simulated provider run in
//! this process pinned to core 0. CPU time per request is the child's `utime + stime`
//! (`/proc/<pid>/stat`) over a window divided by the requests it served in that window; the
//! direct target has no CPU figure because the simulated provider shares the load generator's
//! process.
//!
//! Reading the figures: with 16 connections neither core is saturated, because every SSE answer
//! of the simulated provider waits ~40 ms between its first and second write (its listener does
//! not set `TCP_NODELAY`, so Nagle's algorithm meets the receiver's delayed ACK). Requests per
//! second are therefore bounded by that latency for all four targets alike; CPU time per
//! request is the figure that tells the targets apart (DESIGN §11 says as much).
//!
//! Rounds run every target once, in an order rotated each round, so that drift of a shared
//! machine spreads over all targets. Misses of a budget are reported, never turned into a
//! failing exit status: timings are not assertions.
//!
//! ```sh
//! cargo bench --bench gateway_load
//! GATEWAY_LOAD_ROUNDS=3 GATEWAY_LOAD_SECS=1 GATEWAY_LOAD_CONCURRENCY=8 cargo bench --bench gateway_load
//! ```
//!
//! Environment: `GATEWAY_LOAD_ROUNDS` (5), `GATEWAY_LOAD_SECS` per target per round (3),
//! `GATEWAY_LOAD_WARMUP_SECS` per target before the first round (0.5),
//! `GATEWAY_LOAD_CONCURRENCY` connections (16), `GATEWAY_LOAD_CORES` as `parent,child` (`0,1`),
//! `GATEWAY_LOAD_MIX`, the request kinds each connection sends in turn (`1k,100k,sse`; e.g.
//! `1k` alone for the per-1 KB-request CPU figure of DESIGN §11).

#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::error::Error;
use std::fmt;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_gateway::{Config, Gateway};
use context_relay_sim::{SimProvider, SimQuotaHeaders};
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Either, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1 as client_http1;
use hyper::server::conn::http1 as server_http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

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
    /// Indices into [`Kind::ALL`], sent in turn by every connection.
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

// ───────────────────────────── serve mode (the child) ─────────────────────────────

struct ServeArgs {
    target: Target,
    upstream: String,
    port_file: PathBuf,
}

fn parse_serve_args(args: &[String]) -> Result<ServeArgs, BoxError> {
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

fn serve_main(args: &[String]) -> Result<(), BoxError> {
    let args = parse_serve_args(args)?;
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
                let listener = TcpListener::bind(loopback).await?;
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

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn write_port_file(path: &Path, port: u16) -> std::io::Result<()> {
    // Written aside and renamed, so the parent never reads half a number.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, port.to_string())?;
    std::fs::rename(&tmp, path)
}

/// The gateway of both gateway targets: one provider (the simulated one, Codex quota headers),
/// one context-relay combo, handoffs in memory; they differ only in the top-level
/// `relay_enabled` switch (off: neither GenerationLayer nor InjectionLayer is in the stack).
fn gateway_config(upstream: &str, relay_on: bool) -> Result<Config, BoxError> {
    let toml = format!(
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
    );
    Ok(Config::from_toml_str(&toml, |_| None)?)
}

/// The baseline: forwards method, path, headers and body to `upstream` and streams the response
/// back, nothing else.
async fn plain_proxy(listener: TcpListener, upstream: Uri) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> =
        Client::builder(TokioExecutor::new()).build(connector);
    let authority = upstream.authority().cloned();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        let authority = authority.clone();
        tokio::spawn(async move {
            let service = service_fn(move |mut req: Request<Incoming>| {
                let client = client.clone();
                let authority = authority.clone();
                async move {
                    let mut uri = Uri::builder().scheme("http");
                    if let Some(a) = authority {
                        uri = uri.authority(a);
                    }
                    let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                    let res = match uri.path_and_query(pq).build() {
                        Ok(uri) => {
                            *req.uri_mut() = uri;
                            client.request(req).await.ok()
                        }
                        Err(_) => None,
                    };
                    Ok::<_, Infallible>(match res {
                        Some(res) => res.map(Either::Left),
                        None => {
                            let mut r = Response::new(Either::Right(Empty::<Bytes>::new()));
                            *r.status_mut() = StatusCode::BAD_GATEWAY;
                            r
                        }
                    })
                }
            });
            let _ = server_http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

// ───────────────────────────── children and pinning ─────────────────────────────

/// How the processes are placed on cores.
struct Pinning {
    /// `Some(core)` for the children when `taskset` works and there are two cores.
    child_core: Option<usize>,
    note: String,
}

fn pin_self(cores: (usize, usize)) -> Pinning {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let taskset_ok = Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !taskset_ok {
        return Pinning {
            child_core: None,
            note: "UNPINNED: `taskset` (util-linux) not found; processes float over all cores"
                .into(),
        };
    }
    if cpus < 2 {
        return Pinning {
            child_core: None,
            note: format!("UNPINNED: {cpus} core available, two are needed"),
        };
    }
    // Called before any thread exists, so every thread of this process inherits the mask.
    let pinned = Command::new("taskset")
        .args(["-a", "-p", "-c", &cores.0.to_string()])
        .arg(std::process::id().to_string())
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !pinned {
        return Pinning {
            child_core: None,
            note: format!("UNPINNED: `taskset -p -c {}` failed", cores.0),
        };
    }
    Pinning {
        child_core: Some(cores.1),
        note: format!(
            "load generator + simulated provider on core {}, process under test on core {} ({cpus} cores visible)",
            cores.0, cores.1
        ),
    }
}

/// Kills and reaps the children on every exit path, panics included.
#[derive(Default)]
struct ChildGuard(Vec<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn_server(
    guard: &mut ChildGuard,
    target: Target,
    upstream: &str,
    dir: &Path,
    child_core: Option<usize>,
) -> Result<(u32, SocketAddr), BoxError> {
    let exe = std::env::current_exe()?;
    let port_file = dir.join(format!("{}.port", target.name()));
    let mut cmd = match child_core {
        Some(core) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &core.to_string()]).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.args([
        "--serve",
        target.name(),
        "--upstream",
        upstream,
        "--port-file",
    ])
    .arg(&port_file)
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    // `taskset -c CORE PROG` execs PROG, so the pid is the server's own.
    let child = cmd.spawn()?;
    let pid = child.id();
    guard.0.push(child);
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&port_file)
            && let Ok(port) = text.trim().parse::<u16>()
        {
            return Ok((pid, SocketAddr::from(([127, 0, 0, 1], port))));
        }
        if let Some(child) = guard.0.last_mut()
            && let Some(status) = child.try_wait()?
        {
            return Err(format!(
                "{}: expected the server to report its port, found it exited with {status}",
                target.name()
            )
            .into());
        }
        if started.elapsed() > CHILD_START_TIMEOUT {
            return Err(format!(
                "{}: expected a port file within {CHILD_START_TIMEOUT:?}, found none",
                target.name()
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// `utime + stime` of every thread of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64, BoxError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may contain spaces and parentheses: fields start after the last `)`.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| format!("/proc/{pid}/stat: expected `pid (comm) …`, found {stat:?}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `rest` starts at field 3.
    let tick = |i: usize| -> Result<u64, BoxError> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/stat: expected a number as field {}", i + 3).into())
    };
    Ok(tick(11)? + tick(12)?)
}

// ───────────────────────────── load generator ─────────────────────────────

#[derive(Clone, Copy)]
enum Kind {
    Small,
    Large,
    Stream,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Small, Kind::Large, Kind::Stream];

    /// The name in `GATEWAY_LOAD_MIX`.
    fn key(self) -> &'static str {
        match self {
            Kind::Small => "1k",
            Kind::Large => "100k",
            Kind::Stream => "sse",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Small => "1 KB",
            Kind::Large => "100 KB",
            Kind::Stream => "SSE",
        }
    }
}

/// The request bodies, built once and shared (a `Bytes` clone is a reference count).
struct Mix {
    /// Indices into [`Kind::ALL`], sent in turn.
    kinds: Vec<usize>,
    small: Bytes,
    large: Bytes,
    stream: Bytes,
}

impl Mix {
    fn new(kinds: Vec<usize>) -> Self {
        Self {
            kinds,
            small: chat_body(1024, 1, false),
            large: chat_body(100 * 1024, 40, false),
            stream: chat_body(1024, 1, true),
        }
    }

    fn body(&self, kind: Kind) -> Bytes {
        match kind {
            Kind::Small => self.small.clone(),
            Kind::Large => self.large.clone(),
            Kind::Stream => self.stream.clone(),
        }
    }
}

/// A Chat Completions body of exactly `size` bytes: a system prompt and `turns` user/assistant
/// messages, the last one padded to the size.
fn chat_body(size: usize, turns: usize, stream: bool) -> Bytes {
    let build = |pad: usize| {
        let mut messages = vec![json!({"role": "system", "content":
            "You are a careful coding assistant.\nAnswer with \"diffs\" only."})];
        for i in 0..turns {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let filler = if i + 1 == turns {
                "x".repeat(pad)
            } else {
                "fn main() { println!(\"step\"); }\n".repeat(size / (turns * 48))
            };
            messages.push(json!({"role": role, "content": format!("turn {i}: {filler}")}));
        }
        let mut body = json!({"model": COMBO, "messages": messages, "temperature": 0.2});
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body.to_string()
    };
    let base = build(0).len();
    Bytes::from(build(size.saturating_sub(base)))
}

#[derive(Default)]
struct WindowStats {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    /// Per [`Kind`], in [`Kind::ALL`] order.
    latencies_us: [Vec<u64>; 3],
}

impl WindowStats {
    fn merge(&mut self, other: WindowStats) {
        self.ok += other.ok;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        for (mine, theirs) in self.latencies_us.iter_mut().zip(other.latencies_us) {
            mine.extend(theirs);
        }
    }

    fn error(&mut self, e: impl fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }
}

async fn connect(addr: SocketAddr) -> Result<client_http1::SendRequest<Full<Bytes>>, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = client_http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One keep-alive connection sending the mix in turn until `deadline`.
async fn worker(addr: SocketAddr, index: usize, deadline: Instant, mix: Arc<Mix>) -> WindowStats {
    let mut stats = WindowStats::default();
    let host = HeaderValue::from_str(&addr.to_string()).unwrap_or(HeaderValue::from_static("x"));
    let session = HeaderValue::from_str(&format!("bench-session-{index}"))
        .unwrap_or(HeaderValue::from_static("bench-session"));
    let auth = HeaderValue::from_static("Bearer key-bench");
    let mut sender = None;
    // Workers start at different kinds so that the mix is even at every moment.
    let mut turn = index;
    while Instant::now() < deadline && stats.ok + stats.errors < MAX_REQUESTS_PER_WORKER {
        let s = match &mut sender {
            Some(s) => s,
            None => match connect(addr).await {
                Ok(s) => sender.insert(s),
                Err(e) => {
                    // A target that refuses connections will not recover within the window.
                    stats.error(format!("connect: {e}"));
                    break;
                }
            },
        };
        let kind_index = mix.kinds[turn % mix.kinds.len()];
        let kind = Kind::ALL[kind_index];
        turn += 1;
        let mut req = Request::post(CHAT_PATH);
        if let Some(h) = req.headers_mut() {
            h.insert(HOST, host.clone());
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            h.insert(AUTHORIZATION, auth.clone());
            h.insert("session-id", session.clone());
        }
        let Ok(req) = req.body(Full::new(mix.body(kind))) else {
            stats.error("request could not be built");
            break;
        };
        let start = Instant::now();
        let exchange = async {
            s.ready().await?;
            let res = s.send_request(req).await?;
            let status = res.status();
            let body = res.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body.len()))
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(Ok((status, _))) if status.is_success() => {
                stats.ok += 1;
                stats.latencies_us[kind_index]
                    .push(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX));
            }
            Ok(Ok((status, _))) => stats.error(format!("status {status}")),
            Ok(Err(e)) => {
                stats.error(e);
                sender = None;
            }
            Err(_) => {
                stats.error(format!("no response within {REQUEST_TIMEOUT:?}"));
                sender = None;
            }
        }
    }
    stats
}

struct Window {
    stats: WindowStats,
    elapsed: Duration,
    cpu_ticks: Option<u64>,
}

async fn run_window(
    addr: SocketAddr,
    pid: Option<u32>,
    length: Duration,
    concurrency: usize,
    mix: &Arc<Mix>,
) -> Result<Window, BoxError> {
    let cpu_before = pid.map(cpu_ticks).transpose()?;
    let start = Instant::now();
    let deadline = start + length;
    let workers: Vec<_> = (0..concurrency)
        .map(|i| tokio::spawn(worker(addr, i, deadline, mix.clone())))
        .collect();
    let mut stats = WindowStats::default();
    for w in workers {
        stats.merge(w.await?);
    }
    let elapsed = start.elapsed();
    let cpu_after = pid.map(cpu_ticks).transpose()?;
    Ok(Window {
        stats,
        elapsed,
        cpu_ticks: cpu_before.zip(cpu_after).map(|(b, a)| a.saturating_sub(b)),
    })
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
            )?;
            places.push((target, addr, Some(pid)));
        }
    }
    let mix = Arc::new(Mix::new(settings.kinds.clone()));

    println!("gateway_load: loopback load bench (DESIGN §11 pass-through budgets)");
    println!("  placement: {}", pinning.note);
    println!(
        "  mix: {} in turn ({} B chat, {} B chat, {} B chat with an SSE response); {} keep-alive connections",
        mix.kinds
            .iter()
            .map(|&k| Kind::ALL[k].key())
            .collect::<Vec<_>>()
            .join(","),
        mix.small.len(),
        mix.large.len(),
        mix.stream.len(),
        settings.concurrency
    );
    println!(
        "  {} rounds × {} targets × {:.1} s (after {:.1} s warm-up each); CPU clock {ticks} ticks/s",
        settings.rounds,
        places.len(),
        settings.window.as_secs_f64(),
        settings.warmup.as_secs_f64()
    );
    println!(
        "  gateway-on: relay_enabled = true, `session-id` on every request, quota at 0 %; gateway-off: relay_enabled = false"
    );

    for &(target, addr, pid) in &places {
        let w = run_window(addr, pid, settings.warmup, settings.concurrency, &mix).await?;
        if w.stats.ok == 0 && settings.warmup > Duration::ZERO {
            return Err(format!(
                "{}: expected 2xx answers during warm-up, found none (first error: {})",
                target.name(),
                w.stats.first_error.as_deref().unwrap_or("none")
            )
            .into());
        }
    }

    let mut totals: Vec<Totals> = places.iter().map(|_| Totals::default()).collect();
    for round in 0..settings.rounds {
        let mut line = format!("  round {}/{}:", round + 1, settings.rounds);
        for k in 0..places.len() {
            let i = (k + round) % places.len();
            let (target, addr, pid) = places[i];
            let w = run_window(addr, pid, settings.window, settings.concurrency, &mix).await?;
            let served = w.stats.ok + w.stats.errors;
            line.push_str(&format!(
                " {} {:.0}/s",
                target.name(),
                served as f64 / w.elapsed.as_secs_f64().max(1e-9)
            ));
            totals[i].add(w, tick_us);
        }
        println!("{line}");
    }
    drop(clearer);
    drop(guard);

    report(&places, &mut totals, tick_us);
    Ok(())
}

fn report(places: &[(Target, SocketAddr, Option<u32>)], totals: &mut [Totals], tick_us: f64) {
    println!();
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>11} {:>17} {:>8}",
        "target", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "per round min–max", "errors"
    );
    for ((target, _, _), t) in places.iter().zip(totals.iter_mut()) {
        let mut all: Vec<u64> = t.stats.latencies_us.concat();
        all.sort_unstable();
        for per_kind in &mut t.stats.latencies_us {
            per_kind.sort_unstable();
        }
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
    println!();
    print!("{:<12}", "p50 / p99 ms");
    for kind in Kind::ALL {
        print!(" {:>17}", kind.name());
    }
    println!();
    for ((target, _, _), t) in places.iter().zip(totals.iter()) {
        print!("{:<12}", target.name());
        for per_kind in &t.stats.latencies_us {
            let cell = if per_kind.is_empty() {
                "—".to_owned()
            } else {
                format!(
                    "{:.2} / {:.2}",
                    percentile_ms(per_kind, 50.0),
                    percentile_ms(per_kind, 99.0)
                )
            };
            print!(" {cell:>17}");
        }
        println!();
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
    println!();
    budget(
        "relay-on req/s ÷ relay-off req/s",
        Some(on.rps() / off.rps()),
        Bound::AtLeast(0.95),
    );
    budget(
        "relay-on CPU/req ÷ plain CPU/req",
        ratio(on.cpu_us(tick_us), plain.cpu_us(tick_us)),
        Bound::AtMost(1.5),
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
