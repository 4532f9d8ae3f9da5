//! A switch that finds no stored handoff builds one from the request and offers it on the
//! request's path (`HandoffStore::offer_at_switch`: the store's short limit, no replica wait),
//! never with the background writes' `offer`, which may wait for replicas; a store that stops
//! answering holds the switching request for a bound only.

mod bound;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bound::clients::{Codex, Relay, action};
use context_relay_core::{HandoffKey, HandoffRecord};
use context_relay_store::{Affinity, Claim, HandoffStore, MemoryStore, StoreError, StoreFuture};

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
/// call can, past the request path's short limit), its time to the millisecond as redb and
/// Redis keep it; its first `refused_deletes` deletes fail (a Redis refusing writes).
#[derive(Default)]
struct OfferAnswersLate {
    store: MemoryStore,
    refused_deletes: std::sync::atomic::AtomicUsize,
}

impl HandoffStore for OfferAnswersLate {
    fn offer_at_switch(&self, mut record: HandoffRecord) -> StoreFuture<'_, bool> {
        use context_relay_core::time::{from_unix_millis, to_unix_millis};
        record.generated_at = from_unix_millis(to_unix_millis(record.generated_at));
        Box::pin(async move {
            self.store.offer_at_switch(record).await?;
            Err(StoreError::Timeout {
                op: "offer_at_switch",
                after: Duration::from_millis(40),
            })
        })
    }
    fn delete<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        let refused = self
            .refused_deletes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        match refused {
            true => Box::pin(async {
                Err(StoreError::Io {
                    op: "delete",
                    reason: "OOM command not allowed".into(),
                })
            }),
            false => self.store.delete(key),
        }
    }
    context_relay_testkit::forward_handoff_store!(store: upsert, offer, get, contains,
        may_contain, claim, complete, release, purge_expired, list, affinity,
        cached_affinity, set_affinity, backend);
}

/// A Codex session of three turns on acct-a over `store`, then one to acct-b that carries a
/// handoff built from the request; the background work done.
async fn switched_over(store: Arc<OfferAnswersLate>, session: &'static str) -> (Relay, Codex) {
    let relay = Relay::on(store);
    let mut codex = Codex::new(session);
    for i in 0..3 {
        codex.turn(&relay, &format!("step {i}")).await;
    }
    relay.use_account("acct-b");
    let headers = codex.turn(&relay, "step 3").await;
    assert_eq!(action(&headers), "injected, extractive, scrubbed");
    relay.background.idle().await;
    (relay, codex)
}

/// The copy is removed even when the store refuses deletes for a while (the removal tried
/// three times in three seconds before, and a Redis refusing writes outlasted it).
#[tokio::test(start_paused = true)]
async fn a_handoff_an_offer_stored_is_removed_once_the_store_takes_deletes_again() {
    let store = Arc::new(OfferAnswersLate {
        refused_deletes: 6.into(),
        ..OfferAnswersLate::default()
    });
    let (relay, _) = switched_over(store.clone(), "codex-late-refused").await;
    assert!(!relay.handoff_left("codex-late-refused").await);
    assert_eq!(store.refused_deletes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_handoff_an_offer_stored_before_it_timed_out_is_not_injected_twice() {
    let (relay, mut codex) =
        switched_over(Arc::new(OfferAnswersLate::default()), "codex-late").await;
    assert!(
        !relay.handoff_left("codex-late").await,
        "the stored copy was removed"
    );
    // The next turn on acct-b carries no second handoff.
    let headers = codex.turn(&relay, "step 4").await;
    assert_eq!(action(&headers), "scrubbed");
}

/// A memory store whose request-path calls stop answering once `hang` is set (an
/// application's store on a hung connection, with no time limit of its own).
#[derive(Default)]
struct Hangs {
    store: MemoryStore,
    hang: AtomicBool,
}

impl Hangs {
    fn or_pend<'a, T: Send + 'a>(&'a self, call: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        match self.hang.load(Ordering::SeqCst) {
            true => Box::pin(std::future::pending()),
            false => call,
        }
    }
}

impl HandoffStore for Hangs {
    fn affinity<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>> {
        self.or_pend(self.store.affinity(key))
    }
    fn get<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        self.or_pend(self.store.get(key))
    }
    fn claim<'a>(&'a self, key: &'a HandoffKey, lease: Duration) -> StoreFuture<'a, Option<Claim>> {
        self.or_pend(self.store.claim(key, lease))
    }
    fn offer_at_switch(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        self.or_pend(self.store.offer_at_switch(record))
    }
    context_relay_testkit::forward_handoff_store!(store: upsert, offer, contains, may_contain,
        complete, release, delete, purge_expired, list, cached_affinity, set_affinity, backend);
}

/// A Codex session of three turns on acct-a over a [`Hangs`] store that then stops answering,
/// its next turn to go to acct-b.
async fn hung_on_the_way_to_b(session: &'static str) -> (Relay, Codex) {
    let store = Arc::new(Hangs::default());
    let relay = Relay::on(store.clone());
    let mut codex = Codex::new(session);
    for i in 0..3 {
        codex.turn(&relay, &format!("step {i}")).await;
    }
    store.hang.store(true, Ordering::SeqCst);
    relay.use_account("acct-b");
    (relay, codex)
}

