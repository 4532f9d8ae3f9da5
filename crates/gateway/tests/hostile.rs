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

#[tokio::test]
async fn slow_headers_are_cut_at_the_header_timeout() {
    let env = setup().await;
    let mut tcp = TcpStream::connect(env.addr()).await.unwrap();
    let request =
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer alice-key\r\n";
    let started = Instant::now();
    let mut closed_after = None;
    // One byte a second, as a slowloris client does.
    for b in request {
        if tcp.write_all(&[*b]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut probe = [0u8; 256];
        match tokio::time::timeout(Duration::from_secs(1), tcp.read(&mut probe)).await {
            Ok(Ok(_)) | Ok(Err(_)) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Err(_) => {}
        }
    }
    let closed_after = closed_after.expect("the gateway never closed the slow connection");
    // Closed at the header timeout (with a second of slack for the 1 s probe), long before the
    // request could have been completed.
    assert!(
        closed_after <= Duration::from_secs_f64(HEADER_TIMEOUT + 2.0),
        "closed after {closed_after:?}"
    );
    // The gateway still serves others.
    let (status, _) = env
        .post("/v1/chat/completions", Some("alice-key"), "codex-relay")
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_stalled_request_body_gets_408_and_is_closed() {
    let env = setup().await;
    let mut tcp = TcpStream::connect(env.addr()).await.unwrap();
    tcp.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer alice-key\r\n\
          content-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"model\":",
    )
    .await
    .unwrap();
    let (bytes, after) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("client_body_timeout_secs"), "{text}");
    assert!(
        after <= Duration::from_secs_f64(BODY_TIMEOUT + 1.5),
        "closed after {after:?}"
    );
}

#[tokio::test]
async fn a_stalled_upstream_gives_504_before_the_first_byte() {
    let env = setup().await;
    let started = Instant::now();
    let (status, body) = env.post("/v1/messages", Some("alice-key"), "stalled").await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "timeout_error");
    assert!(started.elapsed() <= Duration::from_secs_f64(HEAD_TIMEOUT + 1.5));
    let (status, body) = env
        .post("/v1/chat/completions", Some("alice-key"), "stalled")
        .await;
    assert_eq!(status, 504);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("upstream_head_timeout_secs"), "{message}");
    // The provider's address stays in the gateway's log.
    assert!(!message.contains("127.0.0.1"), "{message}");
    drop(env.stalled);
}

#[tokio::test]
async fn a_stream_stalled_after_its_first_event_is_closed() {
    let env = setup().await;
    let req = Request::post(env.url("/v1/chat/completions"))
        .header("authorization", "Bearer alice-key")
        .header("x-stall", "body")
        .body(Full::new(Bytes::from(
            serde_json::json!({"model": "stalled", "stream": true,
                "messages": [{"role": "user", "content": "hi"}]})
            .to_string(),
        )))
        .unwrap();
    let started = Instant::now();
    let res = env.h.client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("partial"));
    // Then the stream ends in an error (cut), not in a clean end and not never.
    let end = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .expect("the stalled stream was never closed");
    assert!(end.is_err(), "a cut stream must not look complete");
    assert!(started.elapsed() <= Duration::from_secs_f64(IDLE_TIMEOUT + 2.0));
}

#[tokio::test]
async fn stacked_gzip_layers_are_refused_without_decoding() {
    let env = setup().await;
    // A real 3-layer gzip body: refused by its header, before any layer is inflated.
    let mut body = br#"{"model":"codex-relay","messages":[]}"#.to_vec();
    for _ in 0..3 {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&body).unwrap();
        body = e.finish().unwrap();
    }
    let send = |encoding: String, body: Vec<u8>| {
        let req = Request::post(env.url("/v1/chat/completions"))
            .header("authorization", "Bearer alice-key")
            .header("content-encoding", encoding)
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        env.h.client.request(req)
    };
    let res = send("gzip, gzip, gzip".into(), body).await.unwrap();
    assert_eq!(res.status(), 415);
    // A thousand layers named in a header: still one quick refusal.
    let many = vec!["gzip"; 1000].join(", ");
    let started = Instant::now();
    let res = send(many, b"x".to_vec()).await.unwrap();
    assert_eq!(res.status(), 415);
    let v: Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("1000"));
    assert!(started.elapsed() < Duration::from_secs(2));
    // Two layers (what a client might really send) are still decoded.
    let mut two = br#"{"model":"codex-relay","messages":[{"role":"user","content":"x"}]}"#.to_vec();
    for _ in 0..2 {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&two).unwrap();
        two = e.finish().unwrap();
    }
    assert_eq!(send("gzip, gzip".into(), two).await.unwrap().status(), 200);
}

