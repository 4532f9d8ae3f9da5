//! GenerationLayer behaviour (the quota gates, capture, summary call and outcomes), through
//! the whole stack over a fake upstream.

mod support;

use std::sync::Arc;
use std::time::Duration;

use context_relay_core::{HandoffKey, HandoffKind, HandoffRecord};
use context_relay_store::{Affinity, HandoffStore, MemoryStore, StoreFuture};
use http::StatusCode;
use support::{Stack, Turn, chat};
use tokio::sync::Semaphore;

fn tenant_of(key: &str) -> String {
    let mut h = http::HeaderMap::new();
    h.insert("authorization", format!("Bearer {key}").parse().unwrap());
    context_relay_core::session::tenant(&h)
}

fn key(session: &str, credential: &str) -> HandoffKey {
    HandoffKey::new(tenant_of(credential), session, "codex-relay")
}

#[tokio::test]
async fn below_threshold_no_summary() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 70.0);
    let (status, _) = stack.send(chat("s1", "k1", 3)).await;
    assert_eq!(status, StatusCode::OK);
    stack.idle().await;
    assert!(stack.upstream.summaries().is_empty());
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_none());
}

#[tokio::test]
async fn over_threshold_one_summary_marked_as_the_relays_own_call_and_stored() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    let (status, _) = stack.send(chat("s1", "k1", 3)).await;
    assert_eq!(status, StatusCode::OK);
    stack.idle().await;

    let summaries = stack.upstream.summaries();
    assert_eq!(summaries.len(), 1, "exactly one summary request");
    let s = &summaries[0];
    // It went through the injection layer without being relayed or injected.
    assert!(!s.has_handoff());
    let body = s.json();
    // Derived from the turn: no sampling parameters, the reasoning-family output cap.
    assert!(body.get("temperature").is_none());
    assert!(body.get("max_tokens").is_none());
    assert_eq!(body["max_completion_tokens"], serde_json::json!(800));
    assert_eq!(body["stream"], serde_json::json!(false));
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(1));
    assert_eq!(body["model"], "gpt-5");
    assert_eq!(s.path, "/v1/chat/completions");
    // Sent to the session's current account.
    assert_eq!(s.account.as_deref(), Some("acct-a"));

    let stored = stack
        .store
        .get(&key("s1", "k1"))
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.from_account, "acct-a");
    assert_eq!(stored.from_provider, "codex");
    assert_eq!(stored.handoff.summary, "Adding a --json flag to the CLI");
    assert_eq!(stored.handoff.key_decisions, vec!["use serde"]);
    assert_eq!(stored.kind, context_relay_core::HandoffKind::Generated);
    assert_eq!(stored.threshold, 0.85);
    assert!(
        stored.message_count >= 6,
        "system + 5 turns + the captured reply"
    );
}

#[tokio::test]
async fn at_or_above_exhaustion_no_summary() {
    for p in [95.0, 99.0, 100.0] {
        let stack = Stack::new();
        stack.upstream.set_percent("acct-a", p);
        stack.send(chat("s1", "k1", 2)).await;
        stack.idle().await;
        assert!(stack.upstream.summaries().is_empty(), "{p}");
    }
}

#[tokio::test]
async fn empty_providers_no_summary() {
    let stack = Stack::with(Arc::new(MemoryStore::new()), |r| {
        r.providers(Vec::<String>::new())
    });
    stack.upstream.set_percent("acct-a", 92.0);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert!(stack.upstream.summaries().is_empty());
}

#[tokio::test]
async fn other_provider_not_listed_no_summary() {
    let stack = Stack::with(Arc::new(MemoryStore::new()), |r| r.providers(["codex"]));
    *stack.account.lock().unwrap() = context_relay_tower::ResolvedAccount::new("anthropic", "x");
    stack.upstream.set_percent("x", 90.0);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert!(stack.upstream.summaries().is_empty());
}

