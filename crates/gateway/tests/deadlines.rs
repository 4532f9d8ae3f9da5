//! The deadlines that bound a request whatever its peers do, over loopback: a client that
//! stops reading a stream (`client_write_timeout_secs`), and a request that keeps making
//! progress for too long (`request_timeout_secs`). The providers are raw TCP listeners that
//! behave as a fast or a trickling stream would.

use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_gateway::config::Config;
use context_relay_gateway::{Gateway, RunningGateway};
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use context_relay_testkit::harness::{CodexGateway, http_client, spawn};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// How a [`StreamingUpstream`] answers.
#[derive(Clone, Copy)]
enum Pace {
    /// SSE events of 16 KiB as fast as the gateway takes them, for ever.
    Firehose,
    /// One small SSE event every 100 ms, for ever (never idle long enough to be cut).
    Trickle,
    /// Never a response head.
    Silent,
}

/// A provider that streams at `pace` and tells on `closed` when the gateway dropped its
/// connection (a write failed, or the gateway hung up).
struct StreamingUpstream {
    base_url: String,
    closed: mpsc::UnboundedReceiver<Instant>,
    task: tokio::task::JoinHandle<()>,
}

impl StreamingUpstream {
    async fn start(pace: Pace) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, closed) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(answer(tcp, pace, tx.clone()));
            }
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            closed,
            task,
        }
    }
}

impl Drop for StreamingUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(mut tcp: TcpStream, pace: Pace, closed: mpsc::UnboundedSender<Instant>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    if let Pace::Silent = pace {
        // Wait for the gateway to hang up.
        let _ = tcp.read(&mut buf).await;
        let _ = closed.send(Instant::now());
        return;
    }
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                 transfer-encoding: chunked\r\n\r\n";
    if tcp.write_all(head).await.is_err() {
        return;
    }
    let (event, pause) = match pace {
        Pace::Firehose => (
            format!("data: {{\"delta\":\"{}\"}}\n\n", "x".repeat(16 << 10)),
            None,
        ),
        _ => (
            "data: {\"delta\":\"x\"}\n\n".to_owned(),
            Some(Duration::from_millis(100)),
        ),
    };
    let chunk = format!("{:x}\r\n{event}\r\n", event.len());
    loop {
        if tcp.write_all(chunk.as_bytes()).await.is_err() {
            let _ = closed.send(Instant::now());
            return;
        }
        if let Some(p) = pause {
            tokio::time::sleep(p).await;
        }
    }
}

async fn gateway(base_url: &str, limits: &str) -> (Gateway, RunningGateway) {
    spawn(Gateway::new(config(base_url, limits)).unwrap()).await
}

/// One account of a provider at `base_url`, the memory store and `limits`.
fn config(base_url: &str, limits: &str) -> Config {
    let store = format!("backend = \"memory\"\n[limits]\n{limits}");
    CodexGateway {
        accounts: &["acct-a"],
        store: &store,
        provider: "quota = \"none\"",
        ..CodexGateway::default()
    }
    .config(base_url)
}

/// The streamed chat request, through a well-behaved client.
async fn post_stream(server: &RunningGateway) -> http::Response<hyper::body::Incoming> {
    http_client()
        .request(
            Request::post(format!("{}/v1/chat/completions", server.url()))
                .body(Full::new(Bytes::from_static(STREAM.as_bytes())))
                .unwrap(),
        )
        .await
        .unwrap()
}

const STREAM: &str =
    r#"{"model":"codex-relay","stream":true,"messages":[{"role":"user","content":"go"}]}"#;

/// A client that sends its request and then never reads: the gateway's writes to it wait,
/// and at `client_write_timeout_secs` the connection is closed and the provider's stream
/// dropped, instead of both being held for as long as the client likes.
#[tokio::test]
async fn a_client_that_stops_reading_is_closed_at_the_write_timeout() {
    let mut upstream = StreamingUpstream::start(Pace::Firehose).await;
    let (_gateway, server) = gateway(
        &upstream.base_url,
        "client_write_timeout_secs = 1\nupstream_idle_timeout_secs = 60",
    )
    .await;
    let mut client = TcpStream::connect(server.addr()).await.unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{STREAM}",
        STREAM.len()
    );
    client.write_all(request.as_bytes()).await.unwrap();
    let sent = Instant::now();
    // The client reads nothing: the socket buffers fill within the first megabytes, then
    // every write waits.
    let dropped = tokio::time::timeout(Duration::from_secs(10), upstream.closed.recv())
        .await
        .expect("the provider's stream was held while the client did not read")
        .unwrap();
    let held = dropped - sent;
    assert!(held < Duration::from_secs(5), "held {held:?}");
    // Reset, not closed gracefully: the gateway's side of the socket is gone, not left
    // (outside the process) holding the megabytes the client did not read.
    let ports = (server.addr().port(), client.local_addr().unwrap().port());
    let mut state = gateway_side(ports);
    for _ in 0..100 {
        if state.is_none_or(|(st, _)| st != ESTABLISHED) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        state = gateway_side(ports);
    }
    assert_eq!(
        state, None,
        "the gateway's socket (TCP state, bytes unsent) outlived its connection"
    );
    // The client's connection was closed too: reading it to the end finishes.
    let mut sink = vec![0u8; 1 << 20];
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the client's connection stayed open");
}

/// The `/proc/net/tcp` state code of an open connection.
const ESTABLISHED: u8 = 1;

