//! On a store replicas share (Redis), the resolver reads a session's affinity for every request
//! to follow a move another replica made; the relay takes what it read instead of reading the
//! store again. One affinity read per request, not two, and a session another replica moved
//! goes where it moved.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use context_relay_core::HandoffKey;
use context_relay_gateway::Gateway;
use context_relay_sim::SimProvider;
use context_relay_store::{Affinity, HandoffStore, MemoryStore, StoreFuture};
use context_relay_testkit::harness::{CodexGateway, Harness, start_sim};
use serde_json::json;

/// A memory store that reads as the Redis backend does for the gateway: shared, with no
/// affinity cache (Redis's is off by default); its affinity reads are counted.
#[derive(Default)]
struct SharedStore {
    inner: MemoryStore,
    reads: AtomicUsize,
    last_key: Mutex<Option<HandoffKey>>,
}

impl HandoffStore for SharedStore {
    fn affinity<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        *self.last_key.lock().expect("lock") = Some(key.clone());
        self.inner.affinity(key)
    }
    fn cached_affinity(&self, _: &HandoffKey) -> Option<Option<Affinity>> {
        None
    }
    fn backend(&self) -> &'static str {
        "redis"
    }
    context_relay_testkit::forward_handoff_store!(inner: upsert, offer, offer_at_switch, get,
        contains, may_contain, claim, complete, release, delete, purge_expired, list,
        set_affinity);
}

#[tokio::test]
async fn a_shared_store_is_read_once_per_request_and_a_move_elsewhere_is_followed() {
    let sim = start_sim(SimProvider::builder(), &["acct-a", "acct-b"]).await;
    let config = CodexGateway::default().config(&sim.base_url());
    let store = Arc::new(SharedStore::default());
    let dyn_store: Arc<dyn HandoffStore> = store.clone();
    let h = Harness::serve(
        sim,
        Gateway::with_store(config, dyn_store).expect("gateway"),
    )
    .await;
    let headers = [
        ("authorization".to_owned(), "Bearer client".to_owned()),
        ("session-id".to_owned(), "one-read".to_owned()),
    ];
    let mut messages = vec![json!({"role": "user", "content": "hello"})];
    let turn = async |messages: &mut Vec<serde_json::Value>| {
        let body = json!({"model": "codex-relay", "messages": messages.clone()});
        let (status, acted, reply) = h.send(0, "/v1/chat/completions", &headers, &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        h.idle().await;
        messages.push(json!({"role": "assistant", "content": "ok"}));
        messages.push(json!({"role": "user", "content": "go on"}));
        acted
    };
    for n in 1..=3 {
        turn(&mut messages).await;
        assert_eq!(
            store.reads.load(Ordering::SeqCst),
            n,
            "one affinity read per request (turn {n})"
        );
    }
    assert_eq!(h.served(), ["acct-a"; 3]);

    // Another replica moved the session to acct-b (a rotation it saw): this one follows, and
    // the relay takes the move for what it is, not for a switch away from acct-a.
    let key = store.last_key.lock().expect("lock").clone().expect("read");
    store
        .inner
        .set_affinity(&key, Affinity::new("codex", "acct-b"))
        .await
        .expect("moved");
    let acted = turn(&mut messages).await;
    assert_eq!(h.served().last().map(String::as_str), Some("acct-b"));
    assert!(
        acted.as_deref().is_none_or(|a| !a.contains("switch")),
        "the move was taken for a switch: {acted:?}"
    );
    assert_eq!(store.reads.load(Ordering::SeqCst), 4);
}
