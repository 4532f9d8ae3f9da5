//! Scale mode (`cargo bench --bench gateway_load -- --scale`): thousands of open streams and
//! concurrent large bodies, through the gateway (relay on) and the bare proxy, each target in
//! a fresh process per phase.
//!
//! - **Open streams**: `GATEWAY_LOAD_STREAMS` (8 000) clients each ask for a streamed reply that
//!   the provider sends as `GATEWAY_LOAD_STREAM_EVENTS` (60) events, one every
//!   `GATEWAY_LOAD_EVENT_SECS` (1 s), then `[DONE]`; every stream holds one connection from the
//!   client and one to the provider. Memory per open stream is the process's resident memory
//!   once every stream has its first event, less its resident memory before the first one
//!   opened, divided by the streams; CPU per event is the process's CPU time over the whole
//!   phase (connections made and closed included) divided by the events the clients read.
//! - **Large bodies**: `GATEWAY_LOAD_LARGE` (64) clients at once, `GATEWAY_LOAD_LARGE_ROUNDS`
//!   (5) times, each send a 1 MiB Chat Completions body with a session header (as agent
//!   clients send a late turn); the peak resident memory of the process (`VmHWM`) is set
//!   against the bytes in flight.
//!
//! With `GATEWAY_LOAD_CALLGRIND=DIR` the open-streams phase is also counted under callgrind
//! (instructions and cache misses per event; see [`counted`](crate::counted)).
//!
//! The provider here is this process's own: a hyper server that answers a streamed request
//! slowly and any other at once. Each stream uses its own connection with `connection:
//! close`, as a fleet of separate clients would. Misses of a budget are reported, not turned
//! into a failing exit status.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1 as server_http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::counted::{self, Callgrind, PerEvent};
use crate::harness::{ChildGuard, clock_ticks, cpu_ticks, pin_self, spawn_server};
use crate::serve::AbortOnDrop;
use crate::workload::chat_body;
use crate::{API_KEY, BoxError, CHAT_PATH, Target, env_or};

struct ScaleSettings {
    streams: usize,
    events: u64,
    interval: Duration,
    large: usize,
    large_rounds: usize,
    cores: (usize, usize),
}

impl ScaleSettings {
    fn from_env() -> Result<Self, BoxError> {
        let streams: usize = env_or("GATEWAY_LOAD_STREAMS", 8000)?;
        let events: u64 = env_or("GATEWAY_LOAD_STREAM_EVENTS", 60)?;
        let interval: f64 = env_or("GATEWAY_LOAD_EVENT_SECS", 1.0)?;
        let large: usize = env_or("GATEWAY_LOAD_LARGE", 64)?;
        let large_rounds: usize = env_or("GATEWAY_LOAD_LARGE_ROUNDS", 5)?;
        if !(1..=9000).contains(&streams) {
            return Err(format!("GATEWAY_LOAD_STREAMS: expected 1..=9000 (each stream holds two files in the process under test), found {streams}").into());
        }
        if !(1..=3600).contains(&events) || !(0.001..=60.0).contains(&interval) {
            return Err("GATEWAY_LOAD_STREAM_EVENTS: expected 1..=3600; GATEWAY_LOAD_EVENT_SECS: expected 0.001..=60".into());
        }
        if !(1..=512).contains(&large) || !(1..=100).contains(&large_rounds) {
            return Err(
                "GATEWAY_LOAD_LARGE: expected 1..=512; GATEWAY_LOAD_LARGE_ROUNDS: expected 1..=100"
                    .into(),
            );
        }
        Ok(Self {
            streams,
            events,
            interval: Duration::from_secs_f64(interval),
            large,
            large_rounds,
            cores: (0, 1),
        })
    }
}

/// What one target did in the two phases.
#[derive(Default)]
struct Figures {
    idle_kib: u64,
    open_kib: u64,
    streams_done: usize,
    events: u64,
    cpu_us_per_event: f64,
    large_ok: usize,
    peak_kib: u64,
    /// The open-streams phase counted under callgrind, when asked for.
    counted: Option<PerEvent>,
}

