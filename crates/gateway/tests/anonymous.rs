//! An open gateway gives every credential-less request a tenant of its own; the relay keeps
//! nothing for such a request (no affinity, no handoff), while keyed requests are relayed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use context_relay_core::{HandoffKey, HandoffRecord};
use context_relay_gateway::Gateway;
use context_relay_sim::SimProvider;
use context_relay_store::{
    Affinity, Claim, GenerationLease, HandoffStore, MemoryStore, StoreFuture,
};
use context_relay_testkit::harness::{CodexGateway, Harness, start_sim};
use http::Request;
use http_body_util::Full;

/// A memory store that notes the tenant of every write.
#[derive(Default)]
struct Recording {
    inner: MemoryStore,
    writes: Mutex<Vec<(&'static str, String)>>,
}

impl Recording {
    fn note(&self, op: &'static str, key: &HandoffKey) {
        self.writes
            .lock()
            .unwrap()
            .push((op, key.tenant.to_string()));
    }

    fn writes(&self) -> Vec<(&'static str, String)> {
        self.writes.lock().unwrap().clone()
    }
}

impl HandoffStore for Recording {
    fn upsert(&self, record: HandoffRecord) -> StoreFuture<'_, ()> {
        self.note("upsert", &record.key());
        self.inner.upsert(record)
    }
    fn offer(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        self.note("offer", &record.key());
        self.inner.offer(record)
    }
    fn offer_at_switch(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        self.note("offer_at_switch", &record.key());
        self.inner.offer_at_switch(record)
    }
    fn claim<'a>(&'a self, key: &'a HandoffKey, lease: Duration) -> StoreFuture<'a, Option<Claim>> {
        self.note("claim", key);
        self.inner.claim(key, lease)
    }
    fn set_affinity<'a>(&'a self, key: &'a HandoffKey, affinity: Affinity) -> StoreFuture<'a, ()> {
        self.note("set_affinity", key);
        self.inner.set_affinity(key, affinity)
    }
    fn begin_generation<'a>(
        &'a self,
        key: &'a HandoffKey,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<GenerationLease>> {
        self.note("begin_generation", key);
        self.inner.begin_generation(key, ttl)
    }
    context_relay_testkit::forward_handoff_store!(inner: get, contains, may_contain, complete,
        release, delete, purge_expired, list, affinity, cached_affinity, backend, secret);
}

#[tokio::test]
async fn anonymous_requests_write_no_affinity_and_no_handoff_but_are_served() {
    let sim = start_sim(SimProvider::builder(), &["acct-a"]).await;
    let config = CodexGateway {
        accounts: &["acct-a"],
        provider: "quota = \"none\"",
        ..CodexGateway::default()
    }
    .config(&sim.base_url());
    let store = Arc::new(Recording::default());
    let gateway = Gateway::with_store(config, store.clone()).unwrap();
    assert!(gateway.relay_enabled());
    let h = Harness::serve(sim, gateway).await;
    let send = |key: Option<&'static str>| {
        let mut req = Request::post(h.url(0, "/v1/chat/completions")).header("session_id", "s-1");
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        h.client.request(
            req.body(Full::new(Bytes::from_static(
                br#"{"model":"codex-relay","messages":[{"role":"system","content":"s"},{"role":"user","content":"hello"}]}"#,
            )))
            .unwrap(),
        )
    };
    for _ in 0..3 {
        assert_eq!(send(None).await.unwrap().status(), 200);
    }
    h.idle().await;
    assert_eq!(
        store.writes(),
        Vec::new(),
        "anonymous requests touched the store"
    );
    // The same request with a key is relayed: its affinity is recorded.
    assert_eq!(send(Some("k1")).await.unwrap().status(), 200);
    h.idle().await;
    let writes = store.writes();
    assert!(
        writes
            .iter()
            .any(|(op, tenant)| *op == "set_affinity" && tenant.starts_with("k-")),
        "{writes:?}"
    );
    assert!(
        writes
            .iter()
            .all(|(_, tenant)| !tenant.starts_with("anon-"))
    );
}
