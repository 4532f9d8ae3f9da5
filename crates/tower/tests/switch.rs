//! The session keeps working after an account switch: the lasting scrub, per-combo affinity,
//! replicas sharing one Redis, the body-free fast path. Against a provider double that mints
//! account-bound state per account and rejects foreign state with the real error bodies.

mod bound;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bound::clients::{Claude, Codex, KEY, Relay, action, tenant};
use bound::{Body, Provider, full};
use bytes::Bytes;
use context_relay_core::HandoffKey;
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_testkit::redis_server::RedisServer as Redis;
use context_relay_tower::injection::{RELAY_HEADER, RelayAction};
use context_relay_tower::{ComboName, ContextRelay, ResolvedAccount};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::{ServiceBuilder, ServiceExt};

#[tokio::test]
async fn codex_history_keeps_working_for_three_turns_after_a_switch() {
    let relay = Relay::new();
    let mut codex = Codex::new("codex-1");
    for i in 0..3 {
        codex.turn(&relay, &format!("step {i}")).await;
    }
    relay.upsert_handoff("codex-1", "acct-a").await;
    relay.use_account("acct-b");
    for i in 3..6 {
        let headers = codex.turn(&relay, &format!("step {i}")).await;
        if i == 3 {
            assert_eq!(action(&headers), "injected, scrubbed");
        } else {
            assert_eq!(action(&headers), "scrubbed");
        }
    }
    let received = relay.provider.received();
    assert!(
        received.iter().all(|r| r.status == StatusCode::OK),
        "no rejection, no repair"
    );
    assert_eq!(received.len(), 6);
    let on_b: Vec<_> = received.iter().filter(|r| r.account == "acct-b").collect();
    assert_eq!(on_b.len(), 3);
    for (turn, r) in on_b.iter().enumerate() {
        assert!(
            !r.carries_state_of("acct-a"),
            "turn {turn} on B carried A's state"
        );
        // B's own reasoning from its earlier turns is forwarded.
        let own = r.state_of("acct-b");
        assert!(own >= turn, "turn {turn}: {own} of B's items");
    }
    assert!(
        on_b[2].text.contains(&bound::enc("acct-b", 4))
            && on_b[2].text.contains(&bound::enc("acct-b", 5))
    );
    assert_eq!(received.iter().map(|r| r.handoffs()).sum::<usize>(), 1);
    assert_eq!(on_b[0].handoffs(), 1);
    assert!(!relay.handoff_left("codex-1").await);
}

#[tokio::test]
async fn claude_history_keeps_working_for_three_turns_after_a_switch() {
    let relay = Relay::new();
    let mut claude = Claude::new("claude-1");
    for i in 0..3 {
        claude.turn(&relay, &format!("question {i}")).await;
    }
    relay.upsert_handoff("claude-1", "acct-a").await;
    relay.use_account("acct-b");
    for i in 3..6 {
        claude.turn(&relay, &format!("question {i}")).await;
    }
    let received = relay.provider.received();
    assert!(received.iter().all(|r| r.status == StatusCode::OK));
    let on_b: Vec<_> = received.iter().filter(|r| r.account == "acct-b").collect();
    assert_eq!(on_b.len(), 3);
    for r in &on_b {
        assert!(!r.carries_state_of("acct-a"));
    }
    assert!(
        on_b[2].text.contains(&bound::sig("acct-b", 4))
            && on_b[2].text.contains(&bound::sig("acct-b", 5))
    );
    assert_eq!(received.iter().map(|r| r.handoffs()).sum::<usize>(), 1);
}

