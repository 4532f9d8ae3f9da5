//! Responses → Anthropic Messages translation end to end: a real gateway on 127.0.0.1:0, a
//! real HTTP client, and the strict simulated provider, whose Messages endpoint refuses what
//! the real API refuses (Responses fields, a first message not from `user`, roles not
//! alternating, unpaired `tool_use`/`tool_result`, another account's signed thinking).
//!
//! Combo `codex-claude` is `[codex/gpt-5.5, anthropic/claude-sonnet-4-5]`: provider `codex`
//! (`api = "openai"`) speaks Responses, provider `anthropic` (`api = "anthropic"`) only
//! Messages. A Codex
//! session whose first target is exhausted on every account moves to the second target,
//! translated both ways, with the model switch relayed.

use context_relay_sim::{RecordedRequest, SimProvider, SimQuotaHeaders};
use context_relay_testkit::clients::{completed, contains, json_headers, sse_events};
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::handoff::{HANDOFF_TAG, SUMMARY_NEEDLE, summary_reply};
use context_relay_testkit::harness::{ADMIN_TOKEN, Harness};
use serde_json::{Value, json};

const FIRST: &str = "codex/gpt-5.5";
const SECOND: &str = "anthropic/claude-sonnet-4-5";
/// Words of the bare note (no summary of the session exists).
const NO_SUMMARY: &str = "no summary of the earlier session exists";
/// The opening of a handoff built from the request at the switch.
const BUILT: &str =
    "No model summary was available; this handoff was built from the conversation itself";

/// A gateway over one simulator (Anthropic quota headers): provider `codex` (accounts
/// `acct-a`, `acct-b`), provider `anthropic` with `api = "anthropic"` (accounts `acct-x`,
/// `acct-y`); combos `codex-claude` (both, in that order) and `claude-only`.
async fn harness(tool: Option<&str>) -> Harness {
    let mut sim = SimProvider::builder()
        .account("acct-a", "key-acct-a")
        .account("acct-b", "key-acct-b")
        .account("acct-x", "key-acct-x")
        .account("acct-y", "key-acct-y")
        .quota_step(10.0)
        .quota_headers(SimQuotaHeaders::Anthropic)
        .summary_reply(SUMMARY_NEEDLE, summary_reply());
    if let Some(tool) = tool {
        sim = sim.tool_call(tool);
    }
    let sim = sim.start().await.expect("sim");
    let base_url = sim.base_url();
    let text = format!(
        r#"
admin_token = "{ADMIN_TOKEN}"
[store]
backend = "memory"
[relay]
handoff_providers = ["*"]
[[providers]]
name = "codex"
base_url = "{base_url}"
api = "openai"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-acct-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key = "key-acct-b"
[[providers]]
name = "anthropic"
base_url = "{base_url}"
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
name = "codex-claude"
targets = ["{FIRST}", "{SECOND}"]
[[combos]]
name = "claude-only"
targets = ["{SECOND}"]
"#
    );
    Harness::single(sim, &text).await
}

/// What Codex reads of a Responses stream: the joined text deltas, the `output_item.done`
/// items, and the `response.completed` event (Codex fails a turn without it).
fn read_as_codex(reply: &[u8]) -> (String, Vec<Value>, Value) {
    let events = sse_events(reply);
    let text = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    let items = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .map(|e| e["item"].clone())
        .collect();
    let done = events
        .iter()
        .find(|e| e["type"] == "response.completed")
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no response.completed in {}",
                String::from_utf8_lossy(reply)
            )
        });
    assert_eq!(events[0]["type"], "response.created");
    (text, items, done)
}

/// A Messages request with nothing of the Responses API in it.
fn assert_messages_shape(r: &RecordedRequest) {
    assert!(r.uri.path().ends_with("/v1/messages"), "{}", r.uri);
    assert_eq!(r.rejected, None, "the Messages endpoint accepted it");
    let body = r.json().expect("JSON");
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert!(body["max_tokens"].as_u64().is_some());
    for key in [
        "input",
        "instructions",
        "reasoning",
        "store",
        "include",
        "previous_response_id",
        "prompt_cache_key",
        "text",
    ] {
        assert!(body.get(key).is_none(), "{key} was sent to Anthropic");
    }
    for needle in [
        "encrypted_content",
        "\"type\":\"reasoning\"",
        "previous_response_id",
    ] {
        assert!(!contains(&r.body, needle), "{needle} was sent to Anthropic");
    }
    assert_eq!(body["messages"][0]["role"], "user");
}

