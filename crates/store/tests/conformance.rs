//! One suite, every backend: the store semantics the layers rely on (expiry, one claim per
//! handoff, versioned completion, per-combo affinity, tenant isolation, the two handoff slots
//! of a key).

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Harness;
use context_relay_core::portable::ForeignSet;
use context_relay_core::{HandoffKey, HandoffKind, HandoffRecord, HandoffSlot};
use context_relay_store::Affinity;

const HOUR: Duration = Duration::from_secs(3600);
const LEASE: Duration = Duration::from_secs(30);

fn key(tenant: &str, session: &str) -> HandoffKey {
    HandoffKey::new(tenant, session, "codex-relay")
}

/// A model-switch handoff of `k` written now, living `ttl`.
fn model_record(h: &Harness, k: &HandoffKey, summary: &str, ttl: Duration) -> HandoffRecord {
    let mut r = h.record(k, summary, ttl);
    r.kind = HandoffKind::ModelSwitch;
    r.model = "claude-sonnet-4-5".into();
    r
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

    pub(super) async fn affinity_set_now_is_read_before_its_write_finishes(h: &Harness) {
        let k = key("acme", "s-now");
        let alice = Affinity::new("codex", "alice");
        let write = h.store.clone().set_affinity_now(k.clone(), alice.clone());
        // Not awaited yet: this process already reads it. (Redis reads its cache only with an
        // affinity cache TTL, zero by default: there the write is what a read sees.)
        if h.store.backend() != "redis" {
            assert_eq!(h.store.cached_affinity(&k), Some(Some(alice.clone())));
        }
        write.await.unwrap();
        assert_eq!(h.store.affinity(&k).await.unwrap(), Some(alice));
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

    pub(super) async fn slots_coexist_and_a_put_never_replaces_the_other(h: &Harness) {
        let k = key("acme", "s1");
        let account = h.record(&k, "account", HOUR);
        let model = model_record(h, &k, "model", HOUR);
        h.store.upsert(account.clone()).await.unwrap();
        h.store.upsert(model.clone()).await.unwrap();
        assert_eq!(h.store.get(&k).await.unwrap(), Some(account.clone()));
        let get_in = |slot| h.store.get_in(&k, slot);
        assert_eq!(get_in(HandoffSlot::Account).await.unwrap(), Some(account));
        assert_eq!(
            get_in(HandoffSlot::Model).await.unwrap(),
            Some(model.clone())
        );
        for slot in HandoffSlot::ALL {
            assert!(h.store.contains_in(&k, slot).await.unwrap(), "{slot:?}");
            assert!(h.store.may_contain_in(&k, slot), "{slot:?}");
        }
        // A new account handoff replaces the account one only, and the other way round.
        let account2 = h.record(&k, "account 2", HOUR);
        h.store.upsert(account2.clone()).await.unwrap();
        assert_eq!(get_in(HandoffSlot::Model).await.unwrap(), Some(model));
        let model2 = model_record(h, &k, "model 2", HOUR);
        h.store.upsert(model2.clone()).await.unwrap();
        assert_eq!(
            get_in(HandoffSlot::Account).await.unwrap(),
            Some(account2.clone())
        );
        assert_eq!(
            get_in(HandoffSlot::Model).await.unwrap(),
            Some(model2.clone())
        );
        // An extractive handoff is an account handoff: it replaces the generated one only.
        let mut extractive = h.record(&k, "extractive", HOUR);
        extractive.kind = HandoffKind::Extractive;
        h.store.upsert(extractive.clone()).await.unwrap();
        assert_eq!(h.store.get(&k).await.unwrap(), Some(extractive.clone()));
        // The listing holds both, and says which is which by kind.
        let listed = h.store.list(None, None).await.unwrap();
        assert_eq!(listed, vec![extractive.clone(), model2.clone()]);
        let kinds: Vec<_> = listed.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["extractive", "model-switch"]);
        assert_eq!(
            h.store.list(Some("acme"), Some("s1")).await.unwrap(),
            vec![extractive, model2]
        );
        // A model handoff alone is invisible to the account-slot methods.
        let only = key("acme", "only-model");
        h.store
            .upsert(model_record(h, &only, "m", HOUR))
            .await
            .unwrap();
        assert_eq!(h.store.get(&only).await.unwrap(), None);
        assert!(!h.store.contains(&only).await.unwrap());
        assert!(h.store.claim(&only, LEASE).await.unwrap().is_none());
        assert!(!h.store.delete(&only).await.unwrap());
        if h.store.backend() != "redis" {
            assert!(
                !h.store.may_contain(&only),
                "redb and memory answer exactly"
            );
        }
        assert!(
            h.store
                .contains_in(&only, HandoffSlot::Model)
                .await
                .unwrap()
        );
    }

    pub(super) async fn consuming_one_slot_never_touches_the_other(h: &Harness) {
        let k = key("acme", "s1");
        let account = h.record(&k, "account", HOUR);
        let model = model_record(h, &k, "model", HOUR);
        h.store.upsert(account.clone()).await.unwrap();
        h.store.upsert(model.clone()).await.unwrap();

        // Both can be leased at once: the leases are per slot.
        let m = h
            .store
            .claim_in(&k, HandoffSlot::Model, LEASE)
            .await
            .unwrap();
        let m = m.expect("the model handoff is claimable");
        assert_eq!((m.slot(), &m.record), (HandoffSlot::Model, &model));
        assert!(
            h.store
                .claim_in(&k, HandoffSlot::Model, LEASE)
                .await
                .unwrap()
                .is_none(),
            "leased"
        );
        let a = h.store.claim(&k, LEASE).await.unwrap().expect("unaffected");
        assert_eq!((a.slot(), &a.record), (HandoffSlot::Account, &account));

        // Releasing one keeps both; completing one deletes that one only.
        h.store.release(&a).await.unwrap();
        assert!(h.store.complete(&m).await.unwrap());
        assert_eq!(h.store.get_in(&k, HandoffSlot::Model).await.unwrap(), None);
        assert_eq!(h.store.get(&k).await.unwrap(), Some(account.clone()));
        let a = h.store.claim(&k, LEASE).await.unwrap().expect("released");
        h.store.upsert(model.clone()).await.unwrap();
        assert!(h.store.complete(&a).await.unwrap());
        assert_eq!(h.store.get(&k).await.unwrap(), None);
        assert_eq!(
            h.store.get_in(&k, HandoffSlot::Model).await.unwrap(),
            Some(model.clone())
        );

        // A claim of one slot completed after the other slot was rewritten still deletes.
        h.store.upsert(account.clone()).await.unwrap();
        let a = h.store.claim(&k, LEASE).await.unwrap().expect("live");
        h.store
            .upsert(model_record(h, &k, "newer model", HOUR))
            .await
            .unwrap();
        assert!(
            h.store.complete(&a).await.unwrap(),
            "the account version is unchanged"
        );

        // Deleting one slot leaves the other.
        h.store.upsert(account.clone()).await.unwrap();
        assert!(h.store.delete_in(&k, HandoffSlot::Model).await.unwrap());
        assert!(!h.store.contains_in(&k, HandoffSlot::Model).await.unwrap());
        assert_eq!(h.store.get(&k).await.unwrap(), Some(account));
        h.store.upsert(model.clone()).await.unwrap();
        assert!(h.store.delete(&k).await.unwrap());
        assert_eq!(
            h.store.get_in(&k, HandoffSlot::Model).await.unwrap(),
            Some(model)
        );
        assert!(!h.store.delete_in(&k, HandoffSlot::Account).await.unwrap());
    }

    pub(super) async fn freshest_picks_the_newer_slot(h: &Harness) {
        let k = key("acme", "s1");
        assert_eq!(h.store.freshest(&k).await.unwrap(), None);
        let account = h.record(&k, "account", HOUR);
        h.store.upsert(account.clone()).await.unwrap();
        assert_eq!(h.store.freshest(&k).await.unwrap(), Some(account));

        h.clock.advance(Duration::from_secs(5));
        let model = model_record(h, &k, "model", HOUR);
        h.store.upsert(model.clone()).await.unwrap();
        assert_eq!(h.store.freshest(&k).await.unwrap(), Some(model.clone()));

        h.clock.advance(Duration::from_secs(5));
        let newer = h.record(&k, "newer account", Duration::from_secs(60));
        h.store.upsert(newer.clone()).await.unwrap();
        assert_eq!(h.store.freshest(&k).await.unwrap(), Some(newer));

        // Once the newer one expires, the older live one is the freshest.
        h.clock.advance(Duration::from_secs(61));
        assert_eq!(h.store.freshest(&k).await.unwrap(), Some(model));
        // Only a model handoff: that one.
        let other = key("acme", "s2");
        let only = model_record(h, &other, "only", HOUR);
        h.store.upsert(only.clone()).await.unwrap();
        assert_eq!(h.store.freshest(&other).await.unwrap(), Some(only));
    }

    pub(super) async fn both_slots_expire_and_are_purged(h: &Harness) {
        let k = key("acme", "s1");
        let account = h.record(&k, "account", HOUR);
        h.store.upsert(account.clone()).await.unwrap();
        h.store
            .upsert(model_record(h, &k, "short", Duration::from_secs(60)))
            .await
            .unwrap();
        let other = key("acme", "s2");
        let kept = model_record(h, &other, "kept", HOUR);
        h.store.upsert(kept.clone()).await.unwrap();
        h.store
            .upsert(h.record(&other, "short", Duration::from_secs(60)))
            .await
            .unwrap();

        h.clock.advance(Duration::from_secs(61));
        assert_eq!(h.store.get_in(&k, HandoffSlot::Model).await.unwrap(), None);
        assert!(!h.store.contains_in(&k, HandoffSlot::Model).await.unwrap());
        assert!(
            h.store
                .claim_in(&k, HandoffSlot::Model, LEASE)
                .await
                .unwrap()
                .is_none()
        );
        if h.store.backend() != "redis" {
            assert!(!h.store.may_contain_in(&k, HandoffSlot::Model));
        }
        assert_eq!(
            h.store.list(None, None).await.unwrap(),
            vec![account.clone(), kept.clone()]
        );
        assert_eq!(h.store.purge_expired().await.unwrap(), 2);
        assert_eq!(h.store.purge_expired().await.unwrap(), 0);
        assert_eq!(h.store.get(&k).await.unwrap(), Some(account));
        assert_eq!(
            h.store.get_in(&other, HandoffSlot::Model).await.unwrap(),
            Some(kept)
        );
    }

    pub(super) async fn affinity_keeps_the_serving_model(h: &Harness) {
        let k = key("acme", "s1");
        let codex = Affinity::new("codex", "alice").with_model("codex/gpt-5.5");
        h.store.set_affinity(&k, codex.clone()).await.unwrap();
        let read = h.store.affinity(&k).await.unwrap().expect("written");
        assert_eq!(read, codex);
        assert_eq!(read.model(), Some("codex/gpt-5.5"));
        if h.store.backend() != "redis" {
            assert_eq!(h.store.cached_affinity(&k), Some(Some(codex.clone())));
        }
        // The same account serving another model is a change: it is written.
        let claude = Affinity::new("codex", "alice").with_model("codex/gpt-5.5-mini");
        h.store.set_affinity(&k, claude.clone()).await.unwrap();
        assert_eq!(h.store.affinity(&k).await.unwrap(), Some(claude.clone()));
        if h.store.backend() != "redis" {
            assert_eq!(h.store.cached_affinity(&k), Some(Some(claude)));
        }
        // With foreign digests too, and back to no model at all.
        let until = h.now() + Duration::from_secs(60);
        let moved = Affinity::new("anthropic", "bob")
            .with_model("anthropic/claude-sonnet-4-5")
            .with_foreign(ForeignSet::from_digests([4]), until);
        h.store.set_affinity(&k, moved.clone()).await.unwrap();
        assert_eq!(h.store.affinity(&k).await.unwrap(), Some(moved));
        let bare = Affinity::new("anthropic", "bob");
        h.store.set_affinity(&k, bare.clone()).await.unwrap();
        let read = h.store.affinity(&k).await.unwrap().expect("written");
        assert_eq!((read.model(), &read), (None, &bare));
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
    affinity_set_now_is_read_before_its_write_finishes,
    affinity_is_per_combo,
    foreign_digests_are_kept_until_they_expire,
    generation_lease_is_exclusive_when_distributed,
    slots_coexist_and_a_put_never_replaces_the_other,
    consuming_one_slot_never_touches_the_other,
    freshest_picks_the_newer_slot,
    both_slots_expire_and_are_purged,
    affinity_keeps_the_serving_model,
);
