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

#[tokio::test]
async fn responses_account_bound_state_is_removed_on_the_switch_only() {
    let env = setup().await;
    let session = "sess-bound";
    // State acct-a minted: a stored response (its id comes back in the reply) and a
    // reasoning blob. The strict simulator rejects both on any other account.
    let (status, first) = env
        .turn(
            Api::Responses,
            "client-1",
            "sess-warm-up",
            r#"{"model":"codex-relay","stream":false,"input":"hello"}"#,
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let first: Value = serde_json::from_slice(&first).unwrap();
    let prev = first["id"].as_str().unwrap().to_owned();
    // The warm-up turn does not count towards the threshold crossing below.
    env.sim.set_used("acct-a", 0.0);
    let blob = env.sim.mint_encrypted("acct-a", "rs_1");
    // A Codex-like body: encrypted reasoning, a previous response, the turn-state header.
    let body = |turn: usize| {
        json!({
            "model": "codex-relay", "stream": true, "store": true,
            "previous_response_id": prev,
            "include": ["reasoning.encrypted_content"],
            "input": [
                {"type": "message", "role": "developer", "content": "You are Codex."},
                {"type": "message", "role": "user", "content": format!("turn {turn}: refactor")},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": blob},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                {"type": "message", "role": "user", "content": "continue"}
            ],
            "prompt_cache_key": session
        })
        .to_string()
    };
    let turn_state = [("x-codex-turn-state", "ts-from-acct-a")];
    for turn in 1..=3 {
        let b = body(turn);
        let (status, _) = env
            .turn(Api::Responses, "client-1", session, &b, &turn_state)
            .await;
        assert_eq!(status, 200);
        // No switch: forwarded byte for byte apart from the model, header included.
        let last = env.turns().pop().unwrap();
        assert_eq!(
            &last.body[..],
            b.replace("codex-relay", "gpt-5.5").as_bytes()
        );
        assert_eq!(last.headers["x-codex-turn-state"], "ts-from-acct-a");
    }
    env.idle().await;
    assert_eq!(env.stored(Some(session)).await.len(), 1);

    env.sim.set_used("acct-a", 100.0);
    env.sim.clear_requests();
    let b = body(4);
    let (status, _) = env
        .turn(Api::Responses, "client-1", session, &b, &turn_state)
        .await;
    assert_eq!(status, 200);
    let turns = env.turns();
    assert_eq!(turns.len(), 2);
    // The attempt on the session's own account is untouched.
    assert_eq!(
        &turns[0].body[..],
        b.replace("codex-relay", "gpt-5.5").as_bytes()
    );
    assert_eq!(turns[0].headers["x-codex-turn-state"], "ts-from-acct-a");
    // The attempt on the new account carries no state the new account would reject.
    let moved = &turns[1];
    assert_eq!(moved.account.as_deref(), Some("acct-b"));
    assert!(moved.headers.get("x-codex-turn-state").is_none());
    let v = moved.json().unwrap();
    assert!(v.get("previous_response_id").is_none(), "{v}");
    let items = v["input"].as_array().unwrap();
    assert!(items.iter().all(|i| i["type"] != "reasoning"), "{v}");
    assert!(!contains(&moved.body, &blob));
    assert_eq!(moved.rejected, None);
    assert!(has_handoff(moved));
    // Everything else survives.
    assert_eq!(v["prompt_cache_key"], session);
    assert!(items.iter().any(|i| i["content"] == "continue"));
}

#[tokio::test]
async fn anthropic_signed_thinking_is_removed_on_the_switch() {
    let env = setup_full(SimQuotaHeaders::Anthropic, "", true).await;
    let session = "cc-thinking";
    cross_threshold(&env, Api::Messages, "client-1", session).await;
    env.sim.set_used("acct-c", 100.0);
    env.sim.clear_requests();
    let signature = env.sim.mint_signature("acct-c", "th_1");
    let redacted = env.sim.mint_signature("acct-c", "rd_1");
    let body = json!({
        "model": "claude-relay", "max_tokens": 2048, "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "turn 1: add the --json flag, step 1"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Let me plan.", "signature": signature},
                {"type": "redacted_thinking", "data": redacted},
                {"type": "text", "text": "Planned."}
            ]},
            {"role": "user", "content": "go on"}
        ]
    })
    .to_string();
    let (status, out) = env
        .turn(Api::Messages, "client-1", session, &body, &[])
        .await;
    assert_eq!(status, 200);
    assert!(
        std::str::from_utf8(&out)
            .unwrap()
            .starts_with("event: message_start")
    );
    let turns = env.turns();
    assert_eq!(turns.len(), 2);
    assert!(
        contains(&turns[0].body, &signature),
        "own account: untouched"
    );
    let moved = &turns[1];
    assert_eq!(moved.account.as_deref(), Some("acct-d"));
    assert_eq!(moved.uri.query(), Some("beta=true"));
    assert!(!contains(&moved.body, &signature));
    assert!(!contains(&moved.body, &redacted));
    assert_eq!(moved.rejected, None);
    let v = moved.json().unwrap();
    assert_eq!(v["messages"][1]["content"][0]["text"], "Planned.");
    // The handoff goes after the cached system block, which keeps its cache_control.
    assert_eq!(v["system"][0]["cache_control"]["type"], "ephemeral");
    assert!(v["system"].to_string().contains(HANDOFF_TAG));
}

