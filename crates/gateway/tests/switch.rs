//! The session keeps working after the switch: real gateways on 127.0.0.1:0, a real HTTP
//! client, and the strict simulated provider, which mints account-bound state per account
//! (reasoning `encrypted_content`, thinking signatures, stored response ids) and rejects
//! another account's with the real error bodies.
//!
//! The clients replay their whole history every turn, as Codex (`store: false`, reasoning items
//! resent) and Claude Code (signed thinking blocks resent) do, with real-sized requests rebuilt
//! from the captures in `shared/fixtures/clients/`.

use context_relay_sim::{SimFault, SimProvider};
use context_relay_testkit::clients::{claude_next_turn, completed, contains};
use context_relay_testkit::conversation::{Client, Conversation, handoff_ready};
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY, wire_bytes};
use http::StatusCode;
use serde_json::{Value, json};

/// Turns 1–3 on the first account (30, 60, 90 %: a handoff is written), then the account is
/// used up and turns 4–6 go to the second account. `model` is the combo or direct
/// `provider/model` route asked for (the client's combo when `None`); `late`, the session
/// starts with a long history of tool calls (every request a late turn, see [`LATE`]).
async fn three_turns_after_a_switch(client: Client, model: Option<&str>, late: bool) {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let [a, b, _] = client.accounts();
    let session = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
    let mut conv = match model {
        Some(model) => Conversation::asking(client, session, model),
        None => Conversation::new(client, session),
    };
    let first_size = wire_bytes(&conv.body).len();
    // The captures' sizes: Codex 38 059 bytes, Claude Code 76 328 bytes.
    let real: usize = match client {
        Client::Codex => 38_059,
        Client::Claude => 76_328,
    };
    assert!(
        first_size.abs_diff(real) < real / 20,
        "real-sized first request: {first_size} bytes, captured {real}"
    );
    if late {
        conv = conv.with_tool_history(LATE.0, LATE.1);
        let bytes = wire_bytes(&conv.body);
        assert!(bytes.len() > 3 * MAX_READ && bytes.starts_with(br#"{"model":""#));
    }
    for turn in 1..=3 {
        let (status, acted, reply) = conv.turn(&h, 0).await;
        assert_eq!(status, 200);
        assert!(completed(&reply), "{}", String::from_utf8_lossy(&reply));
        assert_eq!(
            acted, None,
            "no switch yet: the relay leaves turn {turn} alone"
        );
        if turn == 1
            && let Client::Codex = client
        {
            // Codex compacted the history on the first account (remote compaction): an
            // encrypted `compaction` item that only that account can read.
            let compaction = json!({"type": "compaction", "id": "cmp_sim_a1",
                                    "encrypted_content": h.sim.mint_encrypted(a, "cmp_sim_a1")});
            conv.body["input"]
                .as_array_mut()
                .unwrap()
                .insert(3, compaction);
        }
    }
    h.idle().await;
    assert_eq!(
        h.handoffs(session).await,
        1,
        "a handoff was written at 90 %"
    );
    // The summary call itself passed the provider's rules (a rejected one would leave only an
    // extractive handoff).
    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert!(!summaries.is_empty());
    assert!(
        summaries.iter().all(|r| r.rejected.is_none()),
        "{:?}",
        summaries.iter().map(|r| &r.rejected).collect::<Vec<_>>()
    );
    let before = h.turns();
    assert!(before.iter().all(|r| r.account.as_deref() == Some(a)));
    assert!(before.iter().all(|r| r.rejected.is_none()));
    // The history now carries state minted by the first account.
    let bound: Vec<_> = h.owners(before.last().unwrap());
    assert!(
        bound.len() >= 2 && bound.iter().all(|o| o.as_deref() == Some(a)),
        "{bound:?}"
    );

    h.sim.set_used(a, 100.0);
    h.sim.clear_requests();
    for turn in 4..=6 {
        let (status, acted, reply) = conv.turn(&h, 0).await;
        assert_eq!(status, 200, "turn {turn}");
        // The client is told what the relay did: the handoff once, the scrub every turn.
        let expected = if turn == 4 {
            "injected, scrubbed"
        } else {
            "scrubbed"
        };
        assert_eq!(acted.as_deref(), Some(expected), "turn {turn}");
        assert!(
            completed(&reply),
            "turn {turn}: {}",
            String::from_utf8_lossy(&reply)
        );
        h.idle().await;
        if turn == 4 {
            assert_eq!(
                h.handoffs(session).await,
                0,
                "consumed by the first turn on {b}"
            );
        }
    }
    let turns = h.turns();
    let to_b: Vec<_> = turns
        .iter()
        .filter(|r| r.account.as_deref() == Some(b))
        .collect();
    assert!(to_b.len() >= 3, "{} requests to {b}", to_b.len());
    for r in &to_b {
        let owners = h.owners(r);
        assert!(
            owners.iter().all(|o| o.as_deref() == Some(b)),
            "a request to {b} carried state it did not mint: {owners:?}"
        );
        assert_eq!(r.rejected, None, "no request to {b} was rejected");
    }
    // B's own state of turns 4 and 5 goes out with turn 6 (its reasoning and prompt cache).
    let last = h.owners(to_b.last().unwrap());
    assert!(
        last.iter().filter(|o| o.as_deref() == Some(b)).count() >= 2,
        "{last:?}"
    );
    // The handoff reached the provider exactly once, and was then consumed.
    let injected = turns
        .iter()
        .filter(|r| contains(&r.body, HANDOFF_TAG))
        .count();
    // (At turn 6 the second account reached 90 % in turn: the handoff stored now is its own.)
    assert_eq!(injected, 1);
}

#[tokio::test]
async fn codex_history_keeps_working_three_turns_after_a_switch() {
    three_turns_after_a_switch(Client::Codex, None, false).await;
}

#[tokio::test]
async fn claude_code_history_keeps_working_three_turns_after_a_switch() {
    three_turns_after_a_switch(Client::Claude, None, false).await;
}

/// A session addressed as `provider/model` (no combo) gets the whole relay, keyed by the route.
#[tokio::test]
async fn a_direct_route_keeps_working_three_turns_after_a_switch() {
    three_turns_after_a_switch(Client::Codex, Some("codex/gpt-5.5"), false).await;
    three_turns_after_a_switch(Client::Claude, Some("anthropic/claude-opus-4-8"), false).await;
}

/// The gateway's largest read of a request (hyper's read buffer, `connection.rs`).
const MAX_READ: usize = 128 * 1024;

/// A long session's history: 60 tool calls with 8 KB of output each (about half a megabyte).
const LATE: (usize, usize) = (60, 8 * 1024);

/// A long session's late turns, sent `model` first with the session in the head as the
/// clients send them, are read and forwarded in the chunks they arrive in: the switch
/// scrubs and injects into them as into any other.
#[tokio::test]
async fn late_turns_read_in_chunks_keep_working_after_a_switch() {
    three_turns_after_a_switch(Client::Codex, None, true).await;
    three_turns_after_a_switch(Client::Claude, None, true).await;
}

/// A session this gateway never saw (the client comes from another gateway) whose history
/// carries state of an account the request does not go to.
fn foreign_history(h: &Harness, client: Client, stream: bool) -> Conversation {
    let mut conv = Conversation::new(client, "0199a1b2-0000-7000-8000-000000000001");
    conv.body["stream"] = json!(stream);
    let elsewhere = "acct-elsewhere";
    match client {
        Client::Codex => {
            let input = conv.body["input"].as_array_mut().unwrap();
            input.push(json!({"type": "reasoning", "id": "rs_elsewhere_1", "summary": [],
                              "encrypted_content": h.sim.mint_encrypted(elsewhere, "rs_elsewhere_1")}));
            input.push(json!({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": "Looked at src/cli.rs."}]}));
            input.push(json!({"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": "Go ahead."}]}));
        }
        Client::Claude => {
            let messages = conv.body["messages"].as_array_mut().unwrap();
            messages.push(json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Plan the flag.",
                 "signature": h.sim.mint_signature(elsewhere, "th_elsewhere_1")},
                {"type": "text", "text": "Looked at src/cli.rs."}]}));
            messages
                .push(json!({"role": "user", "content": [{"type": "text", "text": "Go ahead."}]}));
        }
    }
    conv
}