#[tokio::test]
async fn every_provider_by_default() {
    let stack = Stack::new();
    *stack.account.lock().unwrap() = context_relay_tower::ResolvedAccount::new("anthropic", "x");
    stack.upstream.set_percent("x", 90.0);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert_eq!(stack.upstream.summaries().len(), 1);
    let stored = stack
        .store
        .get(&key("s1", "k1"))
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.from_provider, "anthropic");
}

#[tokio::test]
async fn response_returned_before_the_summary_finishes() {
    let stack = Stack::new();
    let gate = Arc::new(Semaphore::new(0));
    stack.upstream.with(|s| s.summary_gate = Some(gate.clone()));
    stack.upstream.set_percent("acct-a", 88.0);
    // The turn's response arrives and completes while the summary is held open.
    let (status, body) = stack.send(chat("s1", "k1", 2)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.is_empty());
    assert!(stack.background.in_flight() >= 1, "summary still running");
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_none());
    gate.add_permits(1);
    stack.idle().await;
    assert!(stack.store.get(&key("s1", "k1")).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_qualifying_responses_one_summary() {
    let stack = Arc::new(Stack::new());
    let gate = Arc::new(Semaphore::new(0));
    stack.upstream.with(|s| s.summary_gate = Some(gate.clone()));
    stack.upstream.set_percent("acct-a", 88.0);
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let stack = stack.clone();
        tasks.push(tokio::spawn(async move {
            stack.send(chat("s1", "k1", 4)).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().0, StatusCode::OK);
    }
    gate.add_permits(1000);
    stack.idle().await;
    assert_eq!(stack.upstream.summaries().len(), 1);
}

#[tokio::test]
async fn failed_summary_frees_the_key_and_next_response_retries() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    stack
        .upstream
        .with(|s| s.summary_status = StatusCode::INTERNAL_SERVER_ERROR);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert_eq!(stack.upstream.summaries().len(), 1);
    // The model gave nothing: the conversation's own words are kept instead.
    let extractive = stack
        .store
        .get(&key("s1", "k1"))
        .await
        .unwrap()
        .expect("extractive");
    assert_eq!(extractive.kind, HandoffKind::Extractive);
    assert!(
        extractive
            .handoff
            .summary
            .contains("step 0: add the --json flag")
    );

    stack.upstream.with(|s| s.summary_status = StatusCode::OK);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert_eq!(
        stack.upstream.summaries().len(),
        2,
        "unavailable: no cool-down, and an extractive handoff is no reason to wait"
    );
    let generated = stack
        .store
        .get(&key("s1", "k1"))
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(
        generated.kind,
        HandoffKind::Generated,
        "a model handoff replaces it"
    );
}

#[tokio::test]
async fn unparseable_replies_cool_the_key_down() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    stack
        .upstream
        .with(|s| s.summary_content = "I cannot do that.".to_owned());
    for _ in 0..200 {
        stack.send(chat("s1", "k1", 2)).await;
        stack.idle().await;
    }
    assert_eq!(stack.upstream.summaries().len(), 1);
    let stored = stack
        .store
        .get(&key("s1", "k1"))
        .await
        .unwrap()
        .expect("extractive");
    assert_eq!(stored.kind, HandoffKind::Extractive);
}

#[tokio::test]
async fn parseable_reply_stored_once_until_refresh() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    for _ in 0..5 {
        stack.send(chat("s1", "k1", 3)).await;
        stack.idle().await;
    }
    assert_eq!(
        stack.upstream.summaries().len(),
        1,
        "fresh handoff: no regeneration"
    );
    // 20+ new messages later the handoff is refreshed.
    stack.send(chat("s1", "k1", 14)).await;
    stack.idle().await;
    assert_eq!(stack.upstream.summaries().len(), 2);
}

#[tokio::test]
async fn summary_timeout_is_unavailable() {
    let stack = Stack::with(Arc::new(MemoryStore::new()), |r| {
        r.summary_timeout(Duration::from_millis(20))
    });
    let gate = Arc::new(Semaphore::new(0));
    stack.upstream.with(|s| s.summary_gate = Some(gate.clone()));
    stack.upstream.set_percent("acct-a", 88.0);
    stack.send(chat("s1", "k1", 2)).await;
    stack.background.idle().await;
    let stored = stack
        .store
        .get(&key("s1", "k1"))
        .await
        .unwrap()
        .expect("extractive");
    assert_eq!(stored.kind, HandoffKind::Extractive);
    gate.add_permits(10);
}

