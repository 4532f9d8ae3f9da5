//! Responses requests the real Anthropic Messages API would refuse if translated naively, sent
//! through a real gateway to the strict simulated provider (which refuses what the real API
//! refuses: tool blocks without tools, a `tool_choice` of an unknown tool, more than four
//! cache breakpoints, `temperature` with `top_p`, repeated `tool_use` ids, blank text,
//! trailing whitespace closing a final assistant message), plus a property: every
//! translation of a generated Codex-like request passes the simulated provider's rules.

use context_relay_core::translate::{RequestOptions, responses_to_messages};
use context_relay_sim::rules::{Backend, check};
use context_relay_sim::{SimProvider, SimQuotaHeaders};
use context_relay_testkit::clients::json_headers;
use context_relay_testkit::harness::Harness;
use proptest::prelude::*;
use serde_json::{Value, json};

/// A gateway over one simulator with provider `anthropic` (`api = "anthropic"`, the extra
/// provider keys `extra`), combo `claude` → `anthropic/claude-sonnet-4-5`.
async fn harness(extra: &str) -> Harness {
    harness_for(extra, "claude-sonnet-4-5").await
}

/// [`harness`] with combo `claude` → `anthropic/{model}`.
async fn harness_for(extra: &str, model: &str) -> Harness {
    let sim = SimProvider::builder()
        .account("acct-x", "key-acct-x")
        .quota_headers(SimQuotaHeaders::Anthropic)
        .start()
        .await
        .expect("sim");
    let base_url = sim.base_url();
    let text = format!(
        r#"
[store]
backend = "memory"
[[providers]]
name = "anthropic"
base_url = "{base_url}"
api = "anthropic"
auth = "x-api-key"
quota = "anthropic"
{extra}
  [[providers.accounts]]
  id = "acct-x"
  api_key = "key-acct-x"
[[combos]]
name = "claude"
targets = ["anthropic/{model}"]
"#
    );
    Harness::single(sim, &text).await
}

/// Sends a Responses `body` (model `claude`) and returns the request the provider got,
/// after checking the provider accepted it and the client got a completed answer.
async fn accepted(h: &Harness, body: &Value) -> Value {
    let headers = json_headers();
    let (status, _, reply) = h.send(0, "/v1/responses", &headers, body).await;
    let sent = h.last_turn();
    assert_eq!(sent.rejected, None, "the Messages endpoint refused it");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let v: Value = serde_json::from_slice(&reply).expect("a JSON answer");
    assert_eq!(v["status"], "completed", "{v}");
    sent.json().expect("JSON")
}

#[tokio::test]
async fn max_tokens_defaults_to_32000_or_the_providers_max_output_tokens() {
    let body = json!({"model": "claude", "input": "write a long patch"});
    let h = harness("").await;
    assert_eq!(accepted(&h, &body).await["max_tokens"], 32000);
    let h = harness("max_output_tokens = 64000").await;
    assert_eq!(accepted(&h, &body).await["max_tokens"], 64000);
    let mut own = body.clone();
    own["max_output_tokens"] = json!(300);
    assert_eq!(accepted(&h, &own).await["max_tokens"], 300);
}

/// An older Claude model's output limit is below 32000, and the simulated provider refuses a
/// `max_tokens` above it as the API does: the default follows the target model, and a
/// provider's own `max_output_tokens` still decides.
#[tokio::test]
async fn max_tokens_stays_within_an_older_claude_models_output_limit() {
    let body = json!({"model": "claude", "input": "write a long patch"});
    for (model, max) in [
        ("claude-3-5-sonnet-20241022", 8192),
        ("claude-3-haiku-20240307", 4096),
        ("claude-3-7-sonnet-20250219", 32000),
    ] {
        let h = harness_for("", model).await;
        assert_eq!(accepted(&h, &body).await["max_tokens"], max, "{model}");
    }
    let h = harness_for("max_output_tokens = 2000", "claude-3-5-sonnet-20241022").await;
    assert_eq!(accepted(&h, &body).await["max_tokens"], 2000);
}

