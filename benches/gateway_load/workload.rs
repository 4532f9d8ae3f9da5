//! The load generator: request kinds and mixes, keep-alive workers, and the statistics of a
//! measurement window.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1 as client_http1;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpStream;

use crate::harness::cpu_ticks;
use crate::{BoxError, CHAT_PATH, COMBO, MAX_REQUESTS_PER_WORKER, REQUEST_TIMEOUT};

#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Small,
    Large,
    Stream,
}

impl Kind {
    pub(crate) const ALL: [Kind; 3] = [Kind::Small, Kind::Large, Kind::Stream];

    /// The name in `GATEWAY_LOAD_MIX`.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Kind::Small => "1k",
            Kind::Large => "100k",
            Kind::Stream => "sse",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Small => "1 KB",
            Kind::Large => "100 KB",
            Kind::Stream => "SSE",
        }
    }
}

/// The request bodies, built once and shared (a `Bytes` clone is a reference count).
pub(crate) struct Mix {
    /// Indices into [`Kind::ALL`], sent in turn.
    pub(crate) kinds: Vec<usize>,
    pub(crate) small: Bytes,
    pub(crate) large: Bytes,
    pub(crate) stream: Bytes,
}

impl Mix {
    pub(crate) fn new(kinds: Vec<usize>) -> Self {
        Self {
            kinds,
            small: chat_body(1024, 1, false),
            // A system message and 44 turns: 45 messages.
            large: chat_body(100 * 1024, 44, false),
            stream: chat_body(1024, 1, true),
        }
    }

    pub(crate) fn body(&self, kind: Kind) -> Bytes {
        match kind {
            Kind::Small => self.small.clone(),
            Kind::Large => self.large.clone(),
            Kind::Stream => self.stream.clone(),
        }
    }
}

/// A Chat Completions body of exactly `size` bytes: a system prompt and `turns` user/assistant
/// messages, the last one padded to the size. `model` is its first member, as Codex CLI,
/// Claude Code and the shared perf harness write it (`serde_json` would sort it after
/// `messages`, which sends a large body down the gateway's joining path instead of the one a
/// late agent turn takes).
pub(crate) fn chat_body(size: usize, turns: usize, stream: bool) -> Bytes {
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
        let streamed = if stream {
            r#","stream":true,"stream_options":{"include_usage":true}"#
        } else {
            ""
        };
        format!(
            r#"{{"model":{},"messages":{},"temperature":0.2{streamed}}}"#,
            json!(COMBO),
            json!(messages),
        )
    };
    let base = build(0).len();
    Bytes::from(build(size.saturating_sub(base)))
}

#[derive(Default)]
pub(crate) struct WindowStats {
    pub(crate) ok: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    /// Per [`Kind`], in [`Kind::ALL`] order.
    pub(crate) latencies_us: [Vec<u64>; 3],
}

impl WindowStats {
    pub(crate) fn merge(&mut self, other: WindowStats) {
        self.ok += other.ok;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        for (mine, theirs) in self.latencies_us.iter_mut().zip(other.latencies_us) {
            mine.extend(theirs);
        }
    }

    pub(crate) fn error(&mut self, e: impl fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }
}

pub(crate) async fn connect(
    addr: SocketAddr,
) -> Result<client_http1::SendRequest<Full<Bytes>>, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = client_http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One keep-alive connection sending the mix in turn until `deadline`.
pub(crate) async fn worker(
    addr: SocketAddr,
    index: usize,
    deadline: Instant,
    mix: Arc<Mix>,
) -> WindowStats {
    let mut stats = WindowStats::default();
    let host = HeaderValue::from_str(&addr.to_string()).unwrap_or(HeaderValue::from_static("x"));
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

pub(crate) struct Window {
    pub(crate) stats: WindowStats,
    pub(crate) elapsed: Duration,
    pub(crate) cpu_ticks: Option<u64>,
}

pub(crate) async fn run_window(
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
