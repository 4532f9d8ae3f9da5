//! Loopback end-to-end tests: a real gateway server on 127.0.0.1:0, the simulated provider,
//! and a real HTTP client.

use std::ops::Deref;
use std::time::Duration;

use bytes::Bytes;
use context_relay_gateway::Gateway;
use context_relay_gateway::config::Config;
use context_relay_sim::{SimBuilder, SimProvider, SimQuotaHeaders};
use context_relay_testkit::harness::{ADMIN_TOKEN, Harness, http_client, spawn};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

/// The harness over [`config_text`], with this file's requests.
struct Env(Harness);

impl Deref for Env {
    type Target = Harness;

    fn deref(&self) -> &Harness {
        &self.0
    }
}

fn config_text(base_url: &str, extra: &str) -> String {
    format!(
        r#"
max_request_bytes = 8388608
admin_token = "{ADMIN_TOKEN}"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "{base_url}"
rotate_at = 0.95
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key_env = "SIM_KEY_B"
[[providers]]
name = "anthropic"
base_url = "{base_url}"
auth = "x-api-key"
  [[providers.accounts]]
  id = "acct-c"
  api_key = "key-c"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
[[combos]]
name = "claude-relay"
targets = ["anthropic/claude-sonnet-4-5"]
{extra}
"#
    )
}

async fn setup_with(sim: SimBuilder) -> Env {
    let sim = sim
        .account("acct-a", "key-a")
        .account("acct-b", "key-b")
        .account("acct-c", "key-c")
        .start()
        .await
        .unwrap();
    let config = Config::from_toml_str(&config_text(&sim.base_url(), ""), |name| {
        (name == "SIM_KEY_B").then(|| "key-b".to_owned())
    })
    .unwrap();
    Env(Harness::serve(sim, Gateway::new(config).unwrap()).await)
}

async fn setup() -> Env {
    setup_with(SimProvider::builder().quota_step(10.0)).await
}

impl Env {
    fn url(&self, path: &str) -> String {
        self.0.url(0, path)
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Response<Incoming> {
        self.client.request(req).await.unwrap()
    }

    async fn post(&self, path: &str, session: Option<&str>, body: &str) -> (StatusCode, Bytes) {
        let mut b = Request::post(self.url(path))
            .header("authorization", "Bearer client-key")
            .header("content-type", "application/json");
        if let Some(s) = session {
            b = b.header("session-id", s);
        }
        let res = self
            .send(b.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
            .await;
        let status = res.status();
        (status, res.into_body().collect().await.unwrap().to_bytes())
    }

    /// Sessions bound to account `id`.
    async fn sessions_of(&self, id: &str) -> u64 {
        self.account(0, id).await["sessions"].as_u64().unwrap()
    }

    fn upstream_accounts(&self) -> Vec<String> {
        self.sim
            .requests()
            .iter()
            .map(|r| r.account.clone().unwrap_or_default())
            .collect()
    }
}

const CHAT: &str = "{\"model\" : \"codex-relay\",\"messages\":[{\"role\":\"system\",\"content\":\"You are terse.\"},{\"role\":\"user\",\"content\":\"say hi \\u00e9 \\ud83d\\ude00\"}],\"x_ratio\":1.50, \"x_unknown\":{\"b\":1,\"a\":[1e3,-0.0]}}";

#[tokio::test]
async fn chat_through_a_combo_keeps_every_byte_but_the_model() {
    let env = setup().await;
    let (status, body) = env.post("/v1/chat/completions", Some("s1"), CHAT).await;
    assert_eq!(status, 200, "{body:?}");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Reply 1 from account acct-a."
    );
    let reqs = env.sim.requests();
    assert_eq!(reqs.len(), 1);
    let up = &reqs[0];
    assert_eq!(up.uri.path(), "/v1/chat/completions");
    assert_eq!(
        &up.body[..],
        CHAT.replace("\"codex-relay\"", "\"gpt-5.5\"").as_bytes()
    );
    assert_eq!(
        up.headers["content-length"],
        up.body.len().to_string().as_str()
    );
    // The client's key never reaches the provider; the account's does.
    assert_eq!(up.headers["authorization"], "Bearer key-a");
    assert!(up.headers.get("x-api-key").is_none());
    assert!(!format!("{:?}", up.headers).contains("client-key"));
}

#[tokio::test]
async fn responses_json_and_sse_with_query_kept() {
    let env = setup().await;
    let body = r#"{"model":"codex-relay","input":"say hi","instructions":"You are terse."}"#;
    let (status, out) = env
        .post("/v1/responses?trace=1&x=a%20b", Some("s"), body)
        .await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        "Reply 1 from account acct-a."
    );