pub(crate) fn scale_main() -> Result<(), BoxError> {
    let settings = ScaleSettings::from_env()?;
    let callgrind = Callgrind::from_env()?;
    let pinning = pin_self(settings.cores);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        println!("scale: {}", pinning.note);
        let (addr, _provider) = provider(settings.events, settings.interval).await?;
        let upstream = format!("http://{addr}");
        let dir = tempfile::tempdir()?;
        let mut rows = Vec::new();
        for target in [Target::Plain, Target::GatewayOn] {
            let core = pinning.child_core;
            let f = measure(
                &settings,
                target,
                &upstream,
                dir.path(),
                core,
                callgrind.as_ref(),
            )
            .await?;
            if let Some(why) = FAILURE.lock().ok().and_then(|mut f| f.take()) {
                println!("scale: {}: first failure: {why}", target.name());
            }
            rows.push((target, f));
        }
        report(&settings, &rows);
        let counted: Vec<_> = rows
            .iter()
            .filter_map(|(t, f)| Some((*t, f.counted?)))
            .collect();
        counted::report(&counted, callgrind.as_ref());
        Ok(())
    })
}

async fn measure(
    s: &ScaleSettings,
    target: Target,
    upstream: &str,
    dir: &std::path::Path,
    core: Option<usize>,
    callgrind: Option<&Callgrind>,
) -> Result<Figures, BoxError> {
    let tick_us = 1e6 / clock_ticks() as f64;
    let mut f = Figures::default();

    // Open streams, in a fresh process (each phase has its own folder for the port file).
    let streams_dir = dir.join("streams");
    let large_dir = dir.join("large");
    std::fs::create_dir_all(&streams_dir)?;
    std::fs::create_dir_all(&large_dir)?;
    let mut guard = ChildGuard::default();
    let wrap = callgrind.map(|c| c.wrapper(target)).unwrap_or_default();
    let (pid, addr) = spawn_server(&mut guard, target, upstream, &streams_dir, core, &wrap)?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    f.idle_kib = status_kib(pid, "VmRSS")?;
    let cpu0 = cpu_ticks(pid)?;
    let first = Arc::new(AtomicUsize::new(0));
    let events = Arc::new(AtomicU64::new(0));
    let body = chat_body(1024, 1, true);
    let mut tasks = Vec::with_capacity(s.streams);
    for i in 0..s.streams {
        tasks.push(tokio::spawn(one_stream(
            addr,
            body.clone(),
            first.clone(),
            events.clone(),
            s.events,
        )));
        // A fleet connects over a few seconds, not in one instant (nor does the accept queue).
        if i % 200 == 199 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let deadline = Instant::now() + s.interval * 2 + Duration::from_secs(60);
    while first.load(Ordering::Relaxed) < s.streams && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        f.open_kib = f.open_kib.max(status_kib(pid, "VmRSS")?);
    }
    let opened = first.load(Ordering::Relaxed);
    if opened < s.streams {
        println!(
            "scale: {}: only {opened} of {} streams had their first event",
            target.name(),
            s.streams
        );
    }
    // The plateau: every stream open, none finished yet.
    for _ in 0..5 {
        f.open_kib = f.open_kib.max(status_kib(pid, "VmRSS")?);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(cg) = callgrind {
        f.counted = Some(cg.count(pid, target, &events).await?);
    }
    for t in tasks {
        if matches!(t.await, Ok(true)) {
            f.streams_done += 1;
        }
    }
    f.events = events.load(Ordering::Relaxed);
    let cpu = cpu_ticks(pid)?.saturating_sub(cpu0) as f64 * tick_us;
    f.cpu_us_per_event = cpu / f.events.max(1) as f64;
    drop(guard);

    // Large bodies, in a fresh process.
    let mut guard = ChildGuard::default();
    let (pid, addr) = spawn_server(&mut guard, target, upstream, &large_dir, core, &[])?;
    let large = chat_body(1024 * 1024, 900, false);
    for round in 0..s.large_rounds {
        let tasks: Vec<_> = (0..s.large)
            .map(|i| tokio::spawn(one_large(addr, large.clone(), round * s.large + i)))
            .collect();
        for t in tasks {
            if matches!(t.await, Ok(true)) {
                f.large_ok += 1;
            }
        }
    }
    f.peak_kib = status_kib(pid, "VmHWM")?;
    drop(guard);
    Ok(f)
}

/// Why the first failed stream failed (the report shows it).
static FAILURE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn failed(why: String) -> bool {
    if let Ok(mut first) = FAILURE.lock() {
        first.get_or_insert(why);
    }
    false
}

/// One client's stream: `true` when it read every event and the end of the response.
async fn one_stream(
    addr: SocketAddr,
    body: Bytes,
    first: Arc<AtomicUsize>,
    events: Arc<AtomicU64>,
    expected: u64,
) -> bool {
    let mut conn = match TcpStream::connect(addr).await {
        Ok(c) => c,
        Err(e) => return failed(format!("connect: {e}")),
    };
    let head = format!(
        "POST {CHAT_PATH} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\nauthorization: Bearer {API_KEY}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    if let Err(e) = conn.write_all(head.as_bytes()).await {
        return failed(format!("write: {e}"));
    }
    if let Err(e) = conn.write_all(&body).await {
        return failed(format!("write: {e}"));
    }
    // Events end with a blank line; `\r\n\r\n` ends the head and chunk framing uses `\r\n`,
    // so `\n\n` is an event's end (the last byte of a read is carried to the next).
    let mut buf = vec![0u8; 4096];
    let mut last = 0u8;
    let mut seen = 0u64;
    let mut start: Vec<u8> = Vec::new();
    loop {
        match conn.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                if start.len() < 300 {
                    start.extend_from_slice(&buf[..n.min(300)]);
                }
                let mut prev = last;
                for &b in &buf[..n] {
                    if b == b'\n' && prev == b'\n' {
                        seen += 1;
                        events.fetch_add(1, Ordering::Relaxed);
                        if seen == 1 {
                            first.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    prev = b;
                }
                last = prev;
            }
            Err(e) => return failed(format!("read after {seen} events: {e}")),
        }
    }
    // The events and `[DONE]`.
    if seen != expected + 1 {
        return failed(format!(
            "{seen} events instead of {}; the answer began {:?}",
            expected + 1,
            String::from_utf8_lossy(&start)
        ));
    }
    true
}

/// One large request: `true` on a 200.
async fn one_large(addr: SocketAddr, body: Bytes, i: usize) -> bool {
    let conn = match TcpStream::connect(addr).await {
        Ok(c) => c,
        Err(e) => return failed(format!("large: connect: {e}")),
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(conn)).await {
            Ok(pair) => pair,
            Err(e) => return failed(format!("large: handshake: {e}")),
        };
    let _conn = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    let Ok(req) = Request::post(CHAT_PATH)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {API_KEY}"))
        .header("x-session-id", format!("scale-{i}"))
        .body(Full::new(body))
    else {
        return false;
    };
    match sender.send_request(req).await {
        Ok(res) => {
            let status = res.status();
            let body = res.into_body().collect().await.map(|c| c.to_bytes());
            match body {
                Ok(_) if status == 200 => true,
                Ok(b) => failed(format!("large: {status} {}", String::from_utf8_lossy(&b))),
                Err(e) => failed(format!("large: body: {e}")),
            }
        }
        Err(e) => failed(format!("large: {e}")),
    }
}

/// The provider: a streamed request gets `events` chunks, one every `interval`, then
/// `[DONE]`; any other request a short completion at once. Quota is reported at 0 %.
async fn provider(events: u64, interval: Duration) -> Result<(SocketAddr, AbortOnDrop), BoxError> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service =
                    service_fn(move |req: Request<Incoming>| answer(req, events, interval));
                let _ = server_http1::Builder::new()
                    .serve_connection(TokioIo::new(conn), service)
                    .await;
            });
        }
    });
    Ok((addr, AbortOnDrop(task)))
}

