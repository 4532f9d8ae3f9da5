//! Connection slots against sockets that never send a request: a one-byte socket or a bare
//! HTTP/2 preface is closed at the header deadline and takes no slot meanwhile, and an idle
//! HTTP/2 connection is closed, also when its client never answers the closing `GOAWAY`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_gateway::RunningGateway;
use context_relay_sim::SimProvider;
use context_relay_testkit::harness::{CodexGateway, http_client, spawn};
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX: usize = 20;

async fn gateway(header_timeout: &str) -> (SimProvider, RunningGateway) {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let store = format!(
        "backend = \"memory\"\n[limits]\nmax_connections = {MAX}\nclient_header_timeout_secs = {header_timeout}"
    );
    let config = CodexGateway {
        accounts: &["acct-a"],
        top: "",
        store: &store,
        provider: "quota = \"none\"",
    }
    .config(&sim.base_url());
    let (_gateway, server) = spawn(context_relay_gateway::Gateway::new(config).unwrap()).await;
    (sim, server)
}

/// Time until `/healthz` answers 200 on a fresh connection, retrying closed ones, at most
/// `limit`.
async fn healthz_within(server: &RunningGateway, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let client = http_client();
    while started.elapsed() < limit {
        let req = Request::get(format!("{}/healthz", server.url()))
            .body(Full::default())
            .unwrap();
        if let Ok(Ok(res)) = tokio::time::timeout(limit, client.request(req)).await
            && res.status() == 200
        {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// How long after now the connection task `conn` ends (the gateway closed it), at most 10 s.
async fn closed_after<T, E: std::fmt::Debug>(
    conn: tokio::task::JoinHandle<Result<T, E>>,
    what: &str,
) -> Duration {
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), conn)
        .await
        .unwrap_or_else(|_| panic!("the idle {what} connection was still open after 10 s"))
        .unwrap()
        .unwrap();
    started.elapsed()
}

/// Whether the peer closes `tcp` within `limit`.
async fn closed_within(tcp: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 256];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

/// Twice `max_connections` sockets that send one byte or the HTTP/2 preface (a long header
/// timeout, so they stay open meanwhile): `/healthz` still answers at once.
#[tokio::test]
async fn sockets_without_a_request_take_no_slot() {
    let (_sim, server) = gateway("30").await;
    let mut idle = Vec::new();
    for i in 0..2 * MAX {
        let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
        let start: &[u8] = if i % 2 == 0 {
            b"P"
        } else {
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        };
        tcp.write_all(start).await.unwrap();
        idle.push(tcp);
    }
    let took = healthz_within(&server, Duration::from_secs(10))
        .await
        .expect("/healthz never answered while sockets without a request were open");
    assert!(took < Duration::from_secs(5), "/healthz took {took:?}");
    drop(idle);
}

/// A socket that sent one byte, or the HTTP/2 preface and nothing more, is closed at the
/// header deadline.
#[tokio::test]
async fn a_connection_without_a_request_head_is_closed_at_the_deadline() {
    let (_sim, server) = gateway("0.5").await;
    for start in [&b"P"[..], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b""] {
        let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
        tcp.write_all(start).await.unwrap();
        let started = Instant::now();
        assert!(
            closed_within(&mut tcp, Duration::from_secs(10)).await,
            "a socket that sent {start:?} was still open after 10 s"
        );
        assert!(started.elapsed() >= Duration::from_millis(400));
    }
}

/// An HTTP/2 connection that served a request and then stays idle is closed (GOAWAY), and so
/// is an HTTP/1 keep-alive connection.
#[tokio::test]
async fn idle_connections_are_closed_after_their_last_request() {
    let (_sim, server) = gateway("0.5").await;
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (_send, conn) = http2_healthz(&server, tcp).await;
    assert!(closed_after(conn, "HTTP/2").await >= Duration::from_millis(300));

    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut tcp, Duration::from_secs(10)).await);
}