    let stream_body = r#"{"model":"codex-relay","stream":true,"input":[{"type":"message","role":"user","content":"hi"}]}"#;
    let (status, out) = env.post("/v1/responses", Some("s"), stream_body).await;
    assert_eq!(status, 200);
    let text = std::str::from_utf8(&out).unwrap();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"response.created"));
    assert_eq!(events.last(), Some(&"response.completed"));
    assert!(events.contains(&"response.output_item.done"));

    let reqs = env.sim.requests();
    assert_eq!(reqs[0].uri.to_string(), "/v1/responses?trace=1&x=a%20b");
    assert_eq!(
        &reqs[0].body[..],
        body.replace("codex-relay", "gpt-5.5").as_bytes()
    );
    assert_eq!(
        &reqs[1].body[..],
        stream_body.replace("codex-relay", "gpt-5.5").as_bytes()
    );
}

#[tokio::test]
async fn anthropic_messages_with_x_api_key_and_beta_query() {
    let env = setup().await;
    let body = r#"{"model":"claude-relay","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"say hi"}],"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197;"}]}"#;
    let req = Request::post(env.url("/v1/messages?beta=true"))
        .header("x-api-key", "client-key")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "claude-code-20250219")
        .header("x-claude-code-session-id", "cc-1")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap();
    let res = env.send(req).await;
    assert_eq!(res.status(), 200);
    let out = res.into_body().collect().await.unwrap().to_bytes();
    let text = std::str::from_utf8(&out).unwrap();
    assert!(text.starts_with("event: message_start\n"), "{text}");
    assert!(text.contains("event: content_block_delta"));

    let up = &env.sim.requests()[0];
    assert_eq!(up.uri.to_string(), "/v1/messages?beta=true");
    assert_eq!(up.headers["x-api-key"], "key-c");
    assert!(up.headers.get("authorization").is_none());
    assert_eq!(up.headers["anthropic-beta"], "claude-code-20250219");
    assert_eq!(up.headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        &up.body[..],
        body.replace("claude-relay", "claude-sonnet-4-5").as_bytes()
    );
    // Sessions are bound per tenant (the keyed hash of the client's key): the same session id
    // from another client key is another session.
    assert_eq!(env.sessions_of("acct-c").await, 1);
    let again = |key: &'static str| {
        Request::post(env.url("/v1/messages?beta=true"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .header("x-claude-code-session-id", "cc-1")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap()
    };
    assert_eq!(env.send(again("client-key")).await.status(), 200);
    assert_eq!(
        env.sessions_of("acct-c").await,
        1,
        "same tenant, same session"
    );
    assert_eq!(env.send(again("other-key")).await.status(), 200);
    assert_eq!(env.sessions_of("acct-c").await, 2, "another tenant");
}

