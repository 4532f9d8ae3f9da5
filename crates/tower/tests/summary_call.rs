//! The summary call against a double that enforces the real providers' parameter rules: the
//! request is derived from the turn, refused parameters are dropped and remembered, refusals
//! and transient failures end in the right outcome, and the turn's reply is captured in every
//! way a real stack delivers it.

mod support;

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use context_relay_core::prompt::SummarySettings;
use context_relay_core::{HandoffKey, HandoffKind};
use context_relay_store::MemoryStore;
use http::StatusCode;
use http_body::Frame;
use http_body_util::BodyExt;
use serde_json::json;
use support::sim_rules::Backend;
use support::{Stack, Turn, chat, request};
use tower::ServiceExt;

fn key(session: &str, credential: &str) -> HandoffKey {
    let mut h = http::HeaderMap::new();
    h.insert(
        "authorization",
        format!("Bearer {credential}").parse().unwrap(),
    );
    HandoffKey::new(
        context_relay_core::session::tenant(&h),
        session,
        "codex-relay",
    )
}

fn with_settings(settings: SummarySettings) -> Stack {
    Stack::with(Arc::new(MemoryStore::new()), move |r| {
        r.summary_settings("codex", settings)
    })
}

fn params(pairs: &[(&str, serde_json::Value)]) -> SummarySettings {
    let mut s = SummarySettings::default();
    for (k, v) in pairs {
        s.params.insert((*k).to_owned(), v.clone());
    }
    s
}

async fn stored_kind(stack: &Stack, session: &str) -> Option<HandoffKind> {
    stack
        .store
        .get(&key(session, "k1"))
        .await
        .unwrap()
        .map(|r| r.kind)
}

/// Each real refusal is answered by a retry without the parameter, and the handoff is stored;
/// the next summary to that model leaves the parameter out from the start.
#[tokio::test]
async fn refused_parameters_are_dropped_retried_and_remembered() {
    let cases = [
        // GPT-5: `temperature` unsupported.
        (
            "gpt-5",
            params(&[("temperature", json!(0.1))]),
            "temperature",
        ),
        // o-series: only the default temperature.
        (
            "o3-mini",
            params(&[("temperature", json!(0.1))]),
            "temperature",
        ),
        // Chat on a reasoning model: `max_tokens` refused, `max_completion_tokens` kept.
        ("gpt-5", params(&[("max_tokens", json!(800))]), "max_tokens"),
    ];
    for (model, settings, param) in cases {
        let stack = with_settings(SummarySettings {
            model: Some(model.to_owned()),
            ..settings
        });
        stack.upstream.set_percent("acct-a", 88.0);
        stack.send(chat("s1", "k1", 3)).await;
        stack.idle().await;
        let summaries = stack.upstream.summaries();
        assert_eq!(summaries.len(), 2, "{model}/{param}: refused, then retried");
        assert!(summaries[0].json().get(param).is_some());
        assert!(summaries[1].json().get(param).is_none(), "{model}/{param}");
        assert_eq!(summaries[1].json()["max_completion_tokens"], 800);
        assert_eq!(
            stored_kind(&stack, "s1").await,
            Some(HandoffKind::Generated),
            "{model}/{param}"
        );

        // Another session on the same provider and model: no refused call any more.
        stack.send(chat("s2", "k1", 3)).await;
        stack.idle().await;
        let summaries = stack.upstream.summaries();
        assert_eq!(summaries.len(), 3, "{model}/{param}: remembered");
        assert!(summaries[2].json().get(param).is_none());
        assert_eq!(
            stored_kind(&stack, "s2").await,
            Some(HandoffKind::Generated)
        );
    }
}

/// The ChatGPT Codex backend takes only what Codex sends: streamed, `store: false`, Codex's own
/// instructions, and no `max_output_tokens` (its refusal is a bare `detail` message).
#[tokio::test]
async fn codex_backend_accepts_the_derived_request() {
    let stack = Stack::new();
    stack.upstream.with(|s| s.backend = Backend::ChatGptCodex);
    stack.upstream.set_percent("acct-a", 88.0);
    let body = json!({
        "model": "gpt-5.5", "instructions": "You are Codex.", "stream": true, "store": false,
        "include": ["reasoning.encrypted_content"], "tools": [{"type": "function", "name": "shell"}],
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add a --json flag"}]},
            {"type": "custom_tool_call", "name": "apply_patch", "call_id": "c1",
             "input": "*** Begin Patch\n*** Update File: src/cli.rs\n@@\n-a\n+b\n*** End Patch"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "Success"}
        ]
    });
    let (status, _) = stack
        .send(request("/v1/responses", "s1", "k1", body.to_string()))
        .await;
    assert_eq!(status, StatusCode::OK);
    stack.idle().await;
    let summaries = stack.upstream.summaries();
    assert_eq!(summaries.len(), 2, "max_output_tokens refused once");
    let sent = summaries[1].json();
    assert_eq!(sent["instructions"], "You are Codex.");
    assert_eq!(
        (&sent["stream"], &sent["store"]),
        (&json!(true), &json!(false))
    );
    assert!(sent.get("tools").is_none() && sent.get("include").is_none());
    let stored = stack
        .store
        .get(&key("s1", "k1"))
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.kind, HandoffKind::Generated);
    // The touched file is merged after the model's own entities.
    assert_eq!(stored.handoff.active_entities, ["src/cli.rs"]);
    let prompt = sent["input"][0]["content"][0]["text"]
        .as_str()
        .expect("prompt");
    assert!(prompt.contains("- src/cli.rs\n"));
}