async fn repaired_after_one_stripped_retry(client: Client, stream: bool, in_band: bool) {
    let h = Harness::start(
        1,
        MEMORY,
        SimProvider::builder().state_errors_in_band(in_band),
    )
    .await;
    let [a, _, _] = client.accounts();
    let mut conv = foreign_history(&h, client, stream);
    let (status, acted, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    if stream {
        assert!(completed(&reply), "{}", String::from_utf8_lossy(&reply));
        // Nothing of the failed attempt reached the client.
        assert!(!contains(&reply, "response.failed"));
    }
    let turns = h.turns();
    assert_eq!(turns.len(), 2, "one attempt, one stripped retry");
    assert!(
        turns.iter().all(|r| r.account.as_deref() == Some(a)),
        "same account"
    );
    assert!(turns[0].rejected.is_some());
    assert_eq!(turns[1].rejected, None);
    assert!(
        h.owners(&turns[1]).is_empty(),
        "the retry carries no account-bound state"
    );
    assert_eq!(acted.as_deref(), Some("repaired"));

    // The next turn resends the same history: what the repair stripped is now known to be
    // foreign, so it is scrubbed up front instead of being rejected again.
    if !stream {
        match client {
            Client::Codex => conv.body["input"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "Thanks, continue."}]})),
            Client::Claude => conv.body["messages"].as_array_mut().unwrap().push(
                json!({"role": "user", "content": [{"type": "text", "text": "Thanks, continue."}]}),
            ),
        }
    }
    h.sim.clear_requests();
    let (status, acted, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let turns = h.turns();
    assert_eq!(turns.len(), 1, "no second rejection");
    assert_eq!(turns[0].rejected, None);
    assert!(
        h.owners(&turns[0]).iter().all(|o| o.as_deref() == Some(a)),
        "only the serving account's own state goes out"
    );
    assert_eq!(acted.as_deref(), Some("scrubbed"));
}

