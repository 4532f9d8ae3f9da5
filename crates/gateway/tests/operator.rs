//! What operators trip over: a target skipped for its API shape is named in the error the
//! client gets.

mod support;

use context_relay_gateway::Gateway;
use context_relay_gateway::config::Config;
use context_relay_sim::SimProvider;
use serde_json::{Value, json};
use support::{http_client, key_of, spawn, start_sim};

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