/// Anthropic: the client's system prompt as sent, thinking off, `max_tokens` present.
#[tokio::test]
async fn anthropic_summary_keeps_the_system_prompt() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    let body = json!({
        "model": "claude-opus-4-8", "max_tokens": 64000, "thinking": {"type": "adaptive"},
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>today</system-reminder>"},
            {"type": "text", "text": "fix the login bug"}]}]
    });
    stack
        .send(request("/v1/messages", "s1", "k1", body.to_string()))
        .await;
    stack.idle().await;
    let summaries = stack.upstream.summaries();
    assert_eq!(summaries.len(), 1);
    let sent = summaries[0].json();
    assert_eq!(sent["system"], body["system"]);
    assert_eq!(sent["thinking"], json!({"type": "disabled"}));
    assert_eq!(sent["max_tokens"], 800);
    assert_eq!(
        stored_kind(&stack, "s1").await,
        Some(HandoffKind::Generated)
    );
}

/// A refusal that names no parameter is final: the key cools down like an unparseable reply,
/// and the conversation's own words are stored.
#[tokio::test]
async fn rejected_summary_cools_down_and_leaves_an_extractive_handoff() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    stack
        .upstream
        .with(|s| s.summary_status = StatusCode::FORBIDDEN);
    for _ in 0..5 {
        stack.send(chat("s1", "k1", 3)).await;
        stack.idle().await;
    }
    assert_eq!(stack.upstream.summaries().len(), 1, "cooling down");
    assert_eq!(
        stored_kind(&stack, "s1").await,
        Some(HandoffKind::Extractive)
    );
    // 429 is transient: no cool-down.
    stack
        .upstream
        .with(|s| s.summary_status = StatusCode::TOO_MANY_REQUESTS);
    for _ in 0..3 {
        stack.send(chat("s2", "k1", 3)).await;
        stack.idle().await;
    }
    assert_eq!(stack.upstream.summaries().len(), 4);
}

/// The OpenAI SDK closes a streamed Chat turn at `[DONE]`, before the upstream closes: the
/// reply is complete and summarised. Dropped before its terminal event, it is not.
#[tokio::test]
async fn streamed_turn_dropped_after_its_terminal_event_is_summarised() {
    for terminal in [true, false] {
        let stack = Stack::new();
        stack.upstream.set_percent("acct-a", 88.0);
        let tx = stack.upstream.stream_next_turn();
        let res = stack
            .svc
            .clone()
            .oneshot(chat("s1", "k1", 2))
            .await
            .expect("response");
        let mut body = res.into_body();
        let mut events = vec![
            "data: {\"choices\":[{\"delta\":{\"content\":\"Flag parses\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        ];
        if terminal {
            events.push("data: [DONE]\n\n");
        }
        for e in events {
            tx.send(Ok(Frame::data(Bytes::from_static(e.as_bytes()))))
                .await
                .expect("send");
            body.frame().await.expect("frame").expect("ok");
        }
        // The client hangs up; the upstream never closed the stream.
        drop(body);
        stack.idle().await;
        let summaries = stack.upstream.summaries();
        if terminal {
            assert_eq!(summaries.len(), 1);
            let prompt = summaries[0].json()["messages"][0]["content"]
                .as_str()
                .expect("prompt")
                .to_owned();
            assert!(prompt.contains("ASSISTANT:\nFlag parses"));
        } else {
            assert!(summaries.is_empty(), "cut before its terminal event");
        }
        drop(tx);
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("write");
    e.finish().expect("finish")
}

/// A compressed reply (the client's `accept-encoding` was forwarded) is decoded; an
/// undecodable one is no reply, never replacement characters.
#[tokio::test]
async fn compressed_reply_is_decoded_and_never_lossy() {
    let reply = br#"{"choices":[{"message":{"role":"assistant","content":"Done: tests pass."}}]}"#;
    for (encoding, body, expect) in [
        ("gzip", gzip(reply), true),
        ("gzip", b"\x1f\x8b\x08garbage".to_vec(), false),
    ] {
        let stack = Stack::new();
        stack.upstream.set_percent("acct-a", 88.0);
        stack.upstream.with(|s| {
            s.turn = Turn::Encoded {
                content_type: "application/json",
                encoding,
                body: Bytes::from(body.clone()),
            }
        });
        stack.send(chat("s1", "k1", 2)).await;
        stack.idle().await;
        let summaries = stack.upstream.summaries();
        assert_eq!(summaries.len(), 1);
        let prompt = summaries[0].json()["messages"][0]["content"]
            .as_str()
            .expect("prompt")
            .to_owned();
        assert_eq!(prompt.contains("Done: tests pass."), expect);
        assert!(!prompt.contains('\u{fffd}'));
    }
}

/// A full job queue skips the turn (counted) instead of holding another request body.
#[tokio::test]
async fn full_queue_skips() {
    let stack = Stack::with(Arc::new(MemoryStore::new()), |r| {
        r.max_queued_generations(1)
    });
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    stack.upstream.with(|s| s.summary_gate = Some(gate.clone()));
    stack.upstream.set_percent("acct-a", 88.0);
    stack.send(chat("s1", "k1", 3)).await;
    stack.send(chat("s2", "k1", 3)).await;
    // s1's summary is held at the upstream; s2's job finds the queue full and ends.
    for _ in 0..1000 {
        if stack.background.in_flight() == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        stack.background.in_flight(),
        1,
        "s2 was skipped, s1 still waits"
    );
    gate.add_permits(10);
    stack.idle().await;
    assert_eq!(stack.upstream.summaries().len(), 1);
    assert!(stored_kind(&stack, "s2").await.is_none());
    // The slot is free again.
    stack.send(chat("s2", "k1", 3)).await;
    stack.idle().await;
    assert_eq!(
        stored_kind(&stack, "s2").await,
        Some(HandoffKind::Generated)
    );
}
