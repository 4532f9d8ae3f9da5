//! A switch that finds no stored handoff builds one from the request and offers it on the
//! request's path (`HandoffStore::offer_at_switch`: the store's short limit, no replica wait),
//! never with the background writes' `offer`, which may wait for replicas.

mod bound;

use std::sync::Arc;
use std::time::Duration;

use bound::clients::{Codex, Relay, action};
use context_relay_core::HandoffRecord;
use context_relay_store::{HandoffStore, MemoryStore, StoreError, StoreFuture};

/// A memory store whose background `offer` never answers (a replica wait that does not end).
#[derive(Default)]
struct OfferStalls(MemoryStore);

impl HandoffStore for OfferStalls {
    fn offer(&self, _: HandoffRecord) -> StoreFuture<'_, bool> {
        Box::pin(std::future::pending())
    }
    context_relay_testkit::forward_handoff_store!(0: upsert, offer_at_switch, get, contains,
        may_contain, claim, complete, release, delete, purge_expired, list, affinity,
        cached_affinity, set_affinity, backend);
}

#[tokio::test]
async fn a_handoff_built_at_a_switch_is_offered_on_the_request_path() {
    let relay = Relay::on(Arc::new(OfferStalls::default()));
    let mut codex = Codex::new("codex-offer");
    for i in 0..3 {
        codex.turn(&relay, &format!("step {i}")).await;
    }
    // No summary was stored: the switch builds its handoff from the request.
    relay.use_account("acct-b");
    let headers = tokio::time::timeout(Duration::from_secs(30), codex.turn(&relay, "step 3"))
        .await
        .expect("the switch waited for a background write");
    assert_eq!(action(&headers), "injected, extractive, scrubbed");
    let on_b = relay.provider.received();
    let last = on_b.last().expect("sent");
    assert_eq!(last.account, "acct-b");
    assert!(!last.carries_state_of("acct-a"));
}

/// A memory store whose switch-time offer times out after it stored the record (as a Redis
/// call can, past the request path's short limit).
#[derive(Default)]
struct OfferAnswersLate(MemoryStore);

impl HandoffStore for OfferAnswersLate {
    fn offer_at_switch(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        Box::pin(async move {
            self.0.offer_at_switch(record).await?;
            Err(StoreError::Timeout {
                op: "offer_at_switch",
                after: Duration::from_millis(40),
            })
        })
    }
    context_relay_testkit::forward_handoff_store!(0: upsert, offer, get, contains,
        may_contain, claim, complete, release, delete, purge_expired, list, affinity,
        cached_affinity, set_affinity, backend);
}

#[tokio::test]
async fn a_handoff_an_offer_stored_before_it_timed_out_is_not_injected_twice() {
    let store = Arc::new(OfferAnswersLate::default());
    let relay = Relay::on(store.clone());
    let mut codex = Codex::new("codex-late");
    for i in 0..3 {
        codex.turn(&relay, &format!("step {i}")).await;
    }
    relay.use_account("acct-b");
    let headers = codex.turn(&relay, "step 3").await;
    assert_eq!(action(&headers), "injected, extractive, scrubbed");
    relay.background.idle().await;
    assert!(
        !relay.handoff_left("codex-late").await,
        "the stored copy was removed"
    );
    // The next turn on acct-b carries no second handoff.
    let headers = codex.turn(&relay, "step 4").await;
    assert_eq!(action(&headers), "scrubbed");
}