#[tokio::test]
async fn a_codex_session_moves_to_anthropic_translated_with_the_model_switch() {
    let h = harness(None).await;
    let session = "0199c000-0000-7000-8000-00000000b001";
    let mut conv = Conversation::asking(Client::Codex, session, "codex-claude");
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let first = h.last_turn();
    assert_eq!(first.account.as_deref(), Some("acct-a"));
    assert!(first.uri.path().ends_with("/v1/responses"));
    h.idle().await;
    // The history now holds acct-a's reasoning item with its encrypted_content.
    assert!(
        serde_json::to_string(&conv.body)
            .unwrap()
            .contains("encrypted_content")
    );

    h.sim.set_used("acct-a", 100.0);
    h.sim.set_used("acct-b", 100.0);
    let (status, acted, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let acted = acted.unwrap_or_default();
    assert!(
        acted.contains("model-switch") && acted.contains("injected"),
        "{acted}"
    );
    let moved = h.last_turn();
    assert_eq!(moved.account.as_deref(), Some("acct-x"));
    assert_messages_shape(&moved);
    let body = moved.json().unwrap();
    let system = body["system"][0]["text"].as_str().expect("a system prompt");
    assert!(
        system.contains(HANDOFF_TAG),
        "the handoff is in Anthropic's system"
    );
    assert!(system.contains(&format!(
        "<transfer_reason>Model switch from {FIRST} to {SECOND}: continuing a previous session</transfer_reason>"
    )), "{}", &system[..system.len().min(2000)]);
    // No summary was ever written: the switch carries one built from the request itself.
    assert!(system.contains(BUILT), "built from the request");
    assert!(!system.contains(NO_SUMMARY));
    // Codex's own 20 KB developer prompt travels in system too.
    assert!(system.len() > 15_000, "{}", system.len());
    let (text, items, done) = read_as_codex(&reply);
    assert_eq!(text, "Reply 1 from account acct-x.");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["content"][0]["text"], text);
    assert!(done["response"]["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert!(completed(&reply));

    // The first answer on the new model wrote a model-switch handoff there, through the
    // same translation (the summary request is in the client's shape); beside it, the one
    // built when the first target's next account was tried, and refused.
    let listed: Vec<Value> = h
        .admin_handoffs(session)
        .await
        .into_iter()
        .filter(|h| h["kind"] != "extractive")
        .collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["kind"], "model-switch");
    assert_eq!(listed[0]["from_provider"], "anthropic");
    assert_eq!(listed[0]["from_account"], "acct-x");
    let summaries: Vec<RecordedRequest> =
        h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].account.as_deref(), Some("acct-x"));
    assert_messages_shape(&summaries[0]);
    // The Anthropic quota headers of translated answers were read.
    let used = h.account(0, "acct-x").await["used_ratio"].as_f64();
    assert!(used.is_some_and(|u| u > 0.0), "{used:?}");

    // The next turn stays on the new model, its history (the translated items) accepted.
    let (status, acted, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert!(!acted.unwrap_or_default().contains("model-switch"));
    let next = h.last_turn();
    assert_eq!(next.account.as_deref(), Some("acct-x"));
    assert_messages_shape(&next);
    assert!(!contains(&next.body, HANDOFF_TAG));
    let messages = next.json().unwrap()["messages"].as_array().unwrap().clone();
    assert!(
        messages.iter().any(|m| m["role"] == "assistant"
            && m["content"][0]["text"] == "Reply 1 from account acct-x.")
    );
    let (text, _, _) = read_as_codex(&reply);
    assert_eq!(text, "Reply 2 from account acct-x.");
}

