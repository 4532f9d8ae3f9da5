//! A Responses client that chains its turns (`store: true`, `previous_response_id`, as the
//! OpenAI SDK's agents do) and is in a tool loop when its account runs out: the new account
//! cannot read the old one's stored response, so the chain goes, and the tool output whose
//! call was in it reaches the new account as a user message instead of an output answering
//! nothing (which the provider refuses with a 400), and a handoff built there says the chain
//! could not be read.

use context_relay_sim::SimProvider;
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_output_of_a_dropped_chain_reaches_the_new_account_as_a_message() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("authorization".to_owned(), "Bearer sk-agent".to_owned()),
        ("session_id".to_owned(), "chained-tool-loop".to_owned()),
    ];
    let first = json!({"model": "codex-relay", "store": true,
        "input": [{"role": "user", "content": [{"type": "input_text",
            "text": "What is the weather in Paris? Use the tool."}]}]});
    let (status, _, reply) = h.send(0, "/v1/responses", &headers, &first).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let id = serde_json::from_slice::<Value>(&reply).unwrap()["id"]
        .as_str()
        .expect("a stored response")
        .to_owned();
    h.idle().await;

    // The account runs out while the tool runs; the next turn carries only the output.
    h.sim.set_used("acct-a", 100.0);
    h.sim.clear_requests();
    let next = json!({"model": "codex-relay", "store": true, "previous_response_id": id,
        "input": [{"type": "function_call_output", "call_id": "call_w1",
            "output": "Paris: sunny, 21 C"}]});
    let (status, acted, reply) = h.send(0, "/v1/responses", &headers, &next).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    // A handoff goes in though nothing of the chain could be read: it says so, with the result.
    assert_eq!(acted.as_deref(), Some("injected, extractive, scrubbed"));
    let sent = h.sim.requests().pop().expect("sent");
    assert_eq!(sent.account.as_deref(), Some("acct-b"));
    assert_eq!(sent.rejected, None);
    let body = sent.json().unwrap();
    assert!(body.get("previous_response_id").is_none());
    let text = serde_json::to_string(&body["input"]).unwrap();
    assert!(!text.contains("function_call_output"), "{text}");
    assert!(
        text.contains("Paris: sunny, 21 C") && text.contains("call_w1"),
        "{text}"
    );
    let handoff = text.find(HANDOFF_TAG).expect("a handoff");
    assert!(text[handoff..].contains("previous_response_id"), "{text}");
}
