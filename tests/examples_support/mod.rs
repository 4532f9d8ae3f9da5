//! What both example tests check: against a loopback provider that enforces real parameter
//! rules, driven by a real hyper client (which stops polling a body once it reports its end),
//! a turn at 87 % leads to a summary request, and after a 429 the handoff reaches the other
//! account's request.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use context_relay::tower::Background;
use context_relay_gateway::sim::SimProvider;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;

const HANDOFF: &str = r#"{"summary":"Adding a --json flag to the CLI","keyDecisions":["use serde"],"taskProgress":"flag parsed; tests next","activeEntities":["src/cli.rs"]}"#;

pub async fn sim() -> SimProvider {
    SimProvider::builder()
        .account("a", "key-a")
        .account("b", "key-b")
        .quota_step(7.0)
        .summary_reply("keyDecisions", HANDOFF)
        .start()
        .await
        .expect("sim starts")
}

/// One chat turn through the proxy at `url`; the status and the body as the client read it.
async fn turn(url: &str, stream: bool, ask: &str) -> (StatusCode, Bytes) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let body = json!({"model": "gpt-5", "stream": stream, "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Add a --json flag to the CLI."},
        {"role": "assistant", "content": "Parsing works."},
        {"role": "user", "content": ask}
    ]});
    let req = Request::post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("x-session-id", "demo")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let res = client.request(req).await.expect("response");
    let status = res.status();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    (status, bytes)
}

pub async fn scenario(url: &str, sim: &SimProvider, background: &Background, stream: bool) {
    sim.set_used("a", 80.0);
    let (status, body) = turn(url, stream, "Now write the tests.").await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    background.idle().await;
    let summaries: Vec<_> = sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 1, "one summary request (stream: {stream})");
    let summary = summaries[0].json().expect("JSON");
    assert_eq!(summaries[0].account.as_deref(), Some("a"));
    assert!(summary.get("temperature").is_none());
    assert_eq!(summary["max_completion_tokens"], 800);

    // Account a runs out: its 429 reaches the client, and the next turn goes to b.
    sim.set_used("a", 100.0);
    let (status, _) = turn(url, stream, "And the docs.").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _) = turn(url, stream, "And the docs.").await;
    assert_eq!(status, StatusCode::OK);
    background.idle().await;
    let to_b: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.account.as_deref() == Some("b") && !r.summary)
        .collect();
    assert_eq!(to_b.len(), 1);
    let text = String::from_utf8_lossy(&to_b[0].body).into_owned();
    assert!(
        text.contains("<context_handoff>"),
        "handoff injected into b's request"
    );
    assert!(text.contains("Adding a --json flag to the CLI"));
}

pub async fn with_timeout(f: impl std::future::Future<Output = ()>) {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("scenario finishes");
}
