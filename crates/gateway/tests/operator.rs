//! What operators trip over: a target skipped for its API shape is named in the error the
//! client gets; a restart keeps each session on its account.

use context_relay_gateway::Gateway;
use context_relay_gateway::config::Config;
use context_relay_sim::SimProvider;
use context_relay_testkit::harness::{CodexGateway, http_client, key_of, spawn, start_sim};
use serde_json::{Value, json};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};

/// A combo whose only other target speaks another API than Chat Completions.
fn mixed(base_url: &str) -> Config {
    let text = format!(
        r#"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "{base_url}"
api = "openai"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "{a}"
[[providers]]
name = "anthropic"
base_url = "{base_url}"
auth = "x-api-key"
api = "anthropic"
  [[providers.accounts]]
  id = "acct-x"
  api_key = "{x}"
[[combos]]
name = "mixed"
targets = ["codex/gpt-5.5", "anthropic/claude-sonnet-4-5"]
"#,
        a = key_of("acct-a"),
        x = key_of("acct-x"),
    );
    Config::from_toml_str(&text, |_| None).expect("config")
}

#[tokio::test]
async fn a_target_skipped_for_its_api_shape_is_named_in_the_error() {
    let sim = start_sim(SimProvider::builder(), &["acct-a", "acct-x"]).await;
    sim.set_used("acct-a", 100.0);
    let (_gateway, server) = spawn(Gateway::new(mixed(&sim.base_url())).unwrap()).await;
    let client = http_client();
    let chat = || {
        let body = json!({"model": "mixed", "messages": [{"role": "user", "content": "hi"}]});
        Request::post(format!("{}/v1/chat/completions", server.url()))
            .header("session-id", "s1")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    // The provider's own 429 goes to the client as it came, with a header naming the target
    // that was not tried.
    let res = client.request(chat()).await.unwrap();
    assert_eq!(res.status(), 429);
    let skipped = res
        .headers()
        .get("x-context-relay-skipped")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    assert_eq!(
        skipped.as_deref(),
        Some("anthropic/claude-sonnet-4-5 (provider `anthropic` has api = \"anthropic\")")
    );
    // Now the gateway knows the account is out: its own 429 says why the next target was
    // not tried.
    let res = client.request(chat()).await.unwrap();
    assert_eq!(res.status(), 429);
    let body: Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("every account of codex is exhausted")
            && message.contains("cannot serve /v1/chat/completions: anthropic/claude-sonnet-4-5"),
        "{message}"
    );
    assert_eq!(
        sim.requests().len(),
        1,
        "the Anthropic target was never sent a Chat request"
    );
}

/// One Chat turn of `session` through `url`: the status and the `x-context-relay` header.
async fn chat_turn(url: &str, session: &str) -> (u16, Option<String>) {
    let body = json!({"model": "codex-relay", "messages": [{"role": "user", "content": "go on"}]});
    let req = Request::post(format!("{url}/v1/chat/completions"))
        .header("authorization", "Bearer client-key")
        .header("session-id", session)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let res = http_client().request(req).await.unwrap();
    let acted = res
        .headers()
        .get("x-context-relay")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = res.status().as_u16();
    res.into_body().collect().await.unwrap();
    (status, acted)
}

#[tokio::test]
async fn a_restart_keeps_each_session_on_its_account() {
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(
        SimProvider::builder().quota_step(10.0),
        &["acct-a", "acct-b"],
    )
    .await;
    let store = format!(
        "backend = \"redb\"\npath = \"{}\"",
        dir.path().join("relay.redb").display()
    );
    let config = || {
        CodexGateway {
            store: &store,
            ..CodexGateway::default()
        }
        .config(&sim.base_url())
    };
    let served = |sim: &SimProvider| sim.requests().last().and_then(|r| r.account.clone());

    let (gateway, server) = spawn(Gateway::connect(config()).await.unwrap()).await;
    // s1 on acct-a; acct-a then runs out, and s2 lands on acct-b.
    assert_eq!(chat_turn(&server.url(), "s1").await.0, 200);
    assert_eq!(served(&sim).as_deref(), Some("acct-a"));
    sim.set_used("acct-a", 100.0);
    assert_eq!(chat_turn(&server.url(), "s2").await.0, 200);
    assert_eq!(served(&sim).as_deref(), Some("acct-b"));
    gateway.background().idle().await;
    server.shutdown().await.unwrap();
    drop(gateway);

    // acct-a's window resets while the gateway restarts: both accounts are available, and
    // fill-first placement alone would send s2 back to acct-a.
    sim.set_used("acct-a", 0.0);
    let (gateway, server) = spawn(Gateway::connect(config()).await.unwrap()).await;
    for (session, account) in [("s2", "acct-b"), ("s1", "acct-a"), ("s2", "acct-b")] {
        let (status, acted) = chat_turn(&server.url(), session).await;
        assert_eq!(status, 200);
        assert_eq!(served(&sim).as_deref(), Some(account), "{session} moved");
        assert_eq!(acted, None, "{session}: the relay saw no switch");
    }
    gateway.background().idle().await;
    server.shutdown().await.unwrap();
}
