//! Never hurt the request: a broken store, undecodable or oversized bodies, bad JSON.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use context_relay_core::{HandoffKey, HandoffRecord};
use context_relay_store::{Affinity, Claim, HandoffStore, MemoryStore, StoreError, StoreFuture};
use http::StatusCode;
use support::{Stack, chat, request};

/// A store whose every operation fails, and whose in-memory answers force the slow path.
struct BrokenStore;

fn fail<'a, T: Send + 'a>() -> StoreFuture<'a, T> {
    Box::pin(async { Err(StoreError::Closed) })
}

impl HandoffStore for BrokenStore {
    fn upsert(&self, _: HandoffRecord) -> StoreFuture<'_, ()> {
        fail()
    }
    fn offer(&self, _: HandoffRecord) -> StoreFuture<'_, bool> {
        fail()
    }
    fn get<'a>(&'a self, _: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        fail()
    }
    fn contains<'a>(&'a self, _: &'a HandoffKey) -> StoreFuture<'a, bool> {
        fail()
    }
    fn may_contain(&self, _: &HandoffKey) -> bool {
        true
    }
    fn claim<'a>(&'a self, _: &'a HandoffKey, _: Duration) -> StoreFuture<'a, Option<Claim>> {
        fail()
    }
    fn complete<'a>(&'a self, _: &'a Claim) -> StoreFuture<'a, bool> {
        fail()
    }
    fn release<'a>(&'a self, _: &'a Claim) -> StoreFuture<'a, ()> {
        fail()
    }
    fn delete<'a>(&'a self, _: &'a HandoffKey) -> StoreFuture<'a, bool> {
        fail()
    }
    fn purge_expired(&self) -> StoreFuture<'_, usize> {
        fail()
    }
    fn list<'a>(
        &'a self,
        _: Option<&'a str>,
        _: Option<&'a str>,
    ) -> StoreFuture<'a, Vec<HandoffRecord>> {
        fail()
    }
    fn affinity<'a>(&'a self, _: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>> {
        fail()
    }
    fn cached_affinity(&self, _: &HandoffKey) -> Option<Option<Affinity>> {
        None
    }
    fn set_affinity<'a>(&'a self, _: &'a HandoffKey, _: Affinity) -> StoreFuture<'a, ()> {
        fail()
    }
    fn backend(&self) -> &'static str {
        "broken"
    }
}

#[tokio::test]
async fn a_store_failing_every_call_never_fails_a_request() {
    let stack = Stack::with(Arc::new(BrokenStore), |r| r);
    for (i, percent) in [10.0, 88.0, 99.0].into_iter().enumerate() {
        stack.upstream.set_percent("acct-a", percent);
        let req = chat("s1", "k1", 2);
        let sent = {
            let (_, body) = support::collect_request(chat("s1", "k1", 2)).await;
            body
        };
        let (status, body) = stack.send(req).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!body.is_empty());
        stack.idle().await;
        assert_eq!(stack.upstream.turns()[i].body, sent, "forwarded unchanged");
    }
    // A switch with a broken store: still forwarded, unchanged.
    stack.use_account("acct-b");
    let sent = support::collect_request(chat("s1", "k1", 3)).await.1;
    let (status, _) = stack.send(chat("s1", "k1", 3)).await;
    assert_eq!(status, StatusCode::OK);
    stack.idle().await;
    assert_eq!(stack.upstream.turns()[3].body, sent);
}

fn handoff_stack() -> (Stack, HandoffKey) {
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let stack = Stack::with(store, |r| r.max_body_bytes(64 * 1024));
    let mut h = http::HeaderMap::new();
    h.insert("authorization", "Bearer k1".parse().unwrap());
    let key = HandoffKey::new(context_relay_core::session::tenant(&h), "s1", "codex-relay");
    (stack, key)
}