#[tokio::test]
async fn hop_by_hop_headers_are_stripped_and_others_pass() {
    let env = setup().await;
    let req = Request::post(env.url("/v1/chat/completions"))
        .header("authorization", "Bearer client-key")
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "1")
        .header("keep-alive", "timeout=5")
        .header("proxy-authorization", "Basic eA==")
        .header("te", "trailers")
        .header("x-codex-turn-state", "ts-1")
        .header("x-stainless-retry-count", "0")
        .body(Full::new(Bytes::from_static(CHAT.as_bytes())))
        .unwrap();
    let res = env.send(req).await;
    assert_eq!(res.status(), 200);
    // Headers of the provider's response pass back.
    assert!(res.headers().contains_key("x-codex-turn-state"));
    assert!(res.headers().contains_key("x-codex-primary-used-percent"));
    let up = &env.sim.requests()[0];
    for h in ["x-hop", "keep-alive", "proxy-authorization", "te"] {
        assert!(up.headers.get(h).is_none(), "{h} reached the provider");
    }
    assert_eq!(up.headers["x-codex-turn-state"], "ts-1");
    assert_eq!(up.headers["x-stainless-retry-count"], "0");
    assert_eq!(up.headers["host"], env.sim.addr().to_string().as_str());
}

#[tokio::test]
async fn rotation_when_the_quota_header_crosses_rotate_at() {
    let env = setup_with(SimProvider::builder().quota_step(50.0)).await;
    for _ in 0..3 {
        let (status, _) = env
            .post(
                "/v1/responses",
                Some("s"),
                r#"{"model":"codex-relay","input":"x"}"#,
            )
            .await;
        assert_eq!(status, 200);
    }
    // 50 %, then 100 % ≥ rotate_at: the third turn moves without ever seeing a 429.
    assert_eq!(env.upstream_accounts(), ["acct-a", "acct-a", "acct-b"]);
    let (a, b) = (
        env.account(0, "acct-a").await,
        env.account(0, "acct-b").await,
    );
    assert_eq!(a["used_ratio"], 1.0);
    assert_eq!(a["state"], "exhausted");
    assert_eq!(b["used_ratio"], 0.5);
}

#[tokio::test]
async fn anthropic_quota_headers_rotate_too() {
    let env = setup_with(
        SimProvider::builder()
            .quota_step(100.0)
            .quota_headers(SimQuotaHeaders::Anthropic),
    )
    .await;
    let body = r#"{"model":"codex-relay","input":"x"}"#;
    assert_eq!(env.post("/v1/responses", Some("s"), body).await.0, 200);
    assert_eq!(env.post("/v1/responses", Some("s"), body).await.0, 200);
    assert_eq!(env.upstream_accounts(), ["acct-a", "acct-b"]);
}

#[tokio::test]
async fn a_429_is_retried_on_the_next_account_transparently() {
    let env = setup().await;
    env.sim.set_used("acct-a", 100.0);
    let (status, body) = env.post("/v1/chat/completions", Some("s"), CHAT).await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Reply 1 from account acct-b."
    );
    let reqs = env.sim.requests();
    assert_eq!(env.upstream_accounts(), ["acct-a", "acct-b"]);
    // The same request, byte for byte, with the other account's key.
    assert_eq!(reqs[0].body, reqs[1].body);
    assert_eq!(reqs[1].headers["authorization"], "Bearer key-b");
}

#[tokio::test]
async fn all_accounts_exhausted_gives_429() {
    let env = setup().await;
    env.sim.set_used("acct-a", 100.0);
    env.sim.set_used("acct-b", 100.0);
    let (status, body) = env
        .post(
            "/v1/responses",
            Some("s"),
            r#"{"model":"codex-relay","input":"x"}"#,
        )
        .await;
    assert_eq!(status, 429);
    assert!(
        std::str::from_utf8(&body)
            .unwrap()
            .contains("usage_limit_reached")
    );
    assert_eq!(env.upstream_accounts(), ["acct-a", "acct-b"]);
    // Known exhausted: the gateway answers without calling the provider.
    let req = Request::post(env.url("/v1/responses"))
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","input":"x"}"#,
        )))
        .unwrap();
    let res = env.send(req).await;
    assert_eq!(res.status(), 429);
    let after: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(after > 60, "the sim announced a reset in 1 h, got {after}");
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("codex"));
    assert_eq!(env.sim.requests().len(), 2);
}

