//! InjectionLayer behaviour (switch detection, claim and release, injection), through the
//! whole stack.

mod support;

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
use http::StatusCode;
use http_body_util::BodyExt;
use support::{Stack, Turn, chat, request};
use tower::ServiceExt;

fn tenant_of(key: &str) -> String {
    let mut h = http::HeaderMap::new();
    h.insert("authorization", format!("Bearer {key}").parse().unwrap());
    context_relay_core::session::tenant(&h)
}

fn key(session: &str, credential: &str) -> HandoffKey {
    HandoffKey::new(tenant_of(credential), session, "codex-relay")
}

fn record(session: &str, credential: &str, from: &str) -> HandoffRecord {
    let now = SystemTime::now();
    HandoffRecord {
        version: 1,
        kind: Default::default(),
        tenant: tenant_of(credential).into(),
        session: session.into(),
        combo: "codex-relay".into(),
        from_provider: "codex".into(),
        from_account: from.into(),
        handoff: Handoff {
            summary: "Adding a --json flag <to> the CLI".into(),
            key_decisions: vec!["use serde".into()],
            task_progress: "flag parsed; tests pending".into(),
            active_entities: vec!["src/cli.rs".into()],
        },
        message_count: 12,
        conversation: None,
        compaction: false,
        model: "gpt-5".into(),
        threshold: 0.85,
        generated_at: now,
        expires_at: now + Duration::from_secs(3600),
    }
}

/// A stack whose session `s1` (credential `k1`) has a handoff written by acct-a and is now
/// resolved to acct-b.
async fn switched_with_handoff() -> Stack {
    let stack = Stack::new();
    stack
        .store
        .upsert(record("s1", "k1", "acct-a"))
        .await
        .unwrap();
    stack.use_account("acct-b");
    stack
}

fn sse_frame() -> http_body::Frame<Bytes> {
    http_body::Frame::data(Bytes::from_static(b"data: {}\n\n"))
}

#[tokio::test]
async fn handoff_injected_only_on_another_account() {
    let stack = Stack::new();
    stack
        .store
        .upsert(record("s1", "k1", "acct-a"))
        .await
        .unwrap();

    // Same account that wrote it: untouched.
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert!(!stack.upstream.turns()[0].has_handoff());
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_some());

    // Rotated to acct-b: injected first, original system message second.
    stack.use_account("acct-b");
    let (status, _) = stack.send(chat("s1", "k1", 2)).await;
    assert_eq!(status, StatusCode::OK);
    stack.idle().await;
    let seen = &stack.upstream.turns()[1];
    assert!(seen.has_handoff());
    let body = seen.json();
    assert_eq!(body["messages"][0]["role"], "system");
    let text = body["messages"][0]["content"].as_str().unwrap();
    assert!(text.contains("Adding a --json flag &lt;to&gt; the CLI"));
    assert_eq!(body["messages"][1]["content"], "You are a coding agent.");
    assert_eq!(
        seen.headers
            .get("content-length")
            .unwrap()
            .to_str()
            .unwrap(),
        seen.body.len().to_string()
    );
    // Consumed after the successful, completed response.
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_none());

    // The next request of the session on acct-b is not injected again.
    stack.send(chat("s1", "k1", 3)).await;
    stack.idle().await;
    assert!(!stack.upstream.turns()[2].has_handoff());
}

#[tokio::test]
async fn error_status_keeps_the_handoff_for_the_next_attempt() {
    let stack = switched_with_handoff().await;
    stack
        .upstream
        .with(|s| s.turn = Turn::Status(StatusCode::INTERNAL_SERVER_ERROR));
    let (status, _) = stack.send(chat("s1", "k1", 2)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    stack.idle().await;
    assert!(stack.upstream.turns()[0].has_handoff());
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_some());

    // The retry gets it again, and consumes it.
    stack.upstream.with(|s| s.turn = Turn::Json);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert!(stack.upstream.turns()[1].has_handoff());
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_none());
}

#[tokio::test]
async fn failed_stream_keeps_the_handoff() {
    let stack = switched_with_handoff().await;
    let tx = stack.upstream.stream_next_turn();
    tx.send(Ok(sse_frame())).await.unwrap();
    tx.send(Err("reset".into())).await.unwrap();
    drop(tx);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert!(stack.upstream.turns()[0].has_handoff());
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_some());
}

/// The next turn's answer streams `first` and stays open: the sender of its later frames, and
/// the answer's body as the client reads it.
async fn open_stream(
    stack: &Stack,
    first: http_body::Frame<Bytes>,
) -> (
    tokio::sync::mpsc::Sender<Result<http_body::Frame<Bytes>, support::TestError>>,
    support::Body,
) {
    let tx = stack.upstream.stream_next_turn();
    tx.send(Ok(first)).await.unwrap();
    let res = stack
        .svc
        .clone()
        .oneshot(chat("s1", "k1", 2))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    (tx, res.into_body())
}

#[tokio::test]
async fn dropped_response_keeps_the_handoff() {
    let stack = switched_with_handoff().await;
    let (tx, body) = open_stream(&stack, sse_frame()).await;
    drop(body); // the client goes away mid-stream
    drop(tx);
    stack.idle().await;
    assert!(stack.upstream.turns()[0].has_handoff());
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_some());
}

/// The frames of a whole Chat stream: a chunk, the finishing chunk, `[DONE]`.
fn whole_chat_stream() -> http_body::Frame<Bytes> {
    http_body::Frame::data(Bytes::from_static(
        b"data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n\
          data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
          data: [DONE]\n\n",
    ))
}

