//! A store given to `Gateway::with_store` that stops answering holds a request for a bound
//! only: the resolver's and the relay's affinity reads give up, and the request goes on as
//! after a store error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use context_relay_core::HandoffKey;
use context_relay_gateway::Gateway;
use context_relay_sim::SimProvider;
use context_relay_store::{Affinity, HandoffStore, MemoryStore, StoreFuture};
use context_relay_testkit::harness::{CodexGateway, Harness, start_sim};
use http::Request;
use http_body_util::{BodyExt, Full};

/// A memory store whose affinity reads never answer.
#[derive(Default)]
struct AffinityHangs(MemoryStore);

impl HandoffStore for AffinityHangs {
    fn affinity<'a>(&'a self, _: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>> {
        Box::pin(std::future::pending())
    }
    fn cached_affinity(&self, _: &HandoffKey) -> Option<Option<Affinity>> {
        None
    }
    context_relay_testkit::forward_handoff_store!(0: upsert, offer, offer_at_switch, get,
        contains, may_contain, claim, complete, release, delete, purge_expired, list,
        set_affinity, backend);
}

#[tokio::test]
async fn a_store_that_never_answers_holds_a_request_for_a_bound_only() {
    let sim = start_sim(SimProvider::builder(), &["acct-a", "acct-b"]).await;
    let config = CodexGateway::default().config(&sim.base_url());
    let store: Arc<dyn HandoffStore> = Arc::new(AffinityHangs::default());
    let h = Harness::serve(sim, Gateway::with_store(config, store).expect("gateway")).await;
    let req = Request::post(h.url(0, "/v1/chat/completions"))
        .header("authorization", "Bearer c")
        .header("session-id", "hung")
        .body(Full::from(
            r#"{"model":"codex-relay","messages":[{"role":"user","content":"hi"}]}"#,
        ))
        .expect("request");
    let started = Instant::now();
    let res = tokio::time::timeout(Duration::from_secs(60), h.client.request(req))
        .await
        .expect("the request was held for good")
        .expect("response");
    assert_eq!(res.status(), 200);
    res.into_body().collect().await.expect("body");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