#[tokio::test]
async fn a_history_whose_tools_were_all_dropped_reads_as_text() {
    let h = harness("").await;
    let body = json!({"model": "claude", "tools": [{"type": "web_search"}], "input": [
        {"role": "user", "content": "look it up"},
        {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Cargo.toml"},
        {"role": "user", "content": "and now?"}
    ]});
    let sent = accepted(&h, &body).await;
    assert!(sent.get("tools").is_none());
    let text = sent["messages"].to_string();
    assert!(
        !text.contains("tool_use") && !text.contains("tool_result"),
        "{text}"
    );
    assert!(
        text.contains("exec_command") && text.contains("Cargo.toml"),
        "{text}"
    );
}

#[tokio::test]
async fn a_codex_history_the_naive_translation_would_get_refused() {
    let h = harness("").await;
    let png = "data:image/png;base64,iVBORw0KGgo=";
    let body = json!({"model": "claude", "temperature": 1.4, "top_p": 0.9,
    "instructions": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]}],
    "tools": [
        {"type": "function", "name": "view_image", "parameters": {"type": "object", "properties": {}}},
        {"type": "custom", "name": "apply_patch", "description": "Edit files.",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"}},
        {"type": "web_search"}
    ],
    "tool_choice": {"type": "function", "name": "web_search"},
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "  "}, {"type": "input_text", "text": "look at both"}]},
        {"type": "function_call", "call_id": "call.1", "name": "view_image", "arguments": "{}"},
        {"type": "function_call", "call_id": "call:1", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call.1", "output": [
            {"type": "input_text", "text": "first"}, {"type": "input_image", "image_url": png}]},
        {"type": "function_call_output", "call_id": "call:1", "output": [
            {"type": "input_image", "image_url": "https://example.com/b.png"}]},
        {"role": "developer", "content": "Mind the tests."},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Both seen. \n"}]}
    ]});
    let sent = accepted(&h, &body).await;
    let system = sent["system"][0]["text"].as_str().unwrap();
    assert!(system.starts_with("You are Codex.") && system.ends_with("Mind the tests."));
    assert_eq!(sent["temperature"], 1.0);
    assert!(sent.get("top_p").is_none());
    assert_eq!(sent["tool_choice"]["type"], "auto");
    let patch = &sent["tools"][1];
    assert!(
        patch["description"]
            .as_str()
            .unwrap()
            .contains("start: begin_patch hunk+ end_patch")
    );
    let messages = sent["messages"].as_array().unwrap();
    let calls = &messages[1]["content"];
    assert_ne!(calls[0]["id"], calls[1]["id"]);
    let results = &messages[2]["content"];
    assert_eq!(results[0]["tool_use_id"], calls[0]["id"]);
    assert_eq!(results[0]["content"][1]["source"]["type"], "base64");
    assert_eq!(results[1]["tool_use_id"], calls[1]["id"]);
    assert_eq!(results[1]["content"][0]["source"]["type"], "url");
    assert_eq!(messages.last().unwrap()["content"][0]["text"], "Both seen.");
    // Breakpoints on the last tool, the system block and the last user block.
    assert_eq!(sent.to_string().matches("cache_control").count(), 3);
    assert!(patch.get("cache_control").is_some());
    assert!(results[1].get("cache_control").is_some());
}

fn item() -> impl Strategy<Value = Value> {
    let id = prop::sample::select(vec!["c1", "c.2", "c:2", "c_2", "toolu_1"]);
    let text = prop::sample::select(vec!["", " \n", "hi", "trailing \n"]);
    let role = prop::sample::select(vec!["user", "assistant", "developer"]);
    prop_oneof![
        (role, text.clone()).prop_map(|(r, t)| json!({"role": r, "content": [{"type": if r == "assistant" { "output_text" } else { "input_text" }, "text": t}]})),
        text.clone().prop_map(|t| json!({"role": "user", "content": t})),
        (id.clone(), prop::sample::select(vec!["exec_command", "apply_patch", "gone"]))
            .prop_map(|(c, n)| json!({"type": "function_call", "call_id": c, "name": n, "arguments": "{\"cmd\":\"ls\"}"})),
        id.clone().prop_map(|c| json!({"type": "custom_tool_call", "call_id": c, "name": "apply_patch", "input": "*** Begin Patch"})),
        (id.clone(), text).prop_map(|(c, t)| json!({"type": "function_call_output", "call_id": c, "output": t})),
        id.prop_map(|c| json!({"type": "function_call_output", "call_id": c, "output": [
            {"type": "input_text", "text": " "},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
            {"type": "input_file", "file_id": "f"}]})),
        Just(json!({"type": "reasoning", "encrypted_content": "x", "summary": []})),
    ]
}

proptest! {
    #[test]
    fn every_translation_passes_the_simulated_providers_rules(
        items in prop::collection::vec(item(), 0..20),
        tools in prop::sample::select(vec![0usize, 1, 2]),
        choice in prop::sample::select(vec!["auto", "required", "exec_command", "web_search"]),
        temperature in prop::option::of(-0.5f64..2.5),
        top_p in prop::option::of(0.0f64..1.0),
        instructions in prop::sample::select(vec![json!(null), json!(" "), json!("Be terse."),
            json!([{"role": "developer", "content": "Rules."}])]),
    ) {
        let tools = match tools {
            0 => json!([{"type": "web_search"}]),
            1 => json!([{"type": "function", "name": "exec_command"}]),
            _ => json!([{"type": "function", "name": "exec_command"}, {"type": "custom", "name": "apply_patch",
                "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}, {"type": "web_search"}]),
        };
        let choice = match choice {
            "auto" | "required" => json!(choice),
            name => json!({"type": "function", "name": name}),
        };
        let mut body = json!({"model": "gpt-5.5", "input": items, "tools": tools, "tool_choice": choice,
            "instructions": instructions, "stream": true});
        if let Some(t) = temperature { body["temperature"] = json!(t); }
        if let Some(p) = top_p { body["top_p"] = json!(p); }
        let t = responses_to_messages(body.to_string().as_bytes(), &RequestOptions::new("claude-sonnet-4-5"))
            .expect("translates");
        let sent: Value = serde_json::from_slice(&t.body).expect("JSON");
        let refused = check(Backend::Api, "/v1/messages", &sent);
        prop_assert!(refused.is_none(), "{:?}\n{}", refused, serde_json::to_string_pretty(&sent).unwrap());
    }
}