/// A slow stream of events: `events` chunks, one every `interval`, then `[DONE]`.
struct Events {
    sent: u64,
    events: u64,
    interval: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Events {
    fn new(events: u64, interval: Duration) -> Self {
        Self {
            sent: 0,
            events,
            interval,
            sleep: Box::pin(tokio::time::sleep(interval)),
        }
    }
}

impl Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if this.sent > this.events {
            return Poll::Ready(None);
        }
        if this.sent == this.events {
            this.sent += 1;
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                b"data: [DONE]\n\n",
            )))));
        }
        if this.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let i = this.sent;
        this.sent += 1;
        let next = tokio::time::Instant::now() + this.interval;
        this.sleep.as_mut().reset(next);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"token {i} \"}}}}]}}\n\n"
        ))))))
    }

    fn is_end_stream(&self) -> bool {
        self.sent > self.events
    }
}

async fn answer(
    req: Request<Incoming>,
    events: u64,
    interval: Duration,
) -> Result<Response<Either<Events, Full<Bytes>>>, Infallible> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    // Only the small bodies ask for a stream.
    let streamed = body.len() < 8192 && body.windows(13).any(|w| w == b"\"stream\":true");
    let mut res = if streamed {
        let mut r = Response::new(Either::Left(Events::new(events, interval)));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().expect("static"));
        r
    } else {
        let mut r = Response::new(Either::Right(Full::new(Bytes::from_static(
            br#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#,
        ))));
        r.headers_mut()
            .insert("content-type", "application/json".parse().expect("static"));
        r
    };
    res.headers_mut()
        .insert("x-codex-primary-used-percent", "0".parse().expect("static"));
    Ok(res)
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, key: &str) -> Result<u64, BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("/proc/{pid}/status: expected a {key} line in kB").into())
}