#[tokio::test]
async fn codex_foreign_state_is_repaired_streamed() {
    repaired_after_one_stripped_retry(Client::Codex, true, false).await;
}

#[tokio::test]
async fn codex_foreign_state_is_repaired_not_streamed() {
    repaired_after_one_stripped_retry(Client::Codex, false, false).await;
}

#[tokio::test]
async fn codex_foreign_state_failing_in_band_is_repaired_invisibly() {
    repaired_after_one_stripped_retry(Client::Codex, true, true).await;
}

#[tokio::test]
async fn claude_foreign_signature_is_repaired_streamed() {
    repaired_after_one_stripped_retry(Client::Claude, true, false).await;
}

#[tokio::test]
async fn claude_foreign_signature_is_repaired_not_streamed() {
    repaired_after_one_stripped_retry(Client::Claude, false, false).await;
}

#[tokio::test]
async fn an_unrelated_400_reaches_the_client_unretried() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let error = json!({"error": {"message": "Unsupported parameter: 'temperature' is not supported with this model.",
                                 "type": "invalid_request_error", "param": "temperature",
                                 "code": "unsupported_parameter"}});
    h.sim.fail_next(
        None,
        SimFault::Status(StatusCode::BAD_REQUEST, error.clone()),
    );
    let mut conv = Conversation::new(Client::Codex, "0199a1b2-0000-7000-8000-000000000002");
    let (status, acted, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 400);
    assert_eq!(serde_json::from_slice::<Value>(&reply).unwrap(), error);
    assert_eq!(h.turns().len(), 1, "never retried");
    assert_eq!(acted, None);
}

/// acct-b takes the switch and its stream fails after the 200 (`fault`): the handoff must
/// survive for the client's retry, which then consumes it.
async fn a_failed_stream_keeps_the_handoff(client: Client, fault: SimFault) {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let session = "0199a1b2-0000-7000-8000-000000000003";
    let [_, b, _] = client.accounts();
    let mut conv = Conversation::new(client, session);
    handoff_ready(&h, &mut conv, session).await;
    h.sim.fail_next(Some(b), fault.clone());
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert!(!completed(&reply), "{fault:?}");
    h.idle().await;
    assert_eq!(
        h.handoffs(session).await,
        1,
        "the handoff survives a stream that did not complete ({fault:?})"
    );
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert!(completed(&reply));
    h.idle().await;
    let to_b: Vec<_> = h
        .turns()
        .into_iter()
        .filter(|r| r.account.as_deref() == Some(b))
        .collect();
    assert_eq!(to_b.len(), 2);
    assert!(to_b.iter().all(|r| contains(&r.body, HANDOFF_TAG)));
    assert_eq!(h.handoffs(session).await, 0);
}