/// A sub-agent whose first request meets its session's switch (same session header, an
/// opening of its own, Claude Code's `system` entry after its ask; the old account, full,
/// refuses it and it is sent again to the next)
/// gets no handoff: no account answered it yet, and the parent's is not its own. The parent
/// gets its summary at its first request on the new account.
#[tokio::test]
async fn a_sub_agents_first_request_after_the_switch_carries_no_handoff() {
    let relay = Relay::new();
    let mut parent = Claude::new("claude-sub");
    parent.turn(&relay, "Refactor the store.").await;
    parent.turn(&relay, "Go on.").await;
    // The parent's summary, written in the band.
    let parent_body = serde_json::json!({ "messages": parent.messages }).to_string();
    let opening = context_relay_core::session::opening(parent_body.as_bytes()).map(|o| o.digest);
    relay
        .upsert_handoff_of("claude-sub", "acct-a", opening)
        .await;
    let mut sub = Claude::new("claude-sub");
    let limited = r#"{"type":"error","error":{"type":"rate_limit_error","message":"limit"}}"#;
    relay
        .provider
        .with(|s| s.next_error = Some((StatusCode::TOO_MANY_REQUESTS, limited)));
    // Claude Code's first request: the ask, then a `system` entry of its own.
    sub.messages.extend([
        serde_json::json!({"role": "user", "content": "List every file that opens a transaction."}),
        serde_json::json!({"role": "system", "content": "Available agent types for the Agent tool"}),
    ]);
    let (status, _, _) = relay.send(sub.resend()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    relay.use_account("acct-b");
    let (status, headers, body) = relay.send(sub.resend()).await;
    sub.absorb(status, &body);
    assert!(
        !action(&headers).contains("injected"),
        "{}",
        action(&headers)
    );
    assert_eq!(relay.provider.received().last().unwrap().handoffs(), 0);
    let headers = parent.turn(&relay, "And the tests?").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    sub.turn(&relay, "Thanks.").await;
    let received = relay.provider.received();
    assert_eq!(received.iter().map(|r| r.handoffs()).sum::<usize>(), 1);
    assert_eq!(received[4].handoffs(), 1, "the parent's");
    for r in received.iter().filter(|r| r.account == "acct-b") {
        assert_eq!(r.status, StatusCode::OK);
        assert!(!r.carries_state_of("acct-a"));
    }
}

#[tokio::test]
async fn a_late_handoff_strips_only_the_old_accounts_state() {
    let relay = Relay::new();
    let mut codex = Codex::new("late-1");
    codex.turn(&relay, "a").await;
    relay.use_account("acct-b");
    codex.turn(&relay, "b").await;
    // A handoff of A's part stored only now (by a writer of the application's own: the
    // gateway's summary job drops a summary done after its session moved).
    relay.upsert_handoff("late-1", "acct-a").await;
    let headers = codex.turn(&relay, "c").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    let last = relay.provider.received().pop().unwrap();
    assert_eq!(last.handoffs(), 1);
    assert!(!last.carries_state_of("acct-a"));
    assert!(
        last.text.contains(&bound::enc("acct-b", 2)),
        "B's own reasoning kept"
    );
}

/// The switching request answered 429 by the new account: its handoff is given back, and the
/// answer does not say it was injected (the request was scrubbed); the next request carries it.
#[tokio::test]
async fn a_refused_switch_gives_its_handoff_back_and_says_so() {
    let relay = Relay::new();
    let mut codex = Codex::new("refused-1");
    codex.turn(&relay, "a").await;
    relay.upsert_handoff("refused-1", "acct-a").await;
    relay.use_account("acct-b");
    let limited = r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#;
    relay
        .provider
        .with(|s| s.next_error = Some((StatusCode::TOO_MANY_REQUESTS, limited)));
    let (status, headers, _) = relay.send(codex.request("b")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(action(&headers), "scrubbed");
    assert!(relay.handoff_left("refused-1").await, "given back");
    let headers = codex.turn(&relay, "c").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    assert!(!relay.handoff_left("refused-1").await);
}

#[tokio::test]
async fn a_session_that_never_switched_is_passed_through_untouched() {
    let relay = Relay::new();
    let mut codex = Codex::new("steady");
    for i in 0..3 {
        let headers = codex.turn(&relay, &format!("{i}")).await;
        assert!(headers.get(RELAY_HEADER).is_none());
    }
    let received = relay.provider.received();
    // Every request reached the provider byte for byte, turn state included.
    assert!(received.iter().all(|r| r.status == StatusCode::OK));
    assert!(received[2].headers.get("x-codex-turn-state").is_some());
    assert!(
        received[2].text.contains(&bound::enc("acct-a", 1))
            && received[2].text.contains(&bound::enc("acct-a", 2))
    );
    assert_eq!(RelayAction::default().header_value(), None);
}

#[tokio::test]
async fn affinity_is_kept_per_combo() {
    let relay = Relay::new();
    let mut codex = Codex::new("two-combos");
    codex.turn(&relay, "on combo relay").await;
    // The same session through another combo, served by another account: that combo's first
    // request, not a switch of the first combo.
    relay.use_account("acct-b");
    let mut req = codex.request("on combo fast");
    req.extensions_mut().insert(ComboName::new("fast"));
    let (status, headers, body) = relay.send(req).await;
    // acct-b rejects acct-a's reasoning: repaired, not scrubbed as a switch.
    assert_eq!(status, StatusCode::OK);
    assert_eq!(action(&headers), "repaired");
    codex.absorb(&headers, &body);
    // Back on the first combo with its own account: not a switch, nothing touched but what
    // acct-a cannot read (the repair strips it).
    relay.use_account("acct-a");
    let before = relay.provider.received().len();
    let headers = codex.turn(&relay, "on combo relay again").await;
    assert_eq!(action(&headers), "repaired");
    let received = relay.provider.received();
    assert_eq!(received.len(), before + 2);
    assert!(
        received[before].carries_state_of("acct-a"),
        "not scrubbed as a switch"
    );
}

/// A redis-server of our own on a free loopback port (or `REDIS_URL`), stopped on drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_alternate_a_session_across_a_switch() {
    let redis = Redis::start();
    let prefix = format!(
        "cr-switch-test:{}:{:?}:",
        std::process::id(),
        SystemTime::now()
    );
    let provider = Provider::default();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let store = context_relay_store::RedisStore::builder(redis.url.clone())
            .prefix(prefix.clone())
            .connect()
            .await
            .unwrap();
        replicas.push(Relay::sharing(Arc::new(store), provider.clone()));
    }
    let mut codex = Codex::new("replicated");
    codex.turn(&replicas[0], "a1").await;
    codex.turn(&replicas[1], "a2").await;
    replicas[0].upsert_handoff("replicated", "acct-a").await;
    for r in &replicas {
        r.use_account("acct-b");
    }
    for (turn, i) in [0, 1, 0, 1].into_iter().enumerate() {
        let headers = codex.turn(&replicas[i], &format!("b{turn}")).await;
        let expected = if turn == 0 {
            "injected, scrubbed"
        } else {
            "scrubbed"
        };
        assert_eq!(action(&headers), expected, "turn {turn} on replica {i}");
    }
    // And back to acct-a on the other replica: a switch again, seen at once; no handoff is
    // stored any more, so one is built from the request.
    for r in &replicas {
        r.use_account("acct-a");
    }
    let headers = codex.turn(&replicas[1], "a3").await;
    assert_eq!(action(&headers), "injected, extractive, scrubbed");
    let received = provider.received();
    assert!(
        received.iter().all(|r| r.status == StatusCode::OK),
        "no rejection, no repair"
    );
    for r in received.iter().filter(|r| r.account == "acct-b") {
        assert!(!r.carries_state_of("acct-a"));
    }
    assert!(!received.last().unwrap().carries_state_of("acct-b"));
    // The stored handoff once, then the one built at the switch back.
    assert_eq!(received.iter().map(|r| r.handoffs()).sum::<usize>(), 2);
    assert_eq!(received.last().unwrap().handoffs(), 1);
}