#[tokio::test]
async fn sse_events_are_forwarded_before_the_upstream_finishes() {
    let env = setup().await;
    let hold = env.sim.hold_streams();
    let req = Request::post(env.url("/v1/responses"))
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","stream":true,"input":"x"}"#,
        )))
        .unwrap();
    let res = env.send(req).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    // The provider is held after its first output event: this frame can only arrive if the
    // gateway forwards it without waiting for the rest. (The timeout turns a regression into a
    // failure instead of a hang; it asserts nothing about speed.)
    let first = tokio::time::timeout(Duration::from_secs(30), body.frame())
        .await
        .expect("the first SSE event was buffered by the gateway")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert!(
        std::str::from_utf8(&first)
            .unwrap()
            .contains("response.created")
    );
    hold.release();
    let rest = body.collect().await.unwrap().to_bytes();
    assert!(
        std::str::from_utf8(&rest)
            .unwrap()
            .contains("response.completed")
    );
}

#[tokio::test]
async fn compressed_bodies_are_forwarded_decoded() {
    use std::io::Write;
    let env = setup().await;
    let zstd = ruzstd::encoding::compress_to_vec(
        CHAT.as_bytes(),
        ruzstd::encoding::CompressionLevel::Fastest,
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(CHAT.as_bytes()).unwrap();
    let gzip = gz.finish().unwrap();
    for (encoding, data) in [("zstd", zstd), ("gzip", gzip)] {
        env.sim.clear_requests();
        let req = Request::post(env.url("/v1/chat/completions"))
            .header("content-encoding", encoding)
            .body(Full::new(Bytes::from(data)))
            .unwrap();
        assert_eq!(env.send(req).await.status(), 200, "{encoding}");
        let up = &env.sim.requests()[0];
        assert!(up.headers.get("content-encoding").is_none());
        assert_eq!(
            &up.body[..],
            CHAT.replace("\"codex-relay\"", "\"gpt-5.5\"").as_bytes()
        );
        assert_eq!(
            up.headers["content-length"],
            up.body.len().to_string().as_str()
        );
    }
}

#[tokio::test]
async fn malformed_and_oversized_bodies_leave_the_gateway_healthy() {
    let env = setup().await;
    let (status, body) = env
        .post("/v1/chat/completions", None, "{\"model\": \"codex-relay\",")
        .await;
    assert_eq!(status, 400);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");

    let (status, body) = env.post("/v1/messages", None, "[1,2]").await;
    assert_eq!(status, 400);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["type"], "error");

    let (status, _) = env
        .post("/v1/chat/completions", None, r#"{"model":"nope"}"#)
        .await;
    assert_eq!(status, 404);

    // 9 MiB (the length is declared; the undeclared case is covered in combo.rs).
    let big = format!(
        "{{\"model\":\"codex-relay\",\"input\":\"{}\"}}",
        "a".repeat(9 << 20)
    );
    let (status, body) = env.post("/v1/responses", None, &big).await;
    assert_eq!(status, 413);
    assert!(std::str::from_utf8(&body).unwrap().contains("8388608"));

    assert!(
        env.sim.requests().is_empty(),
        "nothing reached the provider"
    );
    let res = env
        .send(
            Request::get(env.url("/healthz"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    // And it still proxies.
    assert_eq!(env.post("/v1/chat/completions", None, CHAT).await.0, 200);
}

#[tokio::test]
async fn warm_up_models_metrics_and_unknown_routes() {
    let env = setup().await;
    let res = env
        .send(
            Request::builder()
                .method(Method::HEAD)
                .uri(env.url("/"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    let res = env
        .send(
            Request::get(env.url("/v1/models"))
                .header("x-api-key", "k")
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    let v: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "codex-relay",
            "claude-relay",
            "codex/gpt-5.5",
            "anthropic/claude-sonnet-4-5"
        ]
    );
    let res = env
        .send(
            Request::get(env.url("/metrics"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    let res = env
        .send(
            Request::get(env.url("/v2/nothing"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 404);
    let res = env
        .send(
            Request::get(env.url("/v1/chat/completions"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 405);
}

#[tokio::test]
async fn unreachable_upstream_is_a_502() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let config = Config::from_toml_str(&config_text(&format!("http://{addr}/v1"), ""), |_| {
        Some("key-b".into())
    })
    .unwrap();
    // No provider: a gateway alone.
    let (_gateway, server) = spawn(Gateway::new(config).unwrap()).await;
    let res = http_client()
        .request(
            Request::post(format!("{}/v1/messages", server.url()))
                .body(Full::new(Bytes::from_static(
                    br#"{"model":"claude-relay"}"#,
                )))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    let v: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["type"], "error");
    // The message names the provider and what failed, not its address (that is logged).
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not be reached"), "{message}");
    assert!(!message.contains(&addr.to_string()), "{message}");
}

#[tokio::test]
async fn graceful_shutdown_lets_an_open_stream_finish() {
    let env = setup().await;
    let hold = env.sim.hold_streams();
    let res = env
        .send(
            Request::post(env.url("/v1/messages"))
                .body(Full::new(Bytes::from_static(
                    br#"{"model":"claude-relay","stream":true,"max_tokens":64,"messages":[]}"#,
                )))
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    let Harness {
        sim, mut gateways, ..
    } = env.0;
    let (_gateway, server) = gateways.remove(0);
    let shutdown = tokio::spawn(server.shutdown());
    hold.release();
    let out = res.into_body().collect().await.unwrap().to_bytes();
    assert!(std::str::from_utf8(&out).unwrap().contains("message_stop"));
    shutdown.await.unwrap().unwrap();
    sim.shutdown().await;
}

fn temp_config(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cr-gw-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn check(path: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"))
        .arg("--config")
        .arg(path)
        .arg("--check")
        .env_remove("SIM_KEY_B")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn binary_check_reports_config_errors_clearly() {
    let ok = config_text("http://127.0.0.1:9/v1", "")
        .replace("api_key_env = \"SIM_KEY_B\"", "api_key = \"k\"");
    let (success, text) = check(&temp_config("ok", &ok));
    assert!(success, "{text}");
    assert!(
        text.contains("valid (2 providers, 3 accounts, 2 combos)"),
        "{text}"
    );

    let (success, text) = check(&temp_config(
        "env",
        &config_text("http://127.0.0.1:9/v1", ""),
    ));
    assert!(!success);
    assert!(
        text.contains("SIM_KEY_B") && text.contains("not set"),
        "{text}"
    );

    let (success, text) = check(&temp_config("key", &format!("{ok}\nlisten_on = \"x\"\n")));
    assert!(!success);
    assert!(text.contains("unknown field `listen_on`"), "{text}");

    let (success, text) = check(std::path::Path::new("/nonexistent/gateway.toml"));
    assert!(!success);
    assert!(text.contains("/nonexistent/gateway.toml"), "{text}");
}

#[tokio::test]
async fn chat_stream_passes_through() {
    let env = setup().await;
    let body = r#"{"model":"codex-relay","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, out) = env.post("/v1/chat/completions", Some("s"), body).await;
    assert_eq!(status, 200);
    let text = std::str::from_utf8(&out).unwrap();
    let chunks: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "Reply 1 from account acct-a.");
    assert!(chunks.last().unwrap()["usage"]["total_tokens"].is_u64());
    assert!(text.trim_end().ends_with("data: [DONE]"));
    assert_eq!(
        &env.sim.requests()[0].body[..],
        body.replace("codex-relay", "gpt-5.5").as_bytes()
    );
}
