//! What a Responses client gets back from a provider that speaks only Anthropic Messages,
//! end to end: a real gateway on 127.0.0.1:0, a real HTTP client, and the strict simulated
//! provider, whose Messages endpoint answers the real API's errors (a prompt longer than its
//! context window, 529 `overloaded_error`) and refuses any body that is not a valid Messages
//! request.
//!
//! - A prompt too long for the context window is `context_length_exceeded`: a `response.failed`
//!   event for a streamed request (where Codex CLI reads it, and compacts), a 400 otherwise.
//! - Codex's `/v1/responses/compact` is served with a summary written by the Anthropic model.
//! - 529 `overloaded_error` is a 503 `server_is_overloaded`.
//! - The provider's `ping` events reach the client as SSE comments.

use context_relay_core::translate::{COMPACTION_PROMPT, SUMMARY_PREFIX};
use context_relay_sim::{RecordedRequest, SimFault, SimProvider, SimQuotaHeaders};
use context_relay_testkit::clients::{compact_body, completed, json_headers, sse_events};
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::harness::{ADMIN_TOKEN, Harness};
use http::StatusCode;
use serde_json::{Value, json};

/// A gateway over a simulator with provider `anthropic` (`api = "anthropic"`, accounts
/// `acct-x` and `acct-y`) and combo `claude-only`; the Messages endpoint refuses prompts over
/// `window` tokens when one is given.
async fn harness(window: Option<u64>) -> Harness {
    let mut sim = SimProvider::builder()
        .account("acct-x", "key-acct-x")
        .account("acct-y", "key-acct-y")
        .quota_headers(SimQuotaHeaders::Anthropic);
    if let Some(w) = window {
        sim = sim.context_window(w);
    }
    let sim = sim.start().await.expect("sim");
    let text = format!(
        r#"
admin_token = "{ADMIN_TOKEN}"
[store]
backend = "memory"
[[providers]]
name = "anthropic"
base_url = "{}"
api = "anthropic"
auth = "x-api-key"
quota = "anthropic"
  [[providers.accounts]]
  id = "acct-x"
  api_key = "key-acct-x"
  [[providers.accounts]]
  id = "acct-y"
  api_key = "key-acct-y"
[[combos]]
name = "claude-only"
targets = ["anthropic/claude-sonnet-4-5"]
"#,
        sim.base_url()
    );
    Harness::single(sim, &text).await
}

/// The request reached the Messages endpoint, which accepted it as a valid Messages body.
fn assert_valid_messages(r: &RecordedRequest) -> Value {
    assert!(r.uri.path().ends_with("/v1/messages"), "{}", r.uri);
    assert_eq!(r.rejected, None, "the Messages endpoint accepted it");
    let body = r.json().expect("JSON");
    assert_eq!(body["model"], "claude-sonnet-4-5");
    for key in [
        "input",
        "instructions",
        "reasoning",
        "store",
        "include",
        "text",
    ] {
        assert!(body.get(key).is_none(), "{key} was sent to Anthropic");
    }
    body
}

