//! Hostile clients and stalled peers over loopback: a real gateway on 127.0.0.1:0 with client
//! keys and small `[limits]`, raw TCP clients where a well-behaved HTTP client would hide the
//! misbehaviour, and stalled upstreams made of raw TCP listeners.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_gateway::config::Config;
use context_relay_gateway::{Gateway, RunningGateway};
use context_relay_sim::SimProvider;
use context_relay_testkit::harness::{CodexGateway, Harness, http_client, spawn};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod operator;
mod provider;
mod refusals;
mod stalls;

const HEADER_TIMEOUT: f64 = 1.0;
const BODY_TIMEOUT: f64 = 0.5;
const HEAD_TIMEOUT: f64 = 0.5;
const IDLE_TIMEOUT: f64 = 0.5;

fn config(base_url: &str, stalled_url: &str) -> Config {
    Config::from_toml_str(
        &format!(
            r#"
admin_token = "adm"
[store]
backend = "memory"
[limits]
client_header_timeout_secs = {HEADER_TIMEOUT}
client_body_timeout_secs = {BODY_TIMEOUT}
upstream_head_timeout_secs = {HEAD_TIMEOUT}
upstream_idle_timeout_secs = {IDLE_TIMEOUT}
upstream_connect_timeout_secs = 1
shutdown_timeout_secs = 1
[[providers]]
name = "codex"
base_url = "{base_url}"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
[[providers]]
name = "stalled"
base_url = "{stalled_url}"
quota = "none"
  [[providers.accounts]]
  id = "acct-s"
  api_key = "key-s"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
[[combos]]
name = "other"
targets = ["codex/gpt-5.5"]
[[combos]]
name = "stalled"
targets = ["stalled/m"]
[[clients]]
name = "alice"
key = "alice-key"
combos = ["codex-relay", "stalled"]
[[clients]]
name = "bob"
key_sha256 = "{bob}"
"#,
            bob = sha256_hex("bob-key"),
        ),
        |_| None,
    )
    .unwrap()
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The harness over [`config`], and the stalled upstream of its `stalled` provider.
struct Env {
    h: Harness,
    stalled: StalledUpstream,
}

async fn setup() -> Env {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let stalled = StalledUpstream::start().await;
    let gateway = Gateway::new(config(&sim.base_url(), &stalled.base_url())).unwrap();
    Env {
        h: Harness::serve(sim, gateway).await,
        stalled,
    }
}

impl Env {
    fn url(&self, path: &str) -> String {
        self.h.url(0, path)
    }

    fn addr(&self) -> SocketAddr {
        self.h.gateways[0].1.addr()
    }

    async fn post(&self, path: &str, key: Option<&str>, model: &str) -> (StatusCode, Value) {
        let mut req = Request::post(self.url(path));
        if let Some(k) = key {
            req = req.header("authorization", format!("Bearer {k}"));
        }
        // As real clients send them: `max_tokens` is required by Messages and refused by
        // GPT-5-family Chat Completions.
        let mut body = serde_json::json!({
            "model": model,
            "messages": [{"role": "user", "content": "hi"}]
        });
        if path.starts_with("/v1/messages") {
            body["max_tokens"] = 16.into();
        }
        let res = self
            .h
            .client
            .request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

/// A provider that accepts connections and then says nothing (`/head/…`), or sends a response
/// head and one SSE event and then nothing (`/body/…`).
struct StalledUpstream {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl StalledUpstream {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut tcp, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut seen = Vec::new();
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tcp.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&seen).to_string();
                    if head.contains("x-stall: headers") {
                        // Echo the request head, with account-identity headers around it.
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\
                             set-cookie: acct=1\r\nopenai-organization: org-acct\r\n\
                             openai-project: proj-acct\r\nx-request-id: req-provider\r\n\
                             anthropic-organization-id: org-a\r\nx-keep: 1\r\n\
                             content-length: {}\r\n\r\n{head}",
                            head.len()
                        );
                        let _ = tcp.write_all(reply.as_bytes()).await;
                        return;
                    }
                    if head.contains("x-stall: big429") {
                        let body = "x".repeat(100_000);
                        let reply = format!(
                            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain\r\n\
                             content-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = tcp.write_all(reply.as_bytes()).await;
                        return;
                    }
                    if head.contains("x-stall: body") {
                        let _ = tcp
                            .write_all(
                                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                  transfer-encoding: chunked\r\n\r\n\
                                  13\r\ndata: {\"partial\":1}\n\r\n",
                            )
                            .await;
                    }
                    // Then silence, with the connection open.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    drop(tcp);
                });
            }
        });
        Self { addr, task }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for StalledUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn missing_wrong_and_forbidden_keys_in_the_api_shape() {
    let env = setup().await;
    // No key, OpenAI shape.
    let (status, body) = env.post("/v1/chat/completions", None, "codex-relay").await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["type"], "invalid_api_key", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("client key")
    );
    // A wrong key, Anthropic shape.
    let (status, body) = env
        .post("/v1/messages", Some("alice-kee"), "codex-relay")
        .await;
    assert_eq!(status, 401);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    // The error never echoes the key that was tried.
    assert!(!body.to_string().contains("alice-kee"));
    // Alice may use codex-relay, not another combo nor a direct target.
    let (status, _) = env
        .post("/v1/chat/completions", Some("alice-key"), "codex-relay")
        .await;
    assert_eq!(status, 200);
    let (status, body) = env
        .post("/v1/chat/completions", Some("alice-key"), "other")
        .await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["type"], "permission_denied", "{body}");
    let (status, body) = env
        .post("/v1/messages", Some("alice-key"), "codex/gpt-5.5")
        .await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["type"], "permission_error", "{body}");
    // Bob, known by the SHA-256 of his key only, may use anything.
    let (status, _) = env
        .post("/v1/chat/completions", Some("bob-key"), "other")
        .await;
    assert_eq!(status, 200);
    // His sessions are his: the tenant is the client's name.
    let req = Request::get(env.url("/admin/accounts"))
        .header("authorization", "Bearer adm")
        .body(Full::default())
        .unwrap();
    let res = env.h.client.request(req).await.unwrap();
    let v: Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let acct_a = v["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["account"] == "acct-a")
        .unwrap();
    assert!(acct_a["sessions"].as_u64().unwrap() >= 1, "{v}");
}