#[tokio::test]
async fn an_in_band_failure_keeps_the_handoff_for_the_next_attempt() {
    a_failed_stream_keeps_the_handoff(Client::Codex, SimFault::InBand).await;
}

#[tokio::test]
async fn an_anthropic_error_event_keeps_the_handoff_for_the_next_attempt() {
    a_failed_stream_keeps_the_handoff(Client::Claude, SimFault::InBand).await;
}

#[tokio::test]
async fn a_cut_stream_keeps_the_handoff_for_the_next_attempt() {
    a_failed_stream_keeps_the_handoff(Client::Codex, SimFault::Truncated).await;
    a_failed_stream_keeps_the_handoff(Client::Claude, SimFault::Truncated).await;
}

/// Claude Code continues a tool cycle: the model's turn (signed thinking, text) called a tool
/// and the next request returns its result.
fn continue_with_tool_result(conv: &mut Conversation, reply: &[u8]) {
    claude_next_turn(&mut conv.body, reply, "unused");
    let messages = conv.body["messages"].as_array_mut().unwrap();
    messages.pop();
    let assistant = messages.last_mut().unwrap();
    assistant["content"].as_array_mut().unwrap().push(json!({
        "type": "tool_use", "id": "toolu_01", "name": "Bash",
        "input": {"command": "cargo test", "description": "Run the tests"}}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "test result: ok. 12 passed"},
        {"type": "text", "text": "<system-reminder>\nThe task list is empty.\n</system-reminder>"}]}));
}

#[tokio::test]
async fn claude_code_tool_cycle_across_the_switch_stays_valid() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let session = "0199a1b2-0000-7000-8000-00000000000a";
    let mut conv = Conversation::new(Client::Claude, session);
    for _ in 1..=2 {
        assert_eq!(conv.turn(&h, 0).await.0, 200);
    }
    // Turn 3's answer calls a tool; the request after the switch returns its result.
    let (status, _, reply) = h
        .send(0, Client::Claude.path(), &conv.headers, &conv.body)
        .await;
    assert_eq!(status, 200);
    continue_with_tool_result(&mut conv, &reply);
    h.idle().await;
    assert_eq!(h.handoffs(session).await, 1);
    h.sim.set_used("acct-x", 100.0);
    h.sim.clear_requests();
    // The tool cycle's assistant turn started with acct-x's thinking, which acct-y cannot
    // verify: without it, thinking must be off for this request (and its clear_thinking
    // edits dropped), or the provider rejects the body.
    for turn in 4..=5 {
        let (status, _, reply) = conv.turn(&h, 0).await;
        assert_eq!(
            status,
            200,
            "turn {turn}: {}",
            String::from_utf8_lossy(&reply)
        );
        assert!(completed(&reply));
        h.idle().await;
    }
    let turns = h.turns();
    let to_y: Vec<_> = turns
        .iter()
        .filter(|r| r.account.as_deref() == Some("acct-y"))
        .collect();
    assert_eq!(to_y.len(), 2);
    for r in &to_y {
        assert_eq!(r.rejected, None);
        assert!(h.owners(r).iter().all(|o| o.as_deref() == Some("acct-y")));
    }
    // Turn 5 is a new prompt: thinking is on again.
    let last = to_y[1].json().unwrap();
    assert_eq!(last["thinking"]["type"], "adaptive");
}