async fn seed(stack: &Stack, key: &HandoffKey) {
    let now = std::time::SystemTime::now();
    stack
        .store
        .upsert(HandoffRecord {
            version: 1,
            kind: Default::default(),
            tenant: key.tenant.clone(),
            session: key.session.clone(),
            combo: key.combo.clone(),
            from_provider: "codex".into(),
            from_account: "acct-a".into(),
            handoff: context_relay_core::Handoff {
                summary: "Working on the parser.".into(),
                ..Default::default()
            },
            message_count: 4,
            conversation: None,
            compaction: false,
            model: "gpt-5".into(),
            threshold: 0.85,
            generated_at: now,
            expires_at: now + Duration::from_secs(600),
        })
        .await
        .unwrap();
    stack.use_account("acct-b");
}

#[tokio::test]
async fn oversized_body_passes_through_and_keeps_the_handoff() {
    let (stack, key) = handoff_stack();
    seed(&stack, &key).await;
    let big = format!(
        r#"{{"model":"gpt-5","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(100 * 1024)
    );
    let (status, _) = stack
        .send(request("/v1/chat/completions", "s1", "k1", big.clone()))
        .await;
    assert_eq!(status, StatusCode::OK);
    stack.idle().await;
    assert_eq!(stack.upstream.turns()[0].body, Bytes::from(big));
    assert!(stack.store.get(&key).await.unwrap().is_some());
}

#[tokio::test]
async fn malformed_json_passes_through_and_keeps_the_handoff() {
    let (stack, key) = handoff_stack();
    seed(&stack, &key).await;
    for bad in [
        &b"{\"model\":\"gpt-5\",\"messages\":[{\"role\":"[..],
        b"not json at all",
        b"[1,2,3]",
        b"{\"model\":\"gpt-5\",\"messages\":\"a string\"}",
    ] {
        let (status, _) = stack
            .send(request(
                "/v1/chat/completions",
                "s1",
                "k1",
                Bytes::from_static(bad),
            ))
            .await;
        assert_eq!(status, StatusCode::OK);
        stack.idle().await;
        assert_eq!(
            stack.upstream.turns().last().unwrap().body,
            Bytes::from_static(bad)
        );
        assert!(stack.store.get(&key).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn compressed_body_is_decoded_rewritten_and_sent_uncompressed() {
    use std::io::Write;
    let (stack, key) = handoff_stack();
    seed(&stack, &key).await;
    let plain = br#"{"model":"gpt-5","messages":[{"role":"user","content":"go on"}]}"#;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(plain).unwrap();
    let gz = enc.finish().unwrap();
    let mut req = request("/v1/chat/completions", "s1", "k1", gz);
    req.headers_mut()
        .insert("content-encoding", "gzip".parse().unwrap());
    let (status, _) = stack.send(req).await;
    assert_eq!(status, StatusCode::OK);
    stack.idle().await;
    let seen = &stack.upstream.turns()[0];
    assert!(seen.headers.get("content-encoding").is_none());
    assert!(seen.has_handoff());
    assert_eq!(seen.json()["messages"][1]["content"], "go on");
    assert!(stack.store.get(&key).await.unwrap().is_none());
}

#[tokio::test]
async fn corrupt_compressed_body_passes_through_untouched() {
    let (stack, key) = handoff_stack();
    seed(&stack, &key).await;
    let mut req = request("/v1/chat/completions", "s1", "k1", &b"\x1f\x8b garbage"[..]);
    req.headers_mut()
        .insert("content-encoding", "gzip".parse().unwrap());
    let (status, _) = stack.send(req).await;
    assert_eq!(status, StatusCode::OK);
    stack.idle().await;
    let seen = &stack.upstream.turns()[0];
    assert_eq!(seen.body, Bytes::from_static(b"\x1f\x8b garbage"));
    assert_eq!(seen.headers.get("content-encoding").unwrap(), "gzip");
    assert!(stack.store.get(&key).await.unwrap().is_some());
}