/// The TCP state and the bytes waiting to be sent of the gateway's socket of a connection
/// (`ports`: the gateway's and the client's), as the kernel lists it; `None` once it is gone.
fn gateway_side((gateway, client): (u16, u16)) -> Option<(u8, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
        if port(fields.get(1)?)? != gateway || port(fields.get(2)?)? != client {
            return None;
        }
        let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
        let unsent = u64::from_str_radix(fields.get(4)?.split(':').next()?, 16).ok()?;
        Some((state, unsent))
    })
}

/// The write timeout is no idle timeout: a client that reads slowly but steadily keeps its
/// stream, however long it lasts.
#[tokio::test]
async fn a_client_that_reads_slowly_keeps_its_stream() {
    let upstream = StreamingUpstream::start(Pace::Firehose).await;
    let (_gateway, server) = gateway(&upstream.base_url, "client_write_timeout_secs = 0.5").await;
    let mut client = TcpStream::connect(server.addr()).await.unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{STREAM}",
        STREAM.len()
    );
    client.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0usize;
    let started = Instant::now();
    // With a pause after every read, for four times the write timeout.
    while started.elapsed() < Duration::from_secs(2) {
        let n = client.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream ended after {read} bytes");
        read += n;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(read > 1 << 20, "{read} bytes");
}

/// A stream that never stalls long enough for the idle timeout is cut at
/// `request_timeout_secs`, counted from the request; it ends in an error, not complete.
#[tokio::test]
async fn a_trickling_stream_is_cut_at_the_request_deadline() {
    let mut upstream = StreamingUpstream::start(Pace::Trickle).await;
    let (_gateway, server) = gateway(
        &upstream.base_url,
        "request_timeout_secs = 1\nupstream_idle_timeout_secs = 0.5",
    )
    .await;
    let started = Instant::now();
    let res = post_stream(&server).await;
    assert_eq!(res.status(), 200);
    let end = tokio::time::timeout(Duration::from_secs(10), res.into_body().collect())
        .await
        .expect("the stream was never cut");
    assert!(end.is_err(), "a cut stream must not look complete");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let dropped = tokio::time::timeout(Duration::from_secs(5), upstream.closed.recv())
        .await
        .expect("the provider's stream was kept after the cut");
    assert!(dropped.is_some());
}

/// An HTTP/2 client that keeps its connection open and read but never opens one stream's
/// flow-control window: the gateway cannot send that stream's body, so the body is never
/// polled and cannot see its own deadline. The stream is still reset soon after
/// `request_timeout_secs`, and the provider's stream dropped with it.
#[tokio::test]
async fn an_http2_stream_whose_window_stays_shut_is_cut_at_the_request_deadline() {
    let mut upstream = StreamingUpstream::start(Pace::Trickle).await;
    let (_gateway, server) = gateway(&upstream.base_url, SHORT_DEADLINE).await;
    zero_window_stream_is_cut(&server, &mut upstream).await;
}

/// The bound of HTTP/2 streams follows a configuration reload, as the request deadline does.
#[tokio::test]
async fn the_http2_stream_bound_follows_a_reload() {
    let mut upstream = StreamingUpstream::start(Pace::Trickle).await;
    let (gateway, server) = gateway(&upstream.base_url, "request_timeout_secs = 600").await;
    let shorter = config(&upstream.base_url, SHORT_DEADLINE);
    let _reloaded = gateway.reload(shorter).await.unwrap();
    zero_window_stream_is_cut(&server, &mut upstream).await;
}

const SHORT_DEADLINE: &str = "request_timeout_secs = 1\nupstream_idle_timeout_secs = 0.5";

/// Sends the streamed request from an HTTP/2 client with a zero initial window that never
/// reads the body; the provider's stream must be dropped within a few seconds of the 1 s
/// deadline, and the client's stream reset.
async fn zero_window_stream_is_cut(server: &RunningGateway, upstream: &mut StreamingUpstream) {
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(0)
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    // The connection keeps being read (pings, other frames), as a live client's is.
    tokio::spawn(conn);
    let started = Instant::now();
    let res = send
        .send_request(
            Request::post(format!("{}/v1/chat/completions", server.url()))
                .body(Full::new(Bytes::from_static(STREAM.as_bytes())))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // The body is never read: the window stays shut.
    let body = res.into_body();
    let dropped = tokio::time::timeout(Duration::from_secs(8), upstream.closed.recv())
        .await
        .expect("the provider's stream was held past the request deadline");
    assert!(dropped.is_some());
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(1), "{took:?}");
    // The client's stream was reset: its body ends in an error, not complete.
    let end = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .expect("the reset stream's body never ended");
    assert!(end.is_err(), "a reset stream must not look complete");
}

/// A provider that never answers, with a head timeout longer than the request deadline: the
/// client gets the deadline's 504 in its API's error shape, and the provider's connection is
/// dropped.
#[tokio::test]
async fn no_head_within_the_request_deadline_is_a_504() {
    let mut upstream = StreamingUpstream::start(Pace::Silent).await;
    let (_gateway, server) = gateway(
        &upstream.base_url,
        "request_timeout_secs = 0.5\nupstream_head_timeout_secs = 60",
    )
    .await;
    let started = Instant::now();
    let res = post_stream(&server).await;
    assert_eq!(res.status(), 504);
    assert!(started.elapsed() < Duration::from_secs(3));
    let v: Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("request_timeout_secs"), "{message}");
    tokio::time::timeout(Duration::from_secs(5), upstream.closed.recv())
        .await
        .expect("the provider's connection was kept after the 504");
}