/// Codex CLI closes the connection as soon as it reads `response.completed`, before the
/// provider's end of body: a turn whose success event went out completed, so its handoff is
/// consumed (not given back to be injected again) and the session's account recorded.
#[tokio::test]
async fn a_response_dropped_after_its_success_event_consumes_the_handoff() {
    let stack = switched_with_handoff().await;
    let (tx, mut body) = open_stream(&stack, whole_chat_stream()).await;
    let frame = body.frame().await.expect("a frame").expect("data");
    assert!(frame.data_ref().is_some_and(|d| d.ends_with(b"[DONE]\n\n")));
    drop(body); // the client leaves; the provider's end of body never came
    stack.idle().await;
    assert!(stack.upstream.turns()[0].has_handoff());
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_none());
    // The next turn is no switch: nothing is injected.
    stack.upstream.with(|s| s.turn = Turn::Json);
    stack.send(chat("s1", "k1", 3)).await;
    stack.idle().await;
    assert!(!stack.upstream.turns()[1].has_handoff());
    drop(tx);
}

/// A provider that resets its connection after the success event: the same.
#[tokio::test]
async fn a_stream_reset_after_its_success_event_consumes_the_handoff() {
    let stack = switched_with_handoff().await;
    let tx = stack.upstream.stream_next_turn();
    tx.send(Ok(whole_chat_stream())).await.unwrap();
    tx.send(Err("reset".into())).await.unwrap();
    drop(tx);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert!(stack.upstream.turns()[0].has_handoff());
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_none());
}

/// An in-band failure gives the handoff back at once: a client that retries while the
/// provider still holds the failed stream open gets it on the retry, and once.
#[tokio::test]
async fn an_in_band_failure_gives_the_handoff_back_before_the_stream_closes() {
    let stack = switched_with_handoff().await;
    let failure = http_body::Frame::data(Bytes::from_static(
        b"data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n",
    ));
    let (tx, mut body) = open_stream(&stack, failure).await;
    body.frame().await.expect("the failure").expect("data");
    stack.idle().await;
    // The failed stream is still open; the client retries.
    stack.upstream.with(|s| s.turn = Turn::Json);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    let turns = stack.upstream.turns();
    assert!(turns[0].has_handoff() && turns[1].has_handoff());
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_none());
    drop((tx, body));
    stack.idle().await;
    // The failed stream's end gives nothing back a second time.
    stack.send(chat("s1", "k1", 3)).await;
    stack.idle().await;
    assert!(!stack.upstream.turns()[2].has_handoff());
}

#[tokio::test]
async fn two_concurrent_requests_after_a_switch_inject_once_while_leased() {
    let stack = switched_with_handoff().await;
    // Hold the first response open so its claim stays leased.
    let tx = stack.upstream.stream_next_turn();
    let first = stack
        .svc
        .clone()
        .oneshot(chat("s1", "k1", 2))
        .await
        .unwrap();
    stack.upstream.with(|s| s.turn = Turn::Json);
    stack.send(chat("s1", "k1", 2)).await;
    let turns = stack.upstream.turns();
    assert_eq!(turns.iter().filter(|t| t.has_handoff()).count(), 1);
    drop(tx);
    drop(first);
    stack.idle().await;
}

#[tokio::test]
async fn tenants_with_the_same_session_id_are_isolated() {
    let stack = Stack::new();
    stack
        .store
        .upsert(record("s1", "tenant-one", "acct-a"))
        .await
        .unwrap();
    stack.use_account("acct-b");
    stack.send(chat("s1", "tenant-two", 2)).await;
    stack.idle().await;
    assert!(!stack.upstream.turns()[0].has_handoff());
    assert!(
        stack
            .store
            .get(&key("s1", "tenant-one"))
            .await
            .unwrap()
            .is_some()
    );
    stack.send(chat("s1", "tenant-one", 2)).await;
    stack.idle().await;
    assert!(stack.upstream.turns()[1].has_handoff());
}

#[tokio::test]
async fn switch_without_handoff_makes_the_body_portable() {
    let stack = Stack::new();
    let body = serde_json::json!({
        "model": "gpt-5.5", "stream": true, "store": false,
        "previous_response_id": "resp_1",
        "input": [
            {"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},
            {"type":"reasoning","id":"rs_1","encrypted_content":"gAAA"},
        ]
    })
    .to_string();
    let mut req = request("/v1/responses", "s9", "k1", body.clone());
    req.headers_mut()
        .insert("x-codex-turn-state", "ts_1".parse().unwrap());
    stack.send(req).await;
    stack.idle().await;
    // First request: affinity recorded, nothing changed.
    assert_eq!(stack.upstream.turns()[0].body, Bytes::from(body.clone()));

    stack.use_account("acct-b");
    let mut req = request("/v1/responses", "s9", "k1", body);
    req.headers_mut()
        .insert("x-codex-turn-state", "ts_1".parse().unwrap());
    stack.send(req).await;
    stack.idle().await;
    let seen = &stack.upstream.turns()[1];
    let json = seen.json();
    assert!(json.get("previous_response_id").is_none());
    // The handoff's developer item, then the user message; the reasoning item is gone.
    assert_eq!(json["input"].as_array().unwrap().len(), 2);
    assert_eq!(json["input"][0]["role"], "developer");
    assert!(seen.headers.get("x-codex-turn-state").is_none());
    // No handoff was stored: the switch carries one built from the request itself.
    assert!(seen.has_handoff());
    assert!(String::from_utf8_lossy(&seen.body).contains("Task: hi"));
}