fn report(s: &ScaleSettings, rows: &[(Target, Figures)]) {
    let in_flight_kib = (s.large * 1024) as u64;
    println!();
    println!(
        "| target | RSS before | RSS, {} streams open | per open stream | CPU per event | streams complete | events | peak RSS, {}×1 MiB | 1 MiB answers |",
        s.streams, s.large
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (t, f) in rows {
        println!(
            "| {} | {:.1} MiB | {:.1} MiB | {:.1} KiB | {:.2} µs | {}/{} | {} | {:.1} MiB | {}/{} |",
            t.name(),
            f.idle_kib as f64 / 1024.0,
            f.open_kib as f64 / 1024.0,
            f.open_kib.saturating_sub(f.idle_kib) as f64 / s.streams as f64,
            f.cpu_us_per_event,
            f.streams_done,
            s.streams,
            f.events,
            f.peak_kib as f64 / 1024.0,
            f.large_ok,
            s.large * s.large_rounds,
        );
    }
    let find = |want: Target| rows.iter().find(|(t, _)| *t == want).map(|(_, f)| f);
    if let (Some(bare), Some(gw)) = (find(Target::Plain), find(Target::GatewayOn)) {
        let per = |f: &Figures| f.open_kib.saturating_sub(f.idle_kib) as f64 / s.streams as f64;
        let mem = per(gw) / per(bare).max(1e-9);
        let cpu = gw.cpu_us_per_event / bare.cpu_us_per_event.max(1e-9);
        let peak_budget = 2.5 * in_flight_kib as f64 + 64.0 * 1024.0;
        let mark = |ok: bool| if ok { "✔" } else { "✘" };
        println!();
        println!(
            "memory per open stream, gateway / bare: {mem:.2}× (≤ 2×: {})",
            mark(mem <= 2.0)
        );
        println!(
            "CPU per event, gateway / bare: {cpu:.2}× (≤ 1.2×: {})",
            mark(cpu <= 1.2)
        );
        println!(
            "all streams complete: {}",
            mark(gw.streams_done == s.streams && bare.streams_done == s.streams)
        );
        println!(
            "gateway peak RSS with {} MiB in flight: {:.1} MiB (≤ 2.5 × in flight + 64 MiB = {:.1} MiB: {})",
            s.large,
            gw.peak_kib as f64 / 1024.0,
            peak_budget / 1024.0,
            mark(gw.peak_kib as f64 <= peak_budget)
        );
    }
}