#[tokio::test]
async fn a_json_round_trip_rotates_on_an_anthropic_429() {
    let h = harness(None).await;
    // acct-x is used up: its 429 (translated) rotates the request to acct-y.
    h.sim.set_used("acct-x", 100.0);
    let headers = json_headers();
    let body = json!({"model": "claude-only", "instructions": "Be terse.", "input": "say hi",
                      "store": false, "reasoning": {"effort": "low"}});
    let (status, _, reply) = h.send(0, "/v1/responses", &headers, &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let v: Value = serde_json::from_slice(&reply).expect("a JSON answer");
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["output"][0]["type"], "message");
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        "Reply 1 from account acct-y."
    );
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let turns = h.turns();
    let accounts: Vec<_> = turns
        .iter()
        .map(|r| r.account.clone().unwrap_or_default())
        .collect();
    assert_eq!(accounts, ["acct-x", "acct-y"]);
    let sent = turns[1].json().unwrap();
    assert_eq!(
        sent["system"],
        json!([{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "say hi", "cache_control": {"type": "ephemeral"}}]}])
    );
    assert_eq!(sent["max_tokens"], 32000);
    assert!(sent.get("stream").is_none());
    assert_eq!(h.account(0, "acct-x").await["state"], "exhausted");

    // Every account used up: the client gets the 429 in its own shape.
    h.sim.set_used("acct-y", 100.0);
    let (status, _, reply) = h.send(0, "/v1/responses", &headers, &body).await;
    assert_eq!(status, 429);
    let v: Value = serde_json::from_slice(&reply).expect("JSON error");
    assert!(v["error"]["message"].is_string(), "{v}");
}

#[tokio::test]
async fn a_tool_call_round_trip() {
    let h = harness(Some("exec_command")).await;
    let session = "0199c000-0000-7000-8000-00000000b003";
    let mut conv = Conversation::asking(Client::Codex, session, "claude-only");
    let (status, _, reply) = h.send(0, "/v1/responses", &conv.headers, &conv.body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let (text, items, done) = read_as_codex(&reply);
    assert_eq!(text, "Reply 1 from account acct-x.");
    assert_eq!(items.len(), 2, "{items:?}");
    let call = &items[1];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "exec_command");
    let call_id = call["call_id"].as_str().unwrap().to_owned();
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"cmd": ["ls", "-la"]}));
    // The arguments came as deltas too.
    let deltas: String = sse_events(&reply)
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .filter_map(|e| e["delta"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(deltas, call["arguments"].as_str().unwrap());
    assert_eq!(done["response"]["output"].as_array().unwrap().len(), 2);
    let sent = h.last_turn().json().unwrap();
    assert!(
        sent["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "apply_patch"
                && t["input_schema"]["properties"]["input"]["type"] == "string")
    );

    // Codex runs the command and sends the whole history back with the call's output.
    let input = conv.body["input"].as_array_mut().unwrap();
    input.extend(items.iter().cloned());
    input.push(json!({"type": "function_call_output", "call_id": call_id, "output": "total 0"}));
    let (status, _, reply) = h.send(0, "/v1/responses", &conv.headers, &conv.body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let r = h.last_turn();
    assert_messages_shape(&r);
    let messages = r.json().unwrap()["messages"].as_array().unwrap().clone();
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert_eq!(messages[n - 2]["content"][1]["type"], "tool_use");
    assert_eq!(messages[n - 2]["content"][1]["id"], call_id.as_str());
    assert_eq!(messages[n - 1]["content"][0]["type"], "tool_result");
    assert_eq!(
        messages[n - 1]["content"][0]["tool_use_id"],
        call_id.as_str()
    );
    let (text, items, _) = read_as_codex(&reply);
    assert_eq!(text, "Reply 2 from account acct-x.");
    assert_eq!(items.len(), 1, "an answer, no new call");
}

#[tokio::test]
async fn shapes_without_a_translation_are_refused_in_the_clients_shape() {
    let h = harness(None).await;
    let headers = json_headers();
    let chat = json!({"model": "claude-only", "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, reply) = h.send(0, "/v1/chat/completions", &headers, &chat).await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_slice(&reply).expect("JSON error");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("anthropic"), "{message}");
    // (`/v1/responses/compact` is translated: tests/translate_answers.rs.)
    // An Anthropic client sent to the OpenAI-only provider: refused in the Anthropic shape.
    let messages = json!({"model": "codex/gpt-5.5", "max_tokens": 5,
                          "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, reply) = h.send(0, "/v1/messages", &headers, &messages).await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_slice(&reply).expect("JSON error");
    assert_eq!(v["type"], "error");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("codex"),
        "{v}"
    );
    assert!(h.turns().is_empty(), "nothing reached the provider");
}
