//! Context relay end to end: a real gateway server on 127.0.0.1:0 with both relay layers, the
//! simulated provider, and a real HTTP client.
//!
//! Each session crosses the handoff threshold on one account (the simulated quota climbs 30 %
//! per turn: 30, 60, 90 → a handoff is written at 90 %), then the account is used up (the
//! simulator answers 429), the gateway retries on the next account, and that attempt carries the
//! handoff, exactly once. The client only ever sees 200s. Background work (the summary, the
//! deletion of the consumed handoff) is awaited with the gateway's background handle.

use std::ops::Deref;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use context_relay_core::HandoffRecord;
use context_relay_gateway::Gateway;
use context_relay_gateway::config::Config;
use context_relay_sim::{RecordedRequest, SimProvider, SimQuotaHeaders};
use context_relay_testkit::clients::contains;
use context_relay_testkit::handoff::{HANDOFF_TAG, SUMMARY_NEEDLE};
use context_relay_testkit::harness::Harness;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

mod admin;
mod sessions;

const ADMIN: &str = "adm-Secret-1";
const SUMMARY_TEXT: &str = "Adding a --json flag to the CLI; parser done, tests pending.";

fn summary_reply() -> String {
    json!({
        "summary": SUMMARY_TEXT,
        "keyDecisions": ["keep the text output as default", "serde for JSON"],
        "taskProgress": "done: parser; pending: tests; next: write tests",
        "activeEntities": ["src/cli.rs", "--json"]
    })
    .to_string()
}

/// The API a scenario speaks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Api {
    Chat,
    Responses,
    Messages,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
            Api::Messages => "/v1/messages?beta=true",
        }
    }

    /// The accounts of the provider this API's combo routes to, in fill order.
    fn accounts(self) -> (&'static str, &'static str) {
        match self {
            Api::Messages => ("acct-c", "acct-d"),
            _ => ("acct-a", "acct-b"),
        }
    }

    /// The request body of turn `turn` (1-based): the whole history is resent each turn.
    fn body(self, turn: usize, stream: bool) -> String {
        let mut history = Vec::new();
        for t in 1..=turn {
            let user = format!("turn {t}: add the --json flag, step {t}");
            match self {
                Api::Responses => {
                    history.push(json!({"type": "message", "role": "user", "content": user}));
                    if t < turn {
                        history.push(json!({"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": format!("did step {t}")}]}));
                    }
                }
                _ => {
                    history.push(json!({"role": "user", "content": user}));
                    if t < turn {
                        history
                            .push(json!({"role": "assistant", "content": format!("did step {t}")}));
                    }
                }
            }
        }
        match self {
            Api::Chat => {
                let mut messages =
                    vec![json!({"role": "system", "content": "You are a coding agent."})];
                messages.extend(history);
                json!({"model": "codex-relay", "stream": stream, "messages": messages})
            }
            Api::Responses => json!({"model": "codex-relay", "stream": stream, "input": history}),
            Api::Messages => json!({"model": "claude-relay", "max_tokens": 256, "stream": stream,
                "system": "You are a coding agent.", "messages": history}),
        }
        .to_string()
    }
}

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
admin_token = "{ADMIN}"
{extra}
[store]
backend = "memory"
[relay]
handoff_providers = ["*"]
[[providers]]
name = "codex"
base_url = "{base_url}"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key = "key-b"
[[providers]]
name = "anthropic"
base_url = "{base_url}"
auth = "x-api-key"
  [[providers.accounts]]
  id = "acct-c"
  api_key = "key-c"
  [[providers.accounts]]
  id = "acct-d"
  api_key = "key-d"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
[[combos]]
name = "claude-relay"
targets = ["anthropic/claude-sonnet-4-5"]
"#
    )
}

async fn setup_full(headers: SimQuotaHeaders, extra: &str, relay: bool) -> Env {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .account("acct-b", "key-b")
        .account("acct-c", "key-c")
        .account("acct-d", "key-d")
        .quota_step(30.0)
        .quota_headers(headers)
        .summary_reply(SUMMARY_NEEDLE, summary_reply())
        .start()
        .await
        .unwrap();
    let config = Config::from_toml_str(&config_text(&sim.base_url(), extra), |_| None).unwrap();
    Env(Harness::serve(sim, Gateway::new(config).unwrap().relay(relay)).await)
}

async fn setup() -> Env {
    setup_full(SimQuotaHeaders::Codex, "", true).await
}

impl Env {
    /// The gateway.
    fn gateway(&self) -> &Gateway {
        &self.gateways[0].0
    }

    /// The handoffs in the gateway's store (of `session`, or all).
    async fn stored(&self, session: Option<&str>) -> Vec<HandoffRecord> {
        self.gateway().store().list(None, session).await.unwrap()
    }

    fn url(&self, path: &str) -> String {
        self.0.url(0, path)
    }