#[tokio::test(start_paused = true)]
async fn a_store_that_stops_answering_holds_a_switch_for_a_bound_only() {
    let (relay, mut codex) = hung_on_the_way_to_b("codex-hang").await;
    let started = tokio::time::Instant::now();
    let answer = async {
        let res = tower::ServiceExt::oneshot(relay.svc.clone(), codex.request("step 3"))
            .await
            .expect("never fails");
        let status = res.status();
        http_body_util::BodyExt::collect(res.into_body())
            .await
            .expect("body");
        status
    };
    // (The background's own calls may stay hung; the request does not wait for them.)
    let status = tokio::time::timeout(Duration::from_secs(600), answer)
        .await
        .expect("the request was held for good");
    assert_eq!(status, http::StatusCode::OK);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let last = relay.provider.received().pop().expect("sent");
    assert_eq!(last.account, "acct-b");
    assert!(!last.carries_state_of("acct-a"));
}

/// A store that stops answering delays one request by the bound, not every call of every
/// request: the first timeout opens the relay's breaker, and the calls requests would wait
/// for fail at once until its back-off ends.
#[tokio::test(start_paused = true)]
async fn a_store_that_stops_answering_delays_one_request_not_each() {
    let (relay, mut codex) = hung_on_the_way_to_b("codex-hang-each").await;
    let mut took = Vec::new();
    for i in 3..7 {
        let started = tokio::time::Instant::now();
        let res =
            tower::ServiceExt::oneshot(relay.svc.clone(), codex.request(&format!("step {i}")))
                .await
                .expect("never fails");
        assert_eq!(res.status(), http::StatusCode::OK);
        http_body_util::BodyExt::collect(res.into_body())
            .await
            .expect("body");
        took.push(started.elapsed());
    }
    // The switch waits out one bound (3 s), not one per call it makes; the next requests,
    // within the first back-off (1 s), wait for none.
    assert!(took[0] < Duration::from_secs(4), "{took:?}");
    assert!(
        took[1..].iter().all(|t| *t < Duration::from_millis(500)),
        "{took:?}"
    );
}

/// A memory store that notes the order of affinity writes and completed claims.
#[derive(Default)]
struct Noted {
    store: MemoryStore,
    ops: std::sync::Mutex<Vec<&'static str>>,
}

impl HandoffStore for Noted {
    fn set_affinity<'a>(&'a self, key: &'a HandoffKey, affinity: Affinity) -> StoreFuture<'a, ()> {
        self.ops.lock().unwrap().push("set_affinity");
        self.store.set_affinity(key, affinity)
    }
    fn complete<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, bool> {
        self.ops.lock().unwrap().push("complete");
        self.store.complete(claim)
    }
    context_relay_testkit::forward_handoff_store!(store: upsert, offer, offer_at_switch, get,
        contains, may_contain, claim, release, delete, purge_expired, list, affinity,
        cached_affinity, backend);
}

/// A switch that carried a stored handoff records the new account before it consumes the
/// handoff: a summary of the old account that then finds nothing leased finds the session
/// moved too, and leaves no second handoff.
#[tokio::test]
async fn a_switch_records_its_account_before_it_consumes_the_handoff() {
    let store = Arc::new(Noted::default());
    let relay = Relay::on(store.clone());
    let mut codex = Codex::new("codex-order");
    codex.turn(&relay, "step 0").await;
    relay.upsert_handoff("codex-order", "acct-a").await;
    relay.use_account("acct-b");
    store.ops.lock().unwrap().clear();
    let headers = codex.turn(&relay, "step 1").await;
    assert!(action(&headers).starts_with("injected"), "{headers:?}");
    relay.background.idle().await;
    assert_eq!(*store.ops.lock().unwrap(), ["set_affinity", "complete"]);
}

/// A memory store whose affinity writes never finish.
#[derive(Default)]
struct AffinityHangs(MemoryStore);

impl HandoffStore for AffinityHangs {
    fn set_affinity<'a>(&'a self, _: &'a HandoffKey, _: Affinity) -> StoreFuture<'a, ()> {
        Box::pin(std::future::pending())
    }
    context_relay_testkit::forward_handoff_store!(0: upsert, offer, offer_at_switch, get,
        contains, may_contain, claim, complete, release, delete, purge_expired, list, affinity,
        cached_affinity, backend);
}

/// The switch waits for its affinity write a bounded time only before it consumes the
/// handoff it carried: a write that never finishes must not keep the handoff leased until
/// the lease runs out (the next request would inject it again).
#[tokio::test(start_paused = true)]
async fn a_hung_affinity_write_does_not_keep_the_carried_handoff() {
    let store = Arc::new(AffinityHangs::default());
    let relay = Relay::on(store.clone());
    let mut codex = Codex::new("codex-affinity-hangs");
    let res = tower::ServiceExt::oneshot(relay.svc.clone(), codex.request("step 0"))
        .await
        .expect("never fails");
    http_body_util::BodyExt::collect(res.into_body())
        .await
        .expect("body");
    relay.upsert_handoff("codex-affinity-hangs", "acct-a").await;
    relay.use_account("acct-b");
    let res = tower::ServiceExt::oneshot(relay.svc.clone(), codex.request("step 1"))
        .await
        .expect("never fails");
    assert!(
        action(res.headers()).starts_with("injected"),
        "{:?}",
        res.headers()
    );
    http_body_util::BodyExt::collect(res.into_body())
        .await
        .expect("body");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        !relay.handoff_left("codex-affinity-hangs").await,
        "consumed"
    );
}