#[tokio::test]
async fn the_fast_path_forwards_the_body_as_it_comes() {
    use http_body_util::StreamBody;
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let key = HandoffKey::new(tenant(), "steady", "relay");
    store
        .set_affinity(&key, context_relay_store::Affinity::new("codex", "acct-a"))
        .await
        .unwrap();
    // The upstream answers after the first frame of the body: a layer that buffered the body
    // first would never let it.
    let upstream = tower::service_fn(
        |req: Request<context_relay_tower::injection::RequestBody<Body>>| async move {
            let mut body = req.into_body();
            let first = body.frame().await.expect("a frame").expect("ok");
            let first = first.into_data().expect("data");
            Ok::<_, Infallible>(Response::new(full(first)))
        },
    );
    let svc = ServiceBuilder::new()
        .layer(ContextRelay::builder(store).build().injection_layer())
        .service(upstream);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, Infallible>>(2);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut req = Request::post("/v1/responses")
        .header("session-id", "steady")
        .header("authorization", format!("Bearer {KEY}"))
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap();
    req.extensions_mut().insert(ComboName::new("relay"));
    req.extensions_mut()
        .insert(ResolvedAccount::new("codex", "acct-a"));
    tx.send(Ok(http_body::Frame::data(Bytes::from_static(
        b"{\"input\":",
    ))))
    .await
    .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(5), svc.oneshot(req))
        .await
        .expect("answered before the body ended")
        .unwrap();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, Bytes::from_static(b"{\"input\":"));
    drop(tx);
}
