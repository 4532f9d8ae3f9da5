//! What both example tests check: against a loopback provider that enforces real parameter
//! rules and account-bound state, driven by a real hyper client (which stops polling a body
//! once it reports its end) sending what Codex sends (its real-size first request rebuilt from
//! the captures, the whole history resent each turn), a turn at 87 % leads to a summary
//! request, and after a 429 the handoff reaches the other account's request.
use std::time::Duration;

use bytes::Bytes;
use context_relay::tower::Background;
use context_relay_sim::SimProvider;
use context_relay_testkit::clients;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

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

/// A Codex conversation: the headers and the body of its next request.
pub struct Conversation {
    headers: Vec<(String, String)>,
    body: Value,
    stream: bool,
}

impl Conversation {
    /// A Codex session whose first request is the captured one at its real size.
    pub fn codex(session: &str, stream: bool) -> Self {
        let (headers, mut body) = clients::codex_first_turn("gpt-5", session);
        body["stream"] = json!(stream);
        Self {
            headers,
            body,
            stream,
        }
    }

    /// One turn through the proxy at `url`: the status and the body as the client read it. A
    /// successful reply's output items and then `next` are appended to the history, which is
    /// resent whole on the next turn.
    async fn turn(&mut self, url: &str, next: &str) -> (StatusCode, Bytes) {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut req = Request::post(format!("{url}/v1/responses"));
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(Full::new(Bytes::from(self.body.to_string())))
            .expect("request");
        let res = client.request(req).await.expect("response");
        let status = res.status();
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        if status == StatusCode::OK {
            if self.stream {
                clients::codex_next_turn(&mut self.body, &bytes, next);
            } else {
                let reply: Value = serde_json::from_slice(&bytes).expect("JSON reply");
                let input = self.body["input"].as_array_mut().expect("input");
                input.extend(reply["output"].as_array().into_iter().flatten().cloned());
                input.push(json!({"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": next}]}));
            }
        }
        (status, bytes)
    }
}

pub async fn scenario(url: &str, sim: &SimProvider, background: &Background, stream: bool) {
    let mut codex = Conversation::codex("demo", stream);
    let first = codex.body.to_string().len();
    assert!(first > 30_000, "a Codex-sized first request: {first} bytes");
    sim.set_used("a", 80.0);
    let (status, body) = codex.turn(url, "Now write the tests.").await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    background.idle().await;
    let summaries: Vec<_> = sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 1, "one summary request (stream: {stream})");
    let summary = summaries[0].json().expect("JSON");
    assert_eq!(summaries[0].account.as_deref(), Some("a"));
    assert!(summary.get("temperature").is_none());
    // The summary goes out in the turn's own API: Responses caps it with `max_output_tokens`.
    assert_eq!(summary["max_output_tokens"], 800);
    assert!(summary.get("max_completion_tokens").is_none());

    // Account a runs out: its 429 reaches the client, and the next turn goes to b.
    sim.set_used("a", 100.0);
    let (status, _) = codex.turn(url, "And the docs.").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, body) = codex.turn(url, "And the docs.").await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
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
    assert!(
        to_b[0].body.len() > first,
        "the whole history resent: {} bytes",
        to_b[0].body.len()
    );
}

pub async fn with_timeout(f: impl std::future::Future<Output = ()>) {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("scenario finishes");
}
