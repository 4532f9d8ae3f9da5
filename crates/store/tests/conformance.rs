//! One suite, every backend: the store semantics the layers rely on (expiry, one claim per
//! handoff, versioned completion, per-combo affinity, tenant isolation).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Harness;
use context_relay_core::HandoffKey;
use context_relay_core::portable::ForeignSet;
use context_relay_store::Affinity;

const HOUR: Duration = Duration::from_secs(3600);
const LEASE: Duration = Duration::from_secs(30);

fn key(tenant: &str, session: &str) -> HandoffKey {
    HandoffKey::new(tenant, session, "codex-relay")
}

mod cases {
    use super::*;

    pub(super) async fn upsert_replaces(h: &Harness) {
        let k = key("acme", "s1");
        h.store.upsert(h.record(&k, "first", HOUR)).await.unwrap();
        let second = h.record(&k, "second", 2 * HOUR);
        h.store.upsert(second.clone()).await.unwrap();
        assert_eq!(h.store.get(&k).await.unwrap(), Some(second.clone()));
        assert_eq!(h.store.list(None, None).await.unwrap(), vec![second]);
    }

    pub(super) async fn missing_key_is_absent_everywhere(h: &Harness) {
        let k = key("acme", "nobody");
        assert_eq!(h.store.get(&k).await.unwrap(), None);
        assert!(!h.store.contains(&k).await.unwrap());
        assert!(h.store.claim(&k, LEASE).await.unwrap().is_none());
        assert!(!h.store.delete(&k).await.unwrap());
        if h.store.backend() != "redis" {
            assert!(!h.store.may_contain(&k), "redb and memory answer exactly");
        }
    }

    pub(super) async fn expired_records_are_absent_and_purged(h: &Harness) {
        let short = key("acme", "short");
        let long = key("acme", "long");
        h.store
            .upsert(h.record(&short, "short-lived", Duration::from_secs(60)))
            .await
            .unwrap();
        let kept = h.record(&long, "long-lived", HOUR);
        h.store.upsert(kept.clone()).await.unwrap();
        assert!(h.store.contains(&short).await.unwrap());

        h.clock.advance(Duration::from_secs(61));
        assert_eq!(h.store.get(&short).await.unwrap(), None);
        assert!(!h.store.contains(&short).await.unwrap());
        assert!(h.store.claim(&short, LEASE).await.unwrap().is_none());
        if h.store.backend() != "redis" {
            assert!(!h.store.may_contain(&short));
        }
        assert_eq!(h.store.list(None, None).await.unwrap(), vec![kept.clone()]);

        assert_eq!(h.store.purge_expired().await.unwrap(), 1);
        assert_eq!(h.store.purge_expired().await.unwrap(), 0);
        assert_eq!(h.store.get(&long).await.unwrap(), Some(kept));
    }

    pub(super) async fn record_expired_on_arrival_is_absent(h: &Harness) {
        let k = key("acme", "late");
        let mut r = h.record(&k, "too late", HOUR);
        r.expires_at = h.now() - Duration::from_secs(1);
        h.store.upsert(r).await.unwrap();
        assert_eq!(h.store.get(&k).await.unwrap(), None);
        assert!(!h.store.contains(&k).await.unwrap());
    }