#[tokio::test]
async fn a_prompt_too_long_is_context_length_exceeded_where_codex_reads_it() {
    let h = harness(Some(4_000)).await;
    let conv = Conversation::asking(
        Client::Codex,
        "0199c000-0000-7000-8000-00000000e001",
        "claude-only",
    );
    let (status, _, reply) = h.send(0, "/v1/responses", &conv.headers, &conv.body).await;
    // Streamed: a 200 stream of response.created then response.failed.
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let events = sse_events(&reply);
    assert_eq!(events[0]["type"], "response.created");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.failed", "{events:?}");
    let error = &last["response"]["error"];
    assert_eq!(error["code"], "context_length_exceeded");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("prompt is too long: ") && message.ends_with(" tokens > 4000 maximum"),
        "{message}"
    );
    // It was the provider's answer about the request: no other account was tried.
    let turns = h.turns();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].rejected.as_deref(), Some("prompt_too_long"));

    // Not streamed: the 400 with that code.
    let body = json!({"model": "claude-only", "input": "word ".repeat(5_000), "store": false});
    let (status, _, reply) = h.send(0, "/v1/responses", &json_headers(), &body).await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&reply));
    let v: Value = serde_json::from_slice(&reply).expect("a JSON error");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("prompt is too long: ")
    );

    // A prompt that fits is served as usual.
    let body = json!({"model": "claude-only", "input": "say hi", "store": false});
    let (status, _, _) = h.send(0, "/v1/responses", &json_headers(), &body).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn codex_compaction_is_served_with_a_summary_by_the_anthropic_model() {
    let h = harness(None).await;
    let mut conv = Conversation::asking(
        Client::Codex,
        "0199c000-0000-7000-8000-00000000e002",
        "claude-only",
    );
    let (status, _, _) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    let user_messages: Vec<Value> = conv.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message" && i["role"] == "user")
        .cloned()
        .collect();
    assert!(user_messages.len() >= 2, "the history has user messages");

    let compact = compact_body(&conv.body);
    let (status, _, reply) = h
        .send(0, "/v1/responses/compact", &conv.headers, &compact)
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let v: Value = serde_json::from_slice(&reply).expect("a JSON compaction");
    assert_eq!(v["object"], "response.compaction");
    assert!(v["id"].is_string());
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let output = v["output"].as_array().expect("output").clone();
    // The user messages, then the summary as a message Codex carries on from.
    assert_eq!(output[..output.len() - 1], user_messages[..]);
    let summary = output.last().unwrap();
    assert_eq!(summary["type"], "message");
    assert_eq!(summary["role"], "user");
    assert_eq!(
        summary["content"][0]["text"],
        format!("{SUMMARY_PREFIX}Reply 2 from account acct-x.")
    );

    // Upstream: one valid, non-streamed Messages request asking for the summary.
    let r = h.last_turn();
    assert_eq!(r.account.as_deref(), Some("acct-x"));
    let sent = assert_valid_messages(&r);
    assert!(sent.get("stream").is_none());
    assert_eq!(sent["tool_choice"]["type"], "none");
    let messages = sent["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    let text = last["content"].as_array().unwrap().last().unwrap()["text"].clone();
    assert_eq!(text, COMPACTION_PROMPT);
    assert!(messages.iter().any(|m| m["role"] == "assistant"));

    // Codex replaces its history with the output and goes on: the next turn is served.
    let mut input = output;
    input.push(json!({"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "Go on."}]}));
    conv.body["input"] = Value::Array(input);
    let (status, _, reply) = h.send(0, "/v1/responses", &conv.headers, &conv.body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert!(completed(&reply));
    let next = assert_valid_messages(&h.last_turn());
    assert!(next.to_string().contains(SUMMARY_PREFIX.trim_end()));

    // A compaction too long for the context window is the 400 context_length_exceeded.
    let h = harness(Some(4_000)).await;
    let (status, _, reply) = h
        .send(0, "/v1/responses/compact", &conv.headers, &compact)
        .await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&reply));
    let v: Value = serde_json::from_slice(&reply).expect("a JSON error");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
}

#[tokio::test]
async fn overloaded_is_a_503_server_is_overloaded() {
    let h = harness(None).await;
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    // Both accounts overloaded: the gateway tries the second once, then answers.
    for _ in 0..2 {
        h.sim.fail_next(
            None,
            SimFault::Status(StatusCode::from_u16(529).unwrap(), overloaded.clone()),
        );
    }
    let body = json!({"model": "claude-only", "input": "say hi", "store": false});
    let (status, _, reply) = h.send(0, "/v1/responses", &json_headers(), &body).await;
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&reply));
    let v: Value = serde_json::from_slice(&reply).expect("a JSON error");
    assert_eq!(v["error"]["code"], "server_is_overloaded");
    assert_eq!(v["error"]["message"], "Overloaded");
    assert_eq!(h.turns().len(), 2, "the other account was tried once");

    // Other statuses are kept.
    let denied = json!({"type": "error", "error": {"type": "permission_error", "message": "no"}});
    h.sim
        .fail_next(None, SimFault::Status(StatusCode::NOT_FOUND, denied));
    let (status, _, reply) = h.send(0, "/v1/responses", &json_headers(), &body).await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&reply));
}

#[tokio::test]
async fn pings_reach_the_client_as_sse_comments() {
    let h = harness(None).await;
    let conv = Conversation::asking(
        Client::Codex,
        "0199c000-0000-7000-8000-00000000e004",
        "claude-only",
    );
    let (status, _, reply) = h.send(0, "/v1/responses", &conv.headers, &conv.body).await;
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&reply);
    assert!(text.contains("\n\n: ping\n\n"), "{text}");
    assert!(completed(&reply));
}