/// Alice's chat request with `content-length: {length}` and only `{"model":` of its body:
/// the gateway's answer, read until it closes the connection, and when it did.
async fn unfinished_request(env: &Env, length: u64) -> (String, Duration) {
    unfinished_request_as(env, "alice-key", "/v1/chat/completions", length).await
}

/// [`unfinished_request`] with the client key `key`, to `path`.
async fn unfinished_request_as(
    env: &Env,
    key: &str,
    path: &str,
    length: u64,
) -> (String, Duration) {
    let mut tcp = TcpStream::connect(env.addr()).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\
         content-type: application/json\r\ncontent-length: {length}\r\n\r\n{{\"model\":"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (bytes, after) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    (String::from_utf8_lossy(&bytes).into_owned(), after)
}

/// The `error.message` of an answer in the OpenAI error shape.
async fn error_message(res: http::Response<hyper::body::Incoming>) -> String {
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// One answer of a keep-alive HTTP/1 connection: its head and its `content-length` bytes of
/// body, as text.
async fn read_answer(tcp: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        assert_eq!(tcp.read(&mut byte).await.unwrap(), 1, "closed mid-head");
        out.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&out).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a content-length");
    let mut body = vec![0u8; length];
    tcp.read_exact(&mut body).await.unwrap();
    head + &String::from_utf8_lossy(&body)
}

/// Reads until the peer closes (or `limit` passes); returns what was read and when it ended.
async fn read_until_closed(tcp: &mut TcpStream, limit: Duration) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + limit).into(), tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, started.elapsed()),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the connection was still open after {limit:?}"),
        }
    }
}

/// A gateway over `base_url` with extra top-level keys and `[limits]` lines.
async fn small_gateway(base_url: &str, top: &str, limits: &str) -> (Gateway, RunningGateway) {
    let store = format!("backend = \"memory\"\n[limits]\n{limits}");
    let config = CodexGateway {
        accounts: &["acct-a"],
        top,
        store: &store,
        provider: "quota = \"none\"",
    }
    .config(base_url);
    spawn(Gateway::new(config).unwrap()).await
}