/// A turn at 88 % whose answer streams `sent` and then fails (the provider resets).
async fn reset_after(sent: &'static [u8]) -> Stack {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    let tx = stack.upstream.stream_next_turn();
    tx.send(Ok(http_body::Frame::data(bytes::Bytes::from_static(sent))))
        .await
        .unwrap();
    tx.send(Err("upstream reset".into())).await.unwrap();
    drop(tx);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    stack
}

#[tokio::test]
async fn failed_response_stream_starts_no_summary() {
    let stack = reset_after(b"data: {}\n\n").await;
    assert!(stack.upstream.summaries().is_empty());
    // The key was freed: a later good turn summarises.
    stack.upstream.with(|s| s.turn = Turn::Json);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    assert_eq!(stack.upstream.summaries().len(), 1);
}

/// A provider that resets its connection after the stream's success event: the client has
/// the whole turn, so its summary starts.
#[tokio::test]
async fn a_stream_reset_after_its_success_event_starts_the_summary() {
    let stack = reset_after(
        b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    )
    .await;
    assert_eq!(stack.upstream.summaries().len(), 1);
}

#[tokio::test]
async fn skip_relay_requests_pass_through() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    let mut req = chat("s1", "k1", 2);
    req.extensions_mut().insert(context_relay_tower::SkipRelay);
    stack.send(req).await;
    stack.idle().await;
    // Only the request itself reached upstream: no summary was asked for.
    assert_eq!(stack.upstream.seen().len(), 1);
    assert_eq!(stack.upstream.turns().len(), 1);
}

/// A memory store whose `offer` first records the session on acct-b: the switch that carried
/// the session's handoff completed between the summary's look at the affinity and its offer
/// (it consumed the leased handoff, so the offer finds none leased).
/// With `then_b`, acct-b stores a handoff of its own right after the offer.
struct SwitchBeforeOffer {
    store: MemoryStore,
    then_b: bool,
}

impl HandoffStore for SwitchBeforeOffer {
    fn offer(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        Box::pin(async move {
            let key = record.key();
            self.store
                .set_affinity(&key, Affinity::new("codex", "acct-b"))
                .await?;
            let mut from_b = record.clone();
            from_b.from_account = "acct-b".into();
            let offered = self.store.offer(record).await?;
            if self.then_b {
                self.store.upsert(from_b).await?;
            }
            Ok(offered)
        })
    }
    context_relay_testkit::forward_handoff_store!(store: upsert, offer_at_switch, get,
        contains, may_contain, claim, complete, release, delete, purge_expired, list, affinity,
        cached_affinity, set_affinity, backend);
}

/// The summary looks at the session's account again once it is stored: a session that moved
/// meanwhile keeps no second handoff for its new account.
#[tokio::test]
async fn a_summary_stored_as_its_session_moves_is_removed() {
    for then_b in [false, true] {
        let store = SwitchBeforeOffer {
            store: MemoryStore::new(),
            then_b,
        };
        let stack = Stack::with(Arc::new(store), |r| r);
        stack.upstream.set_percent("acct-a", 88.0);
        let (status, _) = stack.send(chat("s1", "k1", 3)).await;
        assert_eq!(status, StatusCode::OK);
        stack.idle().await;
        assert_eq!(
            stack.upstream.summaries().len(),
            1,
            "the summary was written"
        );
        let left = stack.store.get(&key("s1", "k1")).await.unwrap();
        // Its own record is withdrawn; one another writer stored meanwhile is left alone.
        match then_b {
            false => assert!(left.is_none(), "withdrawn"),
            true => assert_eq!(left.expect("kept").from_account, "acct-b"),
        }
    }
}