#[tokio::test]
async fn request_ids_are_set_or_propagated() {
    let env = setup().await;
    let get = |id: Option<&'static str>| {
        let mut req = Request::get(env.url("/healthz"));
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        env.h.client.request(req.body(Full::default()).unwrap())
    };
    let res = get(Some("req-123")).await.unwrap();
    assert_eq!(res.headers()["x-request-id"], "req-123");
    let res = get(None).await.unwrap();
    assert_eq!(res.headers()["x-request-id"].len(), 36, "a UUID");
    // An id that could forge fields of the access line, or make it arbitrarily long, is
    // replaced.
    for forged in ["a status=500 tenant=\"x\"", "a\"b", &*"x".repeat(200)] {
        let forged: &'static str = Box::leak(forged.to_owned().into_boxed_str());
        let res = get(Some(forged)).await.unwrap();
        let id = res.headers()["x-request-id"].to_str().unwrap();
        assert_ne!(id, forged);
        assert_eq!(id.len(), 36, "a UUID instead of {forged:?}");
    }
}

#[tokio::test]
async fn a_gemini_model_with_a_dot_segment_is_no_route_and_never_forwarded() {
    let stalled = StalledUpstream::start().await;
    let (_gateway, server) = small_gateway(&stalled.base_url(), "", "").await;
    let client = http_client();
    // `codex/../../x` would be the provider `codex` and a model that climbs out of
    // `{base_url}/models/`.
    for path in [
        "/v1beta/models/codex%2F..%2F..%2Fx:generateContent",
        "/v1/models/codex/../../x:generateContent",
        "/v1/models/codex%2F%2e%2e%2Fx:streamGenerateContent",
    ] {
        let req = Request::post(format!("{}{path}", server.url()))
            .header("x-stall", "headers")
            .header("x-goog-api-key", "client-key")
            .body(Full::new(Bytes::from_static(br#"{"contents":[]}"#)))
            .unwrap();
        let res = client.request(req).await.unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(!body.contains("x-stall"), "{path} was forwarded: {body}");
    }
}

#[tokio::test]
async fn an_open_gateway_refuses_a_public_address_unless_allowed() {
    let text = r#"
[store]
backend = "memory"
[[providers]]
name = "p"
base_url = "http://127.0.0.1:9/v1"
  [[providers.accounts]]
  id = "a"
  api_key = "k"
"#;
    let e = Config::from_toml_str(&format!("listen = \"0.0.0.0:4000\"\n{text}"), |_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("allow_open"), "{e}");
    let open = Config::from_toml_str(
        &format!("listen = \"0.0.0.0:4000\"\nallow_open = true\n{text}"),
        |_| None,
    )
    .unwrap();
    assert!(open.warnings().iter().any(|w| w.contains("open")));
    // A loopback gateway may be open, but spawning it on a public address is refused.
    let gateway = Gateway::new(Config::from_toml_str(text, |_| None).unwrap()).unwrap();
    let e = gateway
        .spawn("0.0.0.0:0".parse().unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
}

#[tokio::test]
async fn admin_accounts_and_readyz() {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .account("acct-b", "key-b")
        .start()
        .await
        .unwrap();
    let gateway = Gateway::new(
        Config::from_toml_str(
            &format!(
                r#"
admin_token_env = "ADMIN"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "{}"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key = "key-b"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
"#,
                sim.base_url()
            ),
            |v| (v == "ADMIN").then(|| "adm-token".to_owned()),
        )
        .unwrap(),
    )
    .unwrap();
    let h = Harness::serve(sim, gateway).await;
    let get = |path: &str, token: Option<&str>| {
        let mut req = Request::get(h.url(0, path));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let client = h.client.clone();
        let req = req.body(Full::default()).unwrap();
        async move {
            let res = client.request(req).await.unwrap();
            let status = res.status();
            let v: Value =
                serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes())
                    .unwrap_or(Value::Null);
            (status, v)
        }
    };
    assert_eq!(get("/admin/accounts", None).await.0, 401);
    let (status, v) = get("/readyz", None).await;
    assert_eq!(
        (status, v["status"].as_str()),
        (StatusCode::OK, Some("ready"))
    );

    // One turn binds a session to acct-a and reports it at 100 %: acct-a is exhausted.
    h.sim.set_used("acct-a", 90.0);
    let req = Request::post(h.url(0, "/v1/chat/completions"))
        .header("authorization", "Bearer c")
        .header("session-id", "s-1")
        .body(Full::new(Bytes::from(
            r#"{"model":"codex-relay","messages":[{"role":"user","content":"x"}]}"#,
        )))
        .unwrap();
    assert_eq!(h.client.request(req).await.unwrap().status(), 200);

    let (status, v) = get("/admin/accounts", Some("adm-token")).await;
    assert_eq!(status, 200);
    let accounts = v["accounts"].as_array().unwrap();
    assert_eq!(accounts.len(), 2);
    let a = &accounts[0];
    assert_eq!(a["provider"], "codex");
    assert_eq!(a["account"], "acct-a");
    assert_eq!(a["state"], "exhausted");
    assert_eq!(a["sessions"], 1);
    assert!(a["used_ratio"].is_number(), "{a}");
    assert!(a["resets_at"].as_str().unwrap().ends_with('Z'));
    let b = &accounts[1];
    assert_eq!(
        (b["state"].as_str(), b["sessions"].as_u64()),
        (Some("available"), Some(0))
    );
    assert!(b["resets_at"].is_null());
    for k in [
        "provider",
        "account",
        "used_ratio",
        "resets_at",
        "state",
        "sessions",
    ] {
        assert!(a.get(k).is_some(), "{k} missing");
    }

    let readiness = h.gateways[0].0.readiness().clone();
    readiness.shutting_down();
    let (status, v) = get("/readyz", None).await;
    assert_eq!(status, 503);
    assert_eq!(v["status"], "shutting down");
    h.shutdown().await;
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

#[tokio::test]
async fn a_spent_byte_budget_is_a_503_with_retry_after() {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let (_gateway, server) = small_gateway(
        &sim.base_url(),
        "max_request_bytes = 1024",
        "max_buffered_bytes = 1024\nclient_body_timeout_secs = 1",
    )
    .await;
    // A client that sends 900 of its 1000 bytes and waits holds 900 bytes of the budget.
    let mut holder = TcpStream::connect(server.addr()).await.unwrap();
    let partial = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{}",
        " ".repeat(900)
    );
    holder.write_all(partial.as_bytes()).await.unwrap();
    let client = http_client();
    let body = r#"{"model":"codex-relay","messages":[{"role":"user","content":"a message that needs more than what is left of the budget"}],"pad":"................................................................................................................................................................"}"#;
    let send = || {
        client.request(
            Request::post(format!("{}/v1/chat/completions", server.url()))
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap(),
        )
    };
    // The holder's bytes are taken as they arrive: wait until they are.
    let deadline = Instant::now() + Duration::from_secs(5);
    let res = loop {
        let res = send().await.unwrap();
        if res.status() == 503 || Instant::now() > deadline {
            break res;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    let v: Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_buffered_bytes")
    );
    // Once the holder is gone (its body timed out), the budget is back.
    let (reply, _) = read_until_closed(&mut holder, Duration::from_secs(5)).await;
    assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 408"));
    assert_eq!(send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn shutdown_cuts_streams_still_running_after_its_timeout() {
    let stalled = StalledUpstream::start().await;
    let (_gateway, server) = small_gateway(
        &stalled.base_url(),
        "",
        "shutdown_timeout_secs = 0.5\nupstream_idle_timeout_secs = 60",
    )
    .await;
    let client = http_client();
    let req = Request::post(format!("{}/v1/chat/completions", server.url()))
        .header("x-stall", "body")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","stream":true,"messages":[]}"#,
        )))
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    body.frame().await.unwrap().unwrap();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), server.shutdown())
        .await
        .expect("shutdown waited for a stalled stream")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    // The client sees its stream end in an error, not complete.
    let end = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .unwrap();
    assert!(end.is_err());
}

#[tokio::test]
async fn account_headers_stay_between_gateway_and_provider() {
    let stalled = StalledUpstream::start().await;
    let (_gateway, server) = small_gateway(&stalled.base_url(), "", "").await;
    let client = http_client();
    let mut req = Request::post(format!(
        "{}/v1/chat/completions?key=client-query-key&beta=1",
        server.url()
    ))
    .header("x-stall", "headers")
    .header("authorization", "Bearer client-key");
    for (name, value) in [
        ("openai-organization", "org-client"),
        ("openai-project", "proj-client"),
        ("anthropic-organization-id", "org-client"),
        ("cookie", "c=1"),
        ("api-key", "client-azure-key"),
        ("x-goog-api-key", "client-goog-key"),
        ("x-api-key", "client-x-key"),
        ("chatgpt-account-id", "client-chatgpt-account"),
        ("x-forwarded-for", "203.0.113.7"),
        ("forwarded", "for=203.0.113.8"),
        ("via", "1.1 client-proxy"),
        ("x-real-ip", "203.0.113.9"),
        ("x-client-header", "kept"),
    ] {
        req = req.header(name, value);
    }
    let res = client
        .request(
            req.body(Full::new(Bytes::from_static(
                br#"{"model":"codex-relay","messages":[]}"#,
            )))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    for hidden in [
        "set-cookie",
        "openai-organization",
        "openai-project",
        "anthropic-organization-id",
    ] {
        assert!(
            res.headers().get(hidden).is_none(),
            "{hidden} reached the client"
        );
    }
    // The client reads the gateway's request id, not the provider's.
    assert!(
        res.headers()
            .get_all("x-request-id")
            .iter()
            .all(|v| v != "req-provider"),
        "{:?}",
        res.headers()
    );
    assert_eq!(res.headers()["x-keep"], "1");
    let seen = String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec())
        .unwrap()
        .to_ascii_lowercase();
    for gone in [
        "org-client",
        "proj-client",
        "cookie:",
        "client-azure-key",
        "client-goog-key",
        "client-x-key",
        "client-key",
        "client-chatgpt-account",
        "203.0.113.",
        "client-proxy",
        "client-query-key",
    ] {
        assert!(!seen.contains(gone), "{gone} was forwarded:\n{seen}");
    }
    assert!(seen.contains("/chat/completions?beta=1 "), "{seen}");
    assert!(seen.contains("x-client-header: kept"), "{seen}");
    assert!(seen.contains("authorization: bearer key-a"), "{seen}");
}

#[tokio::test]
async fn a_passed_through_429_has_the_length_of_its_body() {
    let stalled = StalledUpstream::start().await;
    let (_gateway, server) = small_gateway(&stalled.base_url(), "", "").await;
    // A raw client: it reads exactly what the gateway declares.
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    let body = r#"{"model":"codex-relay","messages":[]}"#;
    tcp.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-stall: big429\r\n\
             connection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (reply, _) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    let text = String::from_utf8_lossy(&reply);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    let declared: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a content-length");
    assert_eq!(declared, rest.len(), "{head}");
}

#[tokio::test]
async fn credential_less_requests_never_share_a_session() {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let (_gateway, server) = small_gateway(&sim.base_url(), "admin_token = \"adm\"", "").await;
    let client = http_client();
    // No session header: the session is the body's fingerprint, the same for all four.
    let send = |key: Option<&'static str>| {
        let mut req = Request::post(format!("{}/v1/chat/completions", server.url()));
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        client.request(
            req.body(Full::new(Bytes::from_static(
                br#"{"model":"codex-relay","messages":[{"role":"system","content":"s"},{"role":"user","content":"same first message"}]}"#,
            )))
            .unwrap(),
        )
    };
    // Sessions bound to acct-a, from `GET /admin/accounts`.
    let bound = || async {
        let req = Request::get(format!("{}/admin/accounts", server.url()))
            .header("authorization", "Bearer adm")
            .body(Full::default())
            .unwrap();
        let res = client.request(req).await.unwrap();
        let v: Value =
            serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
        v["accounts"][0]["sessions"].as_u64().unwrap()
    };
    assert_eq!(send(None).await.unwrap().status(), 200);
    assert_eq!(send(None).await.unwrap().status(), 200);
    assert_eq!(bound().await, 2, "two anonymous requests are two tenants");
    assert_eq!(send(Some("k1")).await.unwrap().status(), 200);
    assert_eq!(send(Some("k1")).await.unwrap().status(), 200);
    assert_eq!(bound().await, 3, "one credential, one tenant, one session");
}