/// An HTTP/2 connection over `io` that has been answered 200 to one `GET /healthz`: its
/// sender (dropping it lets the connection end) and its task.
async fn http2_healthz<T>(
    server: &RunningGateway,
    io: T,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let res = send
        .send_request(
            Request::get(format!("{}/healthz", server.url()))
                .body(Full::<Bytes>::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.into_body().collect().await.unwrap();
    (send, conn)
}

/// The status line of the answer to a `GET /healthz` whose head carries a `pad` header of
/// `len` bytes, sent on a raw HTTP/1 connection.
async fn status_with_header_of(server: &RunningGateway, len: usize) -> String {
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    let head = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-pad: {}\r\nconnection: close\r\n\r\n",
        "a".repeat(len)
    );
    // The gateway may answer (and close) before it has read the whole head.
    let _ = tcp.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_owned()
}

/// hyper's read buffer per HTTP/1 connection is bounded (128 KiB, not hyper's 400 KiB): a
/// request head that fits is served, one beyond the buffer is refused with 431.
#[tokio::test]
async fn a_request_head_beyond_the_read_buffer_is_refused() {
    let (_sim, server) = gateway("30").await;
    assert_eq!(
        status_with_header_of(&server, 100 << 10).await,
        "HTTP/1.1 200 OK"
    );
    assert_eq!(
        status_with_header_of(&server, 200 << 10).await,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
}

/// The idle deadline counts from the end of the last answer: a stream held for two and a half
/// times the idle time (1 s) is relayed whole, the connection then serves requests spaced half
/// the idle time apart for twice as long as it, and closes only once it has been idle that
/// long.
#[tokio::test]
async fn the_idle_deadline_counts_from_the_last_answer() {
    let (sim, server) = gateway("1").await;
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);

    let hold = sim.hold_streams();
    let stream = Request::post(format!("{}/v1/responses", server.url()))
        .header("session-id", "idle")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","stream":true,"input":"x"}"#,
        )))
        .unwrap();
    let res = send.send_request(stream).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    assert!(body.frame().await.is_some(), "the first event arrived");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    hold.release();
    let text = body.collect().await.expect("the held stream ended whole");
    let text = String::from_utf8_lossy(&text.to_bytes()).into_owned();
    assert!(text.contains("response.completed"), "{text}");

    for i in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        send.ready()
            .await
            .unwrap_or_else(|e| panic!("closed before request {i}: {e}"));
        let req = Request::get(format!("{}/healthz", server.url()))
            .body(Full::<Bytes>::default())
            .unwrap();
        let res = send.send_request(req).await.unwrap();
        assert_eq!(res.status(), 200, "request {i}");
        res.into_body().collect().await.unwrap();
    }
    assert!(closed_after(conn, "HTTP/1").await >= Duration::from_millis(800));
}

/// A socket whose reads stop (`freeze`) once a test says so: its client keeps the connection
/// open, and its writes still go out, but it never reads what the gateway sends from then on.
struct Freezable {
    tcp: TcpStream,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl tokio::io::AsyncRead for Freezable {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.frozen.load(std::sync::atomic::Ordering::Acquire) {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Freezable {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// `max_connections` HTTP/2 connections that each make one request and then never read again,
/// so they never acknowledge the `PING` of the gateway's graceful `GOAWAY` at the idle
/// deadline: the gateway drops them shortly after (its close grace), and their slots serve
/// new clients. Before, each held its slot for as long as its socket stayed open.
#[tokio::test]
async fn idle_http2_connections_that_never_answer_the_goaway_give_back_their_slots() {
    let (_sim, server) = gateway("2").await;
    let mut held = Vec::new();
    for _ in 0..MAX {
        let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let io = Freezable {
            tcp: TcpStream::connect(server.addr()).await.unwrap(),
            frozen: frozen.clone(),
        };
        let held_open = http2_healthz(&server, io).await;
        frozen.store(true, std::sync::atomic::Ordering::Release);
        held.push(held_open);
    }
    // Every slot is held now: a new client is refused until the gateway lets them go.
    let res = http_client()
        .request(
            Request::get(format!("{}/healthz", server.url()))
                .body(Full::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    // Like every answer of the gateway: an id, and the API's error shape.
    assert!(res.headers().contains_key("x-request-id"));
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(res.headers()["content-type"], "application/json");
    // The idle deadline (2 s), then the close grace (at most the same): well within 15 s.
    let took = healthz_within(&server, Duration::from_secs(15))
        .await
        .expect("the slots of HTTP/2 connections that never answered the GOAWAY stayed held");
    assert!(took < Duration::from_secs(10), "{took:?}");
    drop(held);
}