/// An OpenAI SDK client chaining stored responses: each turn sends only the new input and the
/// previous response's id.
#[tokio::test]
async fn a_stored_response_chain_continues_on_the_new_account() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let session = "0199a1b2-0000-7000-8000-00000000000b";
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("authorization".to_owned(), "Bearer sk-client".to_owned()),
        ("x-session-id".to_owned(), session.to_owned()),
    ];
    let mut previous: Option<String> = None;
    let send = async |turn: usize, previous: &mut Option<String>| {
        let mut body = json!({"model": "codex-relay", "store": true, "stream": false,
                              "instructions": "You are a coding assistant.",
                              "input": format!("Turn {turn}: next step of the --json flag.")});
        if let Some(p) = previous.as_ref() {
            body["previous_response_id"] = json!(p);
        }
        let (status, _, reply) = h.send(0, "/v1/responses", &headers, &body).await;
        assert_eq!(
            status,
            200,
            "turn {turn}: {}",
            String::from_utf8_lossy(&reply)
        );
        let v: Value = serde_json::from_slice(&reply).unwrap();
        *previous = v["id"].as_str().map(str::to_owned);
    };
    for turn in 1..=3 {
        send(turn, &mut previous).await;
    }
    h.idle().await;
    assert_eq!(h.handoffs(session).await, 1);
    h.sim.set_used("acct-a", 100.0);
    h.sim.clear_requests();
    for turn in 4..=6 {
        send(turn, &mut previous).await;
        h.idle().await;
    }
    let to_b: Vec<_> = h
        .turns()
        .into_iter()
        .filter(|r| r.account.as_deref() == Some("acct-b"))
        .collect();
    assert_eq!(to_b.len(), 3);
    // The switch turn drops acct-a's response id (the handoff stands in for it); the later
    // turns chain acct-b's own responses, which are forwarded.
    assert!(
        to_b[0]
            .json()
            .unwrap()
            .get("previous_response_id")
            .is_none()
    );
    assert!(contains(&to_b[0].body, HANDOFF_TAG));
    for r in &to_b[1..] {
        assert_eq!(h.owners(r), [Some("acct-b".to_owned())]);
        assert_eq!(r.rejected, None);
    }
}

/// Claude Code with budgeted thinking (`--model claude-sonnet-4-5`): a tool loop that crosses
/// the switch goes on for several steps on the new account. Its first step there has thinking
/// turned off (the loop's thinking was the old account's); the new account then answers
/// without thinking, and every later step of the same loop must keep thinking off until the
/// next plain user turn, or the provider refuses it ("a final `assistant` message must start
/// with a thinking block").
#[tokio::test]
async fn a_budgeted_thinking_tool_loop_stays_valid_to_its_end_after_the_switch() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let session = "0199a1b2-0000-7000-8000-00000000000c";
    let mut conv = Conversation::new(Client::Claude, session);
    conv.body["thinking"] = json!({"type": "enabled", "budget_tokens": 31999});
    for _ in 1..=2 {
        assert_eq!(conv.turn(&h, 0).await.0, 200);
    }
    let (status, _, reply) = h
        .send(0, Client::Claude.path(), &conv.headers, &conv.body)
        .await;
    assert_eq!(status, 200);
    continue_with_tool_result(&mut conv, &reply);
    h.idle().await;
    h.sim.set_used("acct-x", 100.0);
    h.sim.clear_requests();
    // Three more steps of the loop on acct-y: each answered turn calls the tool again.
    for step in 1..=3 {
        let (status, acted, reply) = h
            .send(0, Client::Claude.path(), &conv.headers, &conv.body)
            .await;
        assert_eq!(
            status,
            200,
            "loop step {step} ({acted:?}): {}",
            String::from_utf8_lossy(&reply)
        );
        h.idle().await;
        let sent = h.last_turn().json().unwrap();
        assert_eq!(sent["thinking"], json!({"type": "disabled"}), "step {step}");
        // The model's turn had no thinking (it was off); the client calls the next tool.
        claude_next_turn(&mut conv.body, &reply, "unused");
        let messages = conv.body["messages"].as_array_mut().unwrap();
        messages.pop();
        let id = format!("toolu_loop_{step}");
        messages
            .last_mut()
            .unwrap()
            .get_mut("content")
            .and_then(Value::as_array_mut)
            .unwrap()
            .push(json!({"type": "tool_use", "id": id, "name": "Bash",
                         "input": {"command": "cargo test", "description": "Run the tests"}}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "ok"}]}));
    }
    // The loop ends with a plain user turn: thinking is on again.
    let messages = conv.body["messages"].as_array_mut().unwrap();
    messages
        .push(json!({"role": "assistant", "content": [{"type": "text", "text": "All green."}]}));
    messages
        .push(json!({"role": "user", "content": [{"type": "text", "text": "Thanks, commit it."}]}));
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let sent = h.last_turn().json().unwrap();
    assert_eq!(sent["thinking"]["type"], "enabled");
    // (acct-x, used up, answered the first step with a 429 before it moved.)
    let to_y: Vec<_> = h
        .turns()
        .into_iter()
        .filter(|r| r.account.as_deref() == Some("acct-y"))
        .collect();
    assert_eq!(to_y.len(), 4);
    for r in &to_y {
        assert_eq!(r.rejected, None, "no step was refused");
        assert!(h.owners(r).iter().all(|o| o.as_deref() == Some("acct-y")));
    }
}
