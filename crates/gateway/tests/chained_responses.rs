//! A Responses client that chains its turns (`store: true`, `previous_response_id`, as the
//! OpenAI SDK's agents do) and is in a tool loop when its account runs out: the new account
//! cannot read the old one's stored response, so the chain goes, and the tool output whose
//! call was in it reaches the new account as a user message instead of an output answering
//! nothing (which the provider refuses with a 400), and a handoff built there says the chain
//! could not be read. The summary of a chained turn names its chain, unless the relay took it
//! out.

use context_relay_sim::SimProvider;
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY};
use serde_json::{Value, json};

/// What an agent client sends with each turn: JSON, its key, and `session` as Codex names it.
fn agent_headers(session: &str) -> Vec<(String, String)> {
    vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("authorization".to_owned(), "Bearer sk-agent".to_owned()),
        ("session_id".to_owned(), session.to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_output_of_a_dropped_chain_reaches_the_new_account_as_a_message() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let headers = agent_headers("chained-tool-loop");
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

/// A chained client sends only its latest turn: the summary written when its account nears its
/// limit names the chain the turn continued, so that the model reads the whole conversation
/// (the summary goes to the account that stored it), not the latest turn alone.
#[tokio::test]
async fn the_summary_of_a_chained_turn_reads_its_chain() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let headers = agent_headers("chained-summary");
    let mut previous: Option<String> = None;
    // 30 %, 60 %, then 90 % of acct-a: the third turn starts the summary.
    for turn in 1..=3 {
        let mut body = json!({"model": "codex-relay", "store": true,
            "input": [{"role": "user", "content": [{"type": "input_text",
                "text": format!("step {turn} of renaming the crate")}]}]});
        if let Some(id) = &previous {
            body["previous_response_id"] = json!(id);
        }
        let (status, _, reply) = h.send(0, "/v1/responses", &headers, &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        if turn < 3 {
            previous = serde_json::from_slice::<Value>(&reply).unwrap()["id"]
                .as_str()
                .map(str::to_owned);
        }
        h.idle().await;
    }
    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].account.as_deref(), Some("acct-a"));
    assert_eq!(summaries[0].rejected, None);
    let body = summaries[0].json().unwrap();
    assert_eq!(body["previous_response_id"].as_str(), previous.as_deref());
}

/// The turn that switched accounts had its chain taken out (the old account stored it): a
/// summary written on the new account at that turn names no chain (the new account would
/// refuse it, and the summary with it).
#[tokio::test]
async fn the_summary_of_a_switched_chained_turn_names_no_chain() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let headers = agent_headers("chained-switch-summary");
    let first = json!({"model": "codex-relay", "store": true,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "rename the crate"}]}]});
    let (_, _, reply) = h.send(0, "/v1/responses", &headers, &first).await;
    let id = serde_json::from_slice::<Value>(&reply).unwrap()["id"].clone();
    h.idle().await;
    // acct-a is used up; acct-b takes the turn and reaches 90 % with it.
    h.sim.set_used("acct-a", 100.0);
    h.sim.set_used("acct-b", 60.0);
    let next = json!({"model": "codex-relay", "store": true, "previous_response_id": id,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "go on"}]}]});
    let (status, acted, _) = h.send(0, "/v1/responses", &headers, &next).await;
    assert_eq!(status, 200);
    assert!(acted.is_some_and(|a| a.contains("scrubbed")));
    h.idle().await;
    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    let on_b: Vec<_> = summaries
        .iter()
        .filter(|r| r.account.as_deref() == Some("acct-b"))
        .collect();
    assert_eq!(on_b.len(), 1);
    assert_eq!(on_b[0].rejected, None);
    assert!(
        on_b[0]
            .json()
            .unwrap()
            .get("previous_response_id")
            .is_none()
    );
}

