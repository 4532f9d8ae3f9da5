//! Unit tests of the trait's slot defaults and of picking the freshest handoff.

use super::*;
use context_relay_core::{Handoff, HandoffKind};

fn at(ms: u64, kind: HandoffKind) -> HandoffRecord {
    HandoffRecord {
        version: 1,
        kind,
        tenant: "t".into(),
        session: "s".into(),
        combo: "c".into(),
        from_provider: "p".into(),
        from_account: "a".into(),
        handoff: Handoff::default(),
        message_count: 0,
        conversation: None,
        compaction: false,
        model: "m".into(),
        threshold: 0.85,
        generated_at: context_relay_core::time::from_unix_millis(ms),
        expires_at: context_relay_core::time::from_unix_millis(ms + 1),
    }
}

#[test]
fn newer_picks_by_generation_time_and_the_model_slot_on_a_tie() {
    let (a, m) = (
        at(2, HandoffKind::Generated),
        at(1, HandoffKind::ModelSwitch),
    );
    assert_eq!(newer(Some(a.clone()), Some(m.clone())), Some(a.clone()));
    assert_eq!(newer(Some(m.clone()), Some(a.clone())), Some(a.clone()));
    let tie = at(2, HandoffKind::ModelSwitch);
    assert_eq!(newer(Some(a.clone()), Some(tie.clone())), Some(tie));
    assert_eq!(newer(None, Some(m.clone())), Some(m));
    assert_eq!(newer(Some(a.clone()), None), Some(a));
    assert_eq!(newer(None, None), None);
}

/// A store that implements only the required methods: the slot methods default to its
/// account slot and an empty model slot.
struct AccountOnly(MemoryStore);

impl HandoffStore for AccountOnly {
    fn upsert(&self, record: HandoffRecord) -> StoreFuture<'_, ()> {
        self.0.upsert(record)
    }
    fn offer(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        self.0.offer(record)
    }
    fn offer_at_switch(&self, record: HandoffRecord) -> StoreFuture<'_, bool> {
        self.0.offer_at_switch(record)
    }
    fn get<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<HandoffRecord>> {
        self.0.get(key)
    }
    fn contains<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        self.0.contains(key)
    }
    fn may_contain(&self, key: &HandoffKey) -> bool {
        self.0.may_contain(key)
    }
    fn claim<'a>(&'a self, key: &'a HandoffKey, l: Duration) -> StoreFuture<'a, Option<Claim>> {
        self.0.claim(key, l)
    }
    fn complete<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, bool> {
        self.0.complete(claim)
    }
    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        self.0.release(claim)
    }
    fn delete<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, bool> {
        self.0.delete(key)
    }
    fn purge_expired(&self) -> StoreFuture<'_, usize> {
        self.0.purge_expired()
    }
    fn list<'a>(
        &'a self,
        tenant: Option<&'a str>,
        session: Option<&'a str>,
    ) -> StoreFuture<'a, Vec<HandoffRecord>> {
        self.0.list(tenant, session)
    }
    fn affinity<'a>(&'a self, key: &'a HandoffKey) -> StoreFuture<'a, Option<Affinity>> {
        self.0.affinity(key)
    }
    fn cached_affinity(&self, key: &HandoffKey) -> Option<Option<Affinity>> {
        self.0.cached_affinity(key)
    }
    fn set_affinity<'a>(&'a self, key: &'a HandoffKey, a: Affinity) -> StoreFuture<'a, ()> {
        self.0.set_affinity(key, a)
    }
    fn backend(&self) -> &'static str {
        "account-only"
    }
}

#[tokio::test]
async fn the_defaults_serve_the_account_slot_and_hold_no_model_handoff() {
    let store = AccountOnly(MemoryStore::new());
    let mut r = at(0, HandoffKind::Generated);
    r.expires_at = std::time::SystemTime::now() + Duration::from_secs(60);
    let k = r.key();
    store.upsert(r.clone()).await.unwrap();
    let account = HandoffSlot::Account;
    assert_eq!(store.get_in(&k, account).await.unwrap(), Some(r.clone()));
    assert!(store.contains_in(&k, account).await.unwrap());
    assert!(store.may_contain_in(&k, account));
    assert_eq!(store.freshest(&k).await.unwrap(), Some(r.clone()));
    let model = HandoffSlot::Model;
    assert_eq!(store.get_in(&k, model).await.unwrap(), None);
    assert!(!store.contains_in(&k, model).await.unwrap());
    assert!(!store.may_contain_in(&k, model));
    assert!(
        store
            .claim_in(&k, model, Duration::from_secs(1))
            .await
            .unwrap()
            .is_none()
    );
    assert!(!store.delete_in(&k, model).await.unwrap());
    let claim = store
        .claim_in(&k, account, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(claim.map(|c| c.slot()), Some(account));
    assert!(store.delete_in(&k, account).await.unwrap());
}