    pub(super) async fn thousand_concurrent_claims_have_one_winner(h: &Harness) {
        let k = key("acme", "hot");
        h.store
            .upsert(h.record(&k, "contended", HOUR))
            .await
            .unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(1_000));
        let tasks: Vec<_> = (0..1_000)
            .map(|_| {
                let store = Arc::clone(&h.store);
                let barrier = Arc::clone(&barrier);
                let k = k.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.claim(&k, HOUR).await.unwrap()
                })
            })
            .collect();
        let mut winners = 0;
        for t in tasks {
            winners += usize::from(t.await.unwrap().is_some());
        }
        assert_eq!(winners, 1);
    }

    pub(super) async fn complete_deletes_the_claimed_record(h: &Harness) {
        let k = key("acme", "s1");
        let r = h.record(&k, "use me", HOUR);
        h.store.upsert(r.clone()).await.unwrap();
        let claim = h.store.claim(&k, LEASE).await.unwrap().unwrap();
        assert_eq!(claim.record, r);
        assert_eq!(claim.key(), k);
        assert!(
            h.store.contains(&k).await.unwrap(),
            "a leased record is still there"
        );
        assert!(h.store.complete(&claim).await.unwrap());
        assert_eq!(h.store.get(&k).await.unwrap(), None);
        assert!(!h.store.complete(&claim).await.unwrap());
    }

    pub(super) async fn complete_after_newer_upsert_keeps_the_newer(h: &Harness) {
        let k = key("acme", "s1");
        h.store.upsert(h.record(&k, "old", HOUR)).await.unwrap();
        let claim = h.store.claim(&k, LEASE).await.unwrap().unwrap();
        let newer = h.record(&k, "new", HOUR);
        h.store.upsert(newer.clone()).await.unwrap();
        assert!(!h.store.complete(&claim).await.unwrap());
        assert_eq!(h.store.get(&k).await.unwrap(), Some(newer.clone()));
        // The upsert ended the old lease: the newer record is claimable.
        let again = h.store.claim(&k, LEASE).await.unwrap().unwrap();
        assert_eq!(again.record, newer);
    }

    pub(super) async fn release_makes_it_claimable_again(h: &Harness) {
        let k = key("acme", "s1");
        h.store.upsert(h.record(&k, "r", HOUR)).await.unwrap();
        let claim = h.store.claim(&k, LEASE).await.unwrap().unwrap();
        assert!(h.store.claim(&k, LEASE).await.unwrap().is_none());
        h.store.release(&claim).await.unwrap();
        let second = h.store.claim(&k, LEASE).await.unwrap().unwrap();
        assert_eq!(second.record, claim.record);
        // A stale release (of the first claim) does not end the second claim's lease.
        h.store.release(&claim).await.unwrap();
        assert!(h.store.claim(&k, LEASE).await.unwrap().is_none());
    }

    pub(super) async fn lease_that_runs_out_makes_it_claimable_again(h: &Harness) {
        let k = key("acme", "s1");
        h.store.upsert(h.record(&k, "r", HOUR)).await.unwrap();
        let _first = h.store.claim(&k, LEASE).await.unwrap().unwrap();
        h.clock.advance(LEASE - Duration::from_millis(1));
        assert!(h.store.claim(&k, LEASE).await.unwrap().is_none());
        h.clock.advance(Duration::from_millis(1));
        assert!(h.store.claim(&k, LEASE).await.unwrap().is_some());
    }

    pub(super) async fn delete_removes(h: &Harness) {
        let k = key("acme", "s1");
        h.store.upsert(h.record(&k, "r", HOUR)).await.unwrap();
        assert!(h.store.delete(&k).await.unwrap());
        assert!(!h.store.delete(&k).await.unwrap());
        assert_eq!(h.store.get(&k).await.unwrap(), None);
        assert!(h.store.list(None, None).await.unwrap().is_empty());
    }

    pub(super) async fn tenants_never_see_each_other(h: &Harness) {
        let mine = key("acme", "s1");
        let theirs = key("globex", "s1");
        let r = h.record(&mine, "acme's secret", HOUR);
        h.store.upsert(r.clone()).await.unwrap();
        assert_eq!(h.store.get(&theirs).await.unwrap(), None);
        assert!(!h.store.contains(&theirs).await.unwrap());
        assert!(h.store.claim(&theirs, LEASE).await.unwrap().is_none());
        assert!(!h.store.delete(&theirs).await.unwrap());
        assert!(h.store.list(Some("globex"), None).await.unwrap().is_empty());
        assert!(
            h.store
                .list(Some("globex"), Some("s1"))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            h.store.list(Some("acme"), None).await.unwrap(),
            vec![r.clone()]
        );
        assert_eq!(h.store.get(&mine).await.unwrap(), Some(r));

        h.store
            .set_affinity(&mine, Affinity::new("codex", "alice"))
            .await
            .unwrap();
        assert_eq!(h.store.affinity(&key("globex", "s1")).await.unwrap(), None);
    }

    pub(super) async fn list_filters_by_tenant_and_session(h: &Harness) {
        let mut all = Vec::new();
        for (t, s) in [("a", "1"), ("a", "2"), ("b", "1")] {
            let r = h.record(&key(t, s), "x", HOUR);
            h.store.upsert(r.clone()).await.unwrap();
            all.push(r);
        }
        assert_eq!(h.store.list(None, None).await.unwrap(), all);
        assert_eq!(
            h.store.list(Some("a"), None).await.unwrap(),
            all[..2].to_vec()
        );
        assert_eq!(
            h.store.list(None, Some("1")).await.unwrap(),
            vec![all[0].clone(), all[2].clone()]
        );
        assert_eq!(
            h.store.list(Some("b"), Some("1")).await.unwrap(),
            vec![all[2].clone()]
        );
    }

    pub(super) async fn affinity_round_trips(h: &Harness) {
        let k = key("acme", "s1");
        assert_eq!(h.store.affinity(&k).await.unwrap(), None);
        assert!(matches!(h.store.cached_affinity(&k), None | Some(None)));
        let alice = Affinity::new("codex", "alice");
        h.store.set_affinity(&k, alice.clone()).await.unwrap();
        assert_eq!(h.store.affinity(&k).await.unwrap(), Some(alice.clone()));
        assert!(matches!(h.store.cached_affinity(&k), None | Some(Some(_))));
        let bob = Affinity::new("codex", "bob");
        h.store.set_affinity(&k, bob.clone()).await.unwrap();
        assert_eq!(h.store.affinity(&k).await.unwrap(), Some(bob.clone()));
        if h.store.backend() != "redis" {
            assert_eq!(h.store.cached_affinity(&k), Some(Some(bob.clone())));
        }
        // Same account again: allowed, no change.
        h.store.set_affinity(&k, bob.clone()).await.unwrap();
        assert_eq!(h.store.affinity(&key("acme", "s2")).await.unwrap(), None);
    }

    pub(super) async fn affinity_is_per_combo(h: &Harness) {
        let a = HandoffKey::new("acme", "s1", "combo-a");
        let b = HandoffKey::new("acme", "s1", "combo-b");
        h.store
            .set_affinity(&a, Affinity::new("codex", "alice"))
            .await
            .unwrap();
        h.store
            .set_affinity(&b, Affinity::new("codex", "bob"))
            .await
            .unwrap();
        assert_eq!(
            h.store.affinity(&a).await.unwrap(),
            Some(Affinity::new("codex", "alice"))
        );
        assert_eq!(
            h.store.affinity(&b).await.unwrap(),
            Some(Affinity::new("codex", "bob"))
        );
        assert_eq!(
            h.store
                .affinity(&HandoffKey::new("acme", "s1", "combo-c"))
                .await
                .unwrap(),
            None
        );
    }

    pub(super) async fn foreign_digests_are_kept_until_they_expire(h: &Harness) {
        let k = key("acme", "switched");
        let foreign = ForeignSet::from_digests([7, 3, u64::MAX]);
        let until = h.now() + Duration::from_secs(60);
        let moved = Affinity::new("codex", "bob").with_foreign(foreign.clone(), until);
        h.store.set_affinity(&k, moved.clone()).await.unwrap();
        let read = h.store.affinity(&k).await.unwrap().expect("written");
        assert_eq!(read, moved);
        assert_eq!(read.foreign_at(h.now()), Some(&foreign));
        // A change of the digests alone is a change: it is written.
        let more = Affinity::new("codex", "bob").with_foreign(foreign.merged(&[9]), until);
        h.store.set_affinity(&k, more.clone()).await.unwrap();
        assert_eq!(h.store.affinity(&k).await.unwrap(), Some(more));
        h.clock.advance(Duration::from_secs(61));
        let read = h
            .store
            .affinity(&k)
            .await
            .unwrap()
            .expect("the account is kept");
        assert!(read.is("codex", "bob"));
        assert_eq!(read.foreign_at(h.now()), None, "the digests expired");
    }

    pub(super) async fn generation_lease_is_exclusive_when_distributed(h: &Harness) {
        let k = key("acme", "s1");
        let lease = h.store.begin_generation(&k, HOUR).await.unwrap().unwrap();
        assert_eq!(lease.key(), &k);
        let second = h.store.begin_generation(&k, HOUR).await.unwrap();
        if lease.is_distributed() {
            assert!(second.is_none(), "another replica is turned away");
        } else {
            assert!(
                second.is_some(),
                "local leases defer to the InFlight registry"
            );
        }
        h.store.end_generation(&lease).await.unwrap();
        assert!(h.store.begin_generation(&k, HOUR).await.unwrap().is_some());
    }
}

macro_rules! backend {
    ($backend:ident, $make:path, [$($case:ident),* $(,)?]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let h = $make().await;
                    super::cases::$case(&h).await;
                }
            )*
        }
    };
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        backend!(memory, crate::common::memory, [$($case),*]);
        backend!(redb, crate::common::redb, [$($case),*]);
        #[cfg(feature = "redis")]
        backend!(redis, crate::common::redis, [$($case),*]);
    };
}

conformance!(
    upsert_replaces,
    missing_key_is_absent_everywhere,
    expired_records_are_absent_and_purged,
    record_expired_on_arrival_is_absent,
    thousand_concurrent_claims_have_one_winner,
    complete_deletes_the_claimed_record,
    complete_after_newer_upsert_keeps_the_newer,
    release_makes_it_claimable_again,
    lease_that_runs_out_makes_it_claimable_again,
    delete_removes,
    tenants_never_see_each_other,
    list_filters_by_tenant_and_session,
    affinity_round_trips,
    affinity_is_per_combo,
    foreign_digests_are_kept_until_they_expire,
    generation_lease_is_exclusive_when_distributed,
);