    /// Sends a turn of `api` as client `key` in `session`, reads the whole reply.
    async fn turn(
        &self,
        api: Api,
        key: &str,
        session: &str,
        body: &str,
        extra_headers: &[(&str, &str)],
    ) -> (StatusCode, Bytes) {
        let mut b = Request::post(self.url(api.path())).header("content-type", "application/json");
        b = match api {
            Api::Messages => b
                .header("x-api-key", key)
                .header("anthropic-version", "2023-06-01")
                .header("x-claude-code-session-id", session),
            _ => b
                .header("authorization", format!("Bearer {key}"))
                .header("session-id", session),
        };
        for (k, v) in extra_headers {
            b = b.header(*k, *v);
        }
        let res = self
            .client
            .request(b.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
            .await
            .unwrap();
        let status = res.status();
        (status, res.into_body().collect().await.unwrap().to_bytes())
    }

    async fn admin(&self, method: &str, path: &str, token: Option<&str>) -> (StatusCode, Value) {
        let mut b = Request::builder().method(method).uri(self.url(path));
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let res = self
            .client
            .request(b.body(Full::default()).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    fn summaries(&self) -> Vec<RecordedRequest> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| r.summary)
            .collect()
    }
}

fn has_handoff(r: &RecordedRequest) -> bool {
    contains(&r.body, HANDOFF_TAG)
}

/// The scenario of the module docs for one API, streamed or not.
async fn relay_scenario(api: Api, stream: bool) {
    let headers = match api {
        Api::Messages => SimQuotaHeaders::Anthropic,
        _ => SimQuotaHeaders::Codex,
    };
    let env = setup_full(headers, "", true).await;
    let (first, second) = api.accounts();
    let session = format!("sess-{api:?}-{stream}");

    for turn in 1..=3 {
        let body = api.body(turn, stream);
        let (status, out) = env.turn(api, "client-1", &session, &body, &[]).await;
        assert_eq!(status, 200, "turn {turn}: {out:?}");
        let last = env.turns().pop().unwrap();
        assert_eq!(last.account.as_deref(), Some(first), "turn {turn}");
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.contains(&format!("{first}.")), "{text}");
    }
    env.idle().await;

    // One summary call, sent to the session's account, and one handoff stored.
    let summaries = env.summaries();
    assert_eq!(summaries.len(), 1, "one summary call");
    assert_eq!(summaries[0].account.as_deref(), Some(first));
    assert_eq!(
        summaries[0].uri.path(),
        api.path().split('?').next().unwrap()
    );
    let stored = env.stored(Some(&session)).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].from_account, first);
    assert_eq!(stored[0].handoff.summary, SUMMARY_TEXT);
    assert!(
        env.turns().iter().all(|r| !has_handoff(r)),
        "nothing injected yet"
    );

    // The account is used up: the next turn gets a 429 there, is retried on the next account,
    // and that attempt carries the handoff.
    env.sim.set_used(first, 100.0);
    env.sim.clear_requests();
    let (status, out) = env
        .turn(api, "client-1", &session, &api.body(4, stream), &[])
        .await;
    assert_eq!(status, 200, "the client never sees the 429: {out:?}");
    assert!(
        std::str::from_utf8(&out)
            .unwrap()
            .contains(&format!("{second}."))
    );
    let turns = env.turns();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].account.as_deref(), Some(first));
    assert!(
        !has_handoff(&turns[0]),
        "the exhausted account gets no handoff"
    );
    assert_eq!(turns[1].account.as_deref(), Some(second));
    assert!(has_handoff(&turns[1]), "the new account gets the handoff");
    assert!(contains(&turns[1].body, SUMMARY_TEXT));
    assert!(contains(&turns[1].body, "src/cli.rs"));
    let v = turns[1].json().expect("the rewritten body is JSON");
    match api {
        Api::Chat => {
            assert_eq!(v["messages"][0]["role"], "system");
            assert!(
                v["messages"][0]["content"]
                    .as_str()
                    .unwrap()
                    .starts_with(HANDOFF_TAG)
            );
            assert_eq!(v["messages"][1]["content"], "You are a coding agent.");
        }
        Api::Responses => {
            assert_eq!(v["input"][0]["role"], "developer");
            assert!(v["input"][0].to_string().contains(HANDOFF_TAG));
        }
        Api::Messages => {
            assert!(v["system"].to_string().contains(HANDOFF_TAG));
            assert!(v["system"].to_string().contains("You are a coding agent."));
        }
    }
    env.idle().await;
    assert!(
        env.stored(Some(&session)).await.is_empty(),
        "the consumed handoff is deleted"
    );

    // Exactly once: the following turns stay on the new account without a handoff.
    for turn in 5..=6 {
        let (status, _) = env
            .turn(api, "client-1", &session, &api.body(turn, stream), &[])
            .await;
        assert_eq!(status, 200);
    }
    env.idle().await;
    let turns = env.turns();
    assert_eq!(turns.len(), 4);
    assert!(
        turns[2..]
            .iter()
            .all(|r| r.account.as_deref() == Some(second))
    );
    assert_eq!(turns.iter().filter(|r| has_handoff(r)).count(), 1);
    env.0.shutdown().await;
}

#[tokio::test]
async fn chat_completions_session_relays_across_a_429() {
    relay_scenario(Api::Chat, false).await;
}

#[tokio::test]
async fn chat_completions_stream_session_relays_across_a_429() {
    relay_scenario(Api::Chat, true).await;
}

#[tokio::test]
async fn responses_session_relays_across_a_429() {
    relay_scenario(Api::Responses, false).await;
}

#[tokio::test]
async fn responses_stream_session_relays_across_a_429() {
    relay_scenario(Api::Responses, true).await;
}

#[tokio::test]
async fn anthropic_messages_session_relays_across_a_429() {
    relay_scenario(Api::Messages, false).await;
}

#[tokio::test]
async fn anthropic_messages_stream_session_relays_across_a_429() {
    relay_scenario(Api::Messages, true).await;
}

/// Crosses the threshold on the first account of `api` with turns 1–3 (30, 60, 90 %).
async fn cross_threshold(env: &Env, api: Api, key: &str, session: &str) {
    for turn in 1..=3 {
        let (status, _) = env
            .turn(api, key, session, &api.body(turn, false), &[])
            .await;
        assert_eq!(status, 200);
    }
    env.idle().await;
}