#[tokio::test]
async fn two_tenants_with_one_session_id_are_isolated() {
    let env = setup().await;
    let session = "shared-session-id";
    // Tenant 1 crosses the threshold: a handoff for tenant 1 only.
    cross_threshold(&env, Api::Chat, "client-1", session).await;
    let stored = env.stored(Some(session)).await;
    assert_eq!(stored.len(), 1);
    let tenant1 = stored[0].tenant.clone();

    env.sim.set_used("acct-a", 100.0);
    env.sim.clear_requests();
    // Tenant 2, same session id: its own binding (fill first, so acct-a → 429 → acct-b), and no
    // handoff of tenant 1 reaches it.
    let (status, _) = env
        .turn(
            Api::Chat,
            "client-2",
            session,
            &Api::Chat.body(1, false),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    env.idle().await;
    assert!(
        env.turns().iter().all(|r| !has_handoff(r)),
        "tenant 2 gets nothing"
    );
    let stored = env.stored(Some(session)).await;
    assert_eq!(stored.len(), 1, "tenant 1's handoff is still there");
    assert_eq!(stored[0].tenant, tenant1);

    // Tenant 1 moves to acct-b and gets its own handoff.
    env.sim.clear_requests();
    let (status, _) = env
        .turn(
            Api::Chat,
            "client-1",
            session,
            &Api::Chat.body(4, false),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let turns = env.turns();
    assert_eq!(
        turns.len(),
        1,
        "acct-a is known exhausted: straight to acct-b"
    );
    assert_eq!(turns[0].account.as_deref(), Some("acct-b"));
    assert!(has_handoff(&turns[0]));
    env.idle().await;
    assert!(env.stored(Some(session)).await.is_empty());
}

#[tokio::test]
async fn a_session_under_the_threshold_is_forwarded_byte_for_byte() {
    let env = setup().await;
    // Odd but valid JSON: spacing, escapes, number forms, unknown fields, key order.
    let bodies = [
        "{ \"messages\" : [{\"role\":\"user\",\"content\":\"h\\u00e9 \\ud83d\\ude00\"}], \"model\":\"codex-relay\" ,\"x_ratio\":1.50,\"x\":{\"b\":[1e3,-0.0,null],\"a\":true}}",
        "{\"model\":\"codex-relay\",\"messages\":[{\"role\":\"user\",\"content\":\"h\\u00e9 \\ud83d\\ude00\"},{\"role\":\"assistant\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":\"again\"}],\"n\":1}",
    ];
    for body in bodies {
        let (status, _) = env.turn(Api::Chat, "client-1", "under", body, &[]).await;
        assert_eq!(status, 200);
        let last = env.turns().pop().unwrap();
        assert_eq!(
            &last.body[..],
            body.replace("\"codex-relay\"", "\"gpt-5.5\"").as_bytes()
        );
    }
    env.idle().await;
    assert!(env.summaries().is_empty(), "60 % used: no summary yet");
    assert!(env.stored(None).await.is_empty());
}

#[tokio::test]
async fn clients_without_session_headers_are_sticky_and_relayed() {
    let env = setup().await;
    // No session header at all (the OpenAI SDKs): the session is the fingerprint of the
    // conversation's stable parts, the same for the resolver and both layers.
    let send = |turn: usize| {
        let body = Api::Chat.body(turn, false);
        let req = Request::post(env.url("/v1/chat/completions"))
            .header("authorization", "Bearer sdk-key")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let client = env.client.clone();
        async move {
            let res = client.request(req).await.unwrap();
            assert_eq!(res.status(), 200);
            res.into_body().collect().await.unwrap();
        }
    };
    for turn in 1..=3 {
        send(turn).await;
    }
    env.idle().await;
    let stored = env.stored(None).await;
    assert_eq!(stored.len(), 1, "a handoff keyed by the fingerprint");
    env.sim.set_used("acct-a", 100.0);
    env.sim.clear_requests();
    send(4).await;
    let turns = env.turns();
    assert_eq!(turns.len(), 2);
    assert!(has_handoff(&turns[1]));
}

#[tokio::test]
async fn an_sdk_session_without_a_header_is_one_session_across_turns_and_key_orders() {
    let env = setup().await;
    // OpenAI SDK style, no session header: the whole history is resent every turn, and the
    // members other than `model` and the conversation come in another order on each turn
    // (before or after the history). The session is the fingerprint of the first turn's
    // model, system entry and first ask, read from the start of the body only.
    let body = |turn: usize| {
        let mut messages = vec![json!({"role": "system", "content": "You are a coding agent."})];
        for t in 1..=turn {
            messages
                .push(json!({"role": "user", "content": format!("step {t}: add a --json flag")}));
            if t < turn {
                messages.push(json!({"role": "assistant", "content": format!("did step {t}")}));
            }
        }
        let messages = serde_json::to_string(&messages).unwrap();
        if turn % 2 == 1 {
            format!(
                r#"{{"model":"codex-relay","stream":false,"messages":{messages},"user":"u-1"}}"#
            )
        } else {
            format!(
                r#"{{"user":"u-1","stream":false,"model":"codex-relay","messages":{messages}}}"#
            )
        }
    };
    // The gateway tells the session on the body it forwards (the target's model name).
    let forwarded = |turn: usize| body(turn).replace("\"codex-relay\"", "\"gpt-5.5\"");
    let session = context_relay_core::session::fingerprint(forwarded(1).as_bytes()).unwrap();
    assert_eq!(
        context_relay_core::session::fingerprint(forwarded(2).as_bytes()),
        Some(session.clone())
    );
    let send = |turn: usize| {
        let req = Request::post(env.url("/v1/chat/completions"))
            .header("authorization", "Bearer sdk-key")
            .body(Full::new(Bytes::from(body(turn))))
            .unwrap();
        let client = env.client.clone();
        async move {
            let res = client.request(req).await.unwrap();
            assert_eq!(res.status(), 200);
            res.into_body().collect().await.unwrap();
        }
    };
    for turn in 1..=3 {
        send(turn).await;
    }
    env.idle().await;
    // One session: the turns stayed on one account and one handoff was written, under the
    // first turn's fingerprint.
    let served: Vec<_> = env.turns().into_iter().map(|t| t.account).collect();
    assert_eq!(served.len(), 3);
    assert!(served.iter().all(|a| *a == served[0]), "{served:?}");
    let stored = env.stored(None).await;
    assert_eq!(stored.len(), 1, "one session, one handoff");
    assert_eq!(&*stored[0].session, session);
    // The switch turn (the other key order) finds it.
    env.sim.set_used(served[0].as_deref().unwrap(), 100.0);
    env.sim.clear_requests();
    send(4).await;
    let turns = env.turns();
    assert_eq!(turns.len(), 2);
    assert!(has_handoff(&turns[1]));
}

#[tokio::test]
async fn odd_bodies_on_a_switch_fail_open() {
    let env = setup().await;
    let session = "odd";
    cross_threshold(&env, Api::Chat, "client-1", session).await;
    env.sim.set_used("acct-a", 100.0);
    // `messages` is not an array: the relay cannot inject, the request still goes through.
    let body = r#"{"model":"codex-relay","messages":42,"stream":false}"#;
    let (status, _) = env.turn(Api::Chat, "client-1", session, body, &[]).await;
    assert_eq!(status, 200);
    let (status, _) = env
        .turn(
            Api::Chat,
            "client-1",
            session,
            r#"{"model":"codex-relay","messages":[{"role":"user","content":{"weird":[]}}]}"#,
            &[],
        )
        .await;
    assert_eq!(status, 200);
    env.idle().await;
    let (status, _) = env
        .turn(
            Api::Chat,
            "client-1",
            session,
            &Api::Chat.body(5, false),
            &[],
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn with_the_relay_off_nothing_is_summarised_or_injected() {
    let env = setup_full(SimQuotaHeaders::Codex, "", false).await;
    assert!(!env.gateway().relay_enabled());
    cross_threshold(&env, Api::Chat, "client-1", "off").await;
    env.sim.set_used("acct-a", 100.0);
    let (status, _) = env
        .turn(Api::Chat, "client-1", "off", &Api::Chat.body(4, false), &[])
        .await;
    assert_eq!(status, 200);
    assert!(env.summaries().is_empty());
    assert!(env.turns().iter().all(|r| !has_handoff(r)));
    let turns = env.turns();
    // The pool still rotates on the 429.
    assert_eq!(turns.last().unwrap().account.as_deref(), Some("acct-b"));

    // The config key does the same.
    let text = config_text("http://127.0.0.1:9/v1", "relay_enabled = false");
    let gw = Gateway::new(Config::from_toml_str(&text, |_| None).unwrap()).unwrap();
    assert!(!gw.relay_enabled());
    assert!(gw.relay(true).relay_enabled());
}

#[tokio::test]
async fn provider_quota_kind_reaches_the_relay() {
    // The anthropic provider is configured to read no quota headers: its accounts never get
    // a handoff, although the simulator reports 90 % in Anthropic headers.
    let env = setup_full(SimQuotaHeaders::Anthropic, "", true).await;
    let text = config_text(&env.sim.base_url(), "").replace(
        "auth = \"x-api-key\"",
        "auth = \"x-api-key\"\nquota = \"none\"",
    );
    let gateway = Gateway::new(Config::from_toml_str(&text, |_| None).unwrap()).unwrap();
    let env2 = Env(Harness::serve(env.0.sim, gateway).await);
    cross_threshold(&env2, Api::Messages, "client-1", "no-quota").await;
    assert_eq!(env2.sim.used("acct-c"), Some(90.0));
    assert!(env2.summaries().is_empty());
    assert!(env2.stored(None).await.is_empty());
    // (With the default `quota = "auto"` the same turns produce a handoff: see
    // `anthropic_messages_session_relays_across_a_429`.)
}

#[tokio::test]
async fn admin_routes_list_and_delete() {
    let env = setup().await;
    cross_threshold(&env, Api::Chat, "client-1", "adm-1").await;
    // The quota is the account's: start over for the second tenant's session.
    env.sim.set_used("acct-a", 0.0);
    cross_threshold(&env, Api::Chat, "client-2", "adm-2").await;

    // Without or with a wrong token: 401.
    let (status, _) = env.admin("GET", "/admin/handoffs", None).await;
    assert_eq!(status, 401);
    let (status, _) = env.admin("GET", "/admin/handoffs", Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, _) = env
        .admin("DELETE", "/admin/handoffs/adm-1", Some("adm-Secret-"))
        .await;
    assert_eq!(status, 401);

    let (status, v) = env
        .admin("GET", "/admin/handoffs?settle=true", Some(ADMIN))
        .await;
    assert_eq!(status, 200);
    let list = v["handoffs"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{v}");
    let h = list.iter().find(|h| h["session"] == "adm-1").unwrap();
    let keys: Vec<&str> = h.as_object().unwrap().keys().map(String::as_str).collect();
    let mut expected = vec![
        "tenant",
        "session",
        "combo",
        "from_provider",
        "from_account",
        "summary",
        "key_decisions",
        "task_progress",
        "active_entities",
        "message_count",
        "model",
        "generated_at",
        "expires_at",
        "kind",
        "size",
    ];
    expected.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, expected);
    assert_eq!(h["combo"], "codex-relay");
    assert_eq!(h["from_provider"], "codex");
    assert_eq!(h["from_account"], "acct-a");
    assert_eq!(h["kind"], "generated");
    assert_eq!(h["summary"], SUMMARY_TEXT);
    assert_eq!(h["key_decisions"][1], "serde for JSON");
    assert_eq!(h["active_entities"][0], "src/cli.rs");
    assert!(
        h["task_progress"]
            .as_str()
            .unwrap()
            .starts_with("done: parser")
    );
    assert!(h["message_count"].as_u64().unwrap() >= 5);
    assert_eq!(h["model"], "gpt-5.5");
    // The bytes of text the handoff carries.
    let text = |k: &str| match &h[k] {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(|s| s.as_str().unwrap_or("").len()).sum(),
        _ => 0,
    };
    let size = [
        "summary",
        "key_decisions",
        "task_progress",
        "active_entities",
    ]
    .iter()
    .map(|k| text(k))
    .sum::<usize>();
    assert_eq!(h["size"].as_u64(), Some(size as u64));
    // Open mode: `k-` and 32 hex digits of the keyed hash of the client's key.
    let tenant = h["tenant"].as_str().unwrap();
    assert!(tenant.starts_with("k-") && tenant.len() == 34, "{tenant}");
    let generated = parse_rfc3339(h["generated_at"].as_str().unwrap());
    let expires = parse_rfc3339(h["expires_at"].as_str().unwrap());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((generated - now).abs() < 3600, "{h}");
    assert!(expires > generated, "{h}");

    // Filters.
    let tenant1 = h["tenant"].as_str().unwrap().to_owned();
    let (_, v) = env
        .admin(
            "GET",
            &format!("/admin/handoffs?tenant={tenant1}"),
            Some(ADMIN),
        )
        .await;
    assert_eq!(v["handoffs"].as_array().unwrap().len(), 1);
    let (_, v) = env
        .admin("GET", "/admin/handoffs?session=adm-2", Some(ADMIN))
        .await;
    assert_eq!(v["handoffs"][0]["session"], "adm-2");
    let (_, v) = env
        .admin("GET", "/admin/handoffs?session=none", Some(ADMIN))
        .await;
    assert_eq!(v, json!({"handoffs": []}));

    // Delete: filters that match nothing, then the session.
    let (status, v) = env
        .admin(
            "DELETE",
            "/admin/handoffs/adm-1?combo=claude-relay",
            Some(ADMIN),
        )
        .await;
    assert_eq!((status, v), (StatusCode::OK, json!({"deleted": 0})));
    let (_, v) = env
        .admin(
            "DELETE",
            "/admin/handoffs/adm-1?tenant=someone-else",
            Some(ADMIN),
        )
        .await;
    assert_eq!(v, json!({"deleted": 0}));
    let (status, v) = env
        .admin("DELETE", "/admin/handoffs/adm-1", Some(ADMIN))
        .await;
    assert_eq!((status, v), (StatusCode::OK, json!({"deleted": 1})));
    let (_, v) = env.admin("GET", "/admin/handoffs", Some(ADMIN)).await;
    assert_eq!(v["handoffs"].as_array().unwrap().len(), 1);
    assert_eq!(v["handoffs"][0]["session"], "adm-2");
    let (_, v) = env
        .admin("DELETE", "/admin/handoffs/adm-1", Some(ADMIN))
        .await;
    assert_eq!(v, json!({"deleted": 0}));
}

#[tokio::test]
async fn admin_routes_are_off_without_a_token() {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let text = config_text(&sim.base_url(), "").replace(&format!("admin_token = \"{ADMIN}\""), "");
    let gateway = Gateway::new(Config::from_toml_str(&text, |_| None).unwrap()).unwrap();
    let env = Env(Harness::serve(sim, gateway).await);
    for (method, path) in [("GET", "/admin/handoffs"), ("DELETE", "/admin/handoffs/s")] {
        for token in [None, Some(ADMIN)] {
            let (status, _) = env.admin(method, path, token).await;
            assert_eq!(status, 404, "{method} {path}");
        }
    }
}

/// Seconds since the epoch of an RFC 3339 UTC time as the admin API writes it.
fn parse_rfc3339(s: &str) -> i64 {
    let ts: jiff::Timestamp = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
    assert!(s.ends_with('Z'), "{s}");
    assert_eq!(s.as_bytes()[10], b'T', "{s}");
    ts.as_second()
}

#[tokio::test]
async fn admin_lists_and_deletes_both_handoff_kinds_of_a_session() {
    let env = setup().await;
    cross_threshold(&env, Api::Chat, "client-1", "adm-both").await;
    let (_, v) = env
        .admin("GET", "/admin/handoffs?settle=true", Some(ADMIN))
        .await;
    assert_eq!(v["handoffs"].as_array().unwrap().len(), 1, "{v}");
    // A model-switch handoff of the same session, beside the account one.
    let store = env.gateway().store();
    let mut model = store.list(None, Some("adm-both")).await.unwrap()[0].clone();
    model.kind = context_relay_core::HandoffKind::ModelSwitch;
    model.handoff.summary = "before the move to another model".into();
    store.upsert(model).await.unwrap();

    let (_, v) = env
        .admin("GET", "/admin/handoffs?session=adm-both", Some(ADMIN))
        .await;
    let mut kinds: Vec<&str> = v["handoffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["kind"].as_str().unwrap())
        .collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["generated", "model-switch"], "{v}");
    let (status, v) = env
        .admin("DELETE", "/admin/handoffs/adm-both", Some(ADMIN))
        .await;
    assert_eq!((status, v), (StatusCode::OK, json!({"deleted": 2})));
    assert!(store.list(None, Some("adm-both")).await.unwrap().is_empty());
}
