//! A switch that finds no stored handoff builds one from the request and offers it on the
//! request's path (`HandoffStore::offer_at_switch`: the store's short limit, no replica wait),
//! never with the background writes' `offer`, which may wait for replicas.

mod bound;

use std::sync::Arc;
use std::time::Duration;

use bound::clients::{Codex, Relay, action};
use context_relay_core::HandoffRecord;
use context_relay_store::{HandoffStore, MemoryStore, StoreFuture};

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