/// A chained client sends a few items per turn: its handoff is written again once its turns
/// have added `refresh_after_messages` items since the last one, as a client that resends its
/// history gets (a turn's own items never reach that many more than the stored handoff's).
#[tokio::test]
async fn a_chained_sessions_handoff_is_written_again_as_its_turns_add_up() {
    let store = "backend = \"memory\"\n[relay]\nrefresh_after_messages = 5";
    let h = Harness::start(1, store, SimProvider::builder()).await;
    let headers = agent_headers("chained-refresh");
    let mut previous: Option<Value> = None;
    for turn in 1..=7 {
        // Each turn lands at 85 % of acct-a: in the band, never past it.
        h.sim.set_used("acct-a", 55.0);
        let mut body = json!({"model": "codex-relay", "store": true,
            "input": [{"role": "user", "content": [{"type": "input_text",
                "text": format!("step {turn}")}]}]});
        if let Some(id) = &previous {
            body["previous_response_id"] = id.clone();
        }
        let (status, _, reply) = h.send(0, "/v1/responses", &headers, &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        previous = Some(serde_json::from_slice::<Value>(&reply).unwrap()["id"].clone());
        h.idle().await;
    }
    let summaries = h.sim.requests().into_iter().filter(|r| r.summary).count();
    // Turn 1 writes it; two items a turn, so turns 4 and 7 write it again.
    assert_eq!(summaries, 3);
}

/// The summary written in the band, at a chained turn, is what the next chained turn carries
/// to the new account: a chained turn's first item is no opening of another conversation, so
/// it does not disown the handoff (each turn sends different new input).
#[tokio::test]
async fn a_chained_session_carries_the_summary_written_in_the_band() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let headers = agent_headers("chained-band");
    let mut previous: Option<Value> = None;
    // 30 %, 60 %, then 90 % of acct-a: the third turn writes the summary; acct-a is then used
    // up and the fourth turn goes to acct-b.
    for turn in 1..=4 {
        if turn == 4 {
            assert_eq!(h.handoffs("chained-band").await, 1, "written in the band");
            h.sim.set_used("acct-a", 100.0);
            h.sim.clear_requests();
        }
        let mut body = json!({"model": "codex-relay", "store": true,
            "input": [{"role": "user", "content": [{"type": "input_text",
                "text": format!("step {turn} of renaming the crate")}]}]});
        if let Some(id) = &previous {
            body["previous_response_id"] = id.clone();
        }
        let (status, acted, reply) = h.send(0, "/v1/responses", &headers, &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        previous = Some(serde_json::from_slice::<Value>(&reply).unwrap()["id"].clone());
        h.idle().await;
        if turn == 4 {
            assert_eq!(
                acted.as_deref(),
                Some("injected, scrubbed"),
                "the summary, not a stand-in"
            );
        }
    }
    let sent = h.turns().pop().expect("sent");
    assert_eq!(sent.account.as_deref(), Some("acct-b"));
    assert_eq!(sent.rejected, None);
    let text = serde_json::to_string(&sent.json().unwrap()["input"]).unwrap();
    assert_eq!(text.matches(HANDOFF_TAG).count(), 1, "{text}");
    assert_eq!(h.handoffs("chained-band").await, 0, "consumed");
}

/// Two chains share the session header (an agent and its sub-agent, each with its own
/// `instructions`): the summary written at one of the agent's turns is never carried by the
/// sub-agent's turn that reaches the new account first, nor anything of the sub-agent's by
/// the agent's (chains share their session's key: the agent's summary is lost to the
/// sub-agent's stand-in, see the closing note).
#[tokio::test]
async fn a_sub_agents_chain_does_not_take_its_parents_summary() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let headers = agent_headers("chained-agents");
    let send = async |who: &str, step: usize, previous: &Option<Value>| {
        let mut body = json!({"model": "codex-relay", "store": true,
            "instructions": format!("You are the {who}."),
            "input": [{"role": "user", "content": [{"type": "input_text",
                "text": format!("{who} step {step}")}]}]});
        if let Some(id) = previous {
            body["previous_response_id"] = id.clone();
        }
        let (status, acted, reply) = h.send(0, "/v1/responses", &headers, &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        h.idle().await;
        let id = serde_json::from_slice::<Value>(&reply).unwrap()["id"].clone();
        (acted, Some(id))
    };
    let (mut parent, mut sub) = (None, None);
    // 30 %, 60 %: one turn each; then the parent's turn at 90 % writes the summary.
    parent = send("planner", 1, &parent).await.1;
    sub = send("sub-agent", 1, &sub).await.1;
    parent = send("planner", 2, &parent).await.1;
    assert_eq!(h.handoffs("chained-agents").await, 1, "written in the band");
    h.sim.set_used("acct-a", 100.0);
    // The sub-agent reaches the new account first: not with the planner's summary.
    let (acted, _) = send("sub-agent", 2, &sub).await;
    assert!(
        acted.as_deref().is_some_and(|a| a.contains("scrubbed")),
        "{acted:?}"
    );
    let sent = h.turns().pop().expect("sent");
    let text = serde_json::to_string(&sent.json().unwrap()["input"]).unwrap();
    assert!(
        !text.contains("SUMMARY") && !text.contains("--json flag"),
        "{text}"
    );
    // The planner's next turn carries nothing of the sub-agent's.
    let (acted, _) = send("planner", 3, &parent).await;
    assert!(acted.is_some(), "the planner's turn reached acct-b");
    for r in h
        .turns()
        .iter()
        .filter(|r| r.account.as_deref() == Some("acct-b"))
    {
        let text = String::from_utf8_lossy(&r.body);
        if text.contains("You are the planner.") {
            assert!(!text.contains("sub-agent step"), "{text}");
        }
    }
}
