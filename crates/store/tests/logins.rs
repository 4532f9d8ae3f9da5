//! One suite, every backend: subscription logins (compare-and-set of the stored pair, one
//! winner among concurrent writers, the refresh lock), plus what only the durable and the shared
//! backends promise (a redb login survives a reopen; Redis replicas share one login and one lock).

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Harness;
use context_relay_store::HandoffStore;

const LOCK: Duration = Duration::from_secs(30);

mod cases {
    use super::*;

    pub(super) async fn login_compare_and_set(h: &Harness) {
        let s = &h.store;
        assert_eq!(s.login("codex/a").await.unwrap(), None);
        assert_eq!(s.put_login("codex/a", 3, b"x").await.unwrap(), None);
        let v1 = s.put_login("codex/a", 0, b"pair-1").await.unwrap().unwrap();
        assert_eq!(v1, 1);
        assert_eq!(s.put_login("codex/a", 0, b"pair-x").await.unwrap(), None);
        let v2 = s
            .put_login("codex/a", v1, b"pair-2")
            .await
            .unwrap()
            .unwrap();
        assert!(v2 > v1);
        let stored = s.login("codex/a").await.unwrap().unwrap();
        assert_eq!((stored.version, stored.data), (v2, b"pair-2".to_vec()));
        // Logins are apart from each other and from handoffs.
        assert_eq!(s.login("codex/b").await.unwrap(), None);
        assert!(s.list(None, None).await.unwrap().is_empty());
        assert_eq!(s.purge_expired().await.unwrap(), 0);
        assert!(
            s.login("codex/a").await.unwrap().is_some(),
            "purge keeps logins"
        );
        // Bytes of any value, empty included.
        let v3 = s
            .put_login("codex/a", v2, &[0, 255, 10])
            .await
            .unwrap()
            .unwrap();
        let v4 = s.put_login("codex/a", v3, b"").await.unwrap().unwrap();
        let stored = s.login("codex/a").await.unwrap().unwrap();
        assert_eq!((stored.version, stored.data), (v4, Vec::new()));
    }

    pub(super) async fn concurrent_writers_of_one_version_have_one_winner(h: &Harness) {
        let v = h
            .store
            .put_login("claude/x", 0, b"first")
            .await
            .unwrap()
            .unwrap();
        let tasks: Vec<_> = (0..50)
            .map(|i| {
                let store = Arc::clone(&h.store);
                tokio::spawn(async move {
                    let data = format!("pair-{i}");
                    store
                        .put_login("claude/x", v, data.as_bytes())
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut winners = 0;
        for t in tasks {
            winners += usize::from(t.await.unwrap().is_some());
        }
        assert_eq!(winners, 1);
        let stored = h.store.login("claude/x").await.unwrap().unwrap();
        assert_eq!(stored.version, v + 1);
        assert!(stored.data.starts_with(b"pair-"));
    }

    pub(super) async fn refresh_lock_is_exclusive_when_distributed(h: &Harness) {
        let lock = h.store.lock_login("codex/a", LOCK).await.unwrap().unwrap();
        assert_eq!(lock.name(), "codex/a");
        let second = h.store.lock_login("codex/a", LOCK).await.unwrap();
        if lock.is_distributed() {
            assert!(second.is_none(), "another holder is turned away");
            let other = h.store.lock_login("codex/b", LOCK).await.unwrap();
            assert!(other.is_some(), "one lock per login");
        } else {
            assert!(second.is_some(), "the process serialises its own refreshes");
        }
        h.store.unlock_login(&lock).await.unwrap();
        let again = h.store.lock_login("codex/a", LOCK).await.unwrap();
        assert!(again.is_some());
        if let Some(again) = again {
            // The first holder's late unlock does not free the lock of the second.
            h.store.unlock_login(&lock).await.unwrap();
            if again.is_distributed() {
                assert!(h.store.lock_login("codex/a", LOCK).await.unwrap().is_none());
            }
            h.store.unlock_login(&again).await.unwrap();
        }
    }

    pub(super) async fn stored_logins_never_print_their_bytes(h: &Harness) {
        h.store
            .put_login("codex/a", 0, b"rt-secret-1")
            .await
            .unwrap();
        let stored = h.store.login("codex/a").await.unwrap().unwrap();
        let shown = format!("{stored:?}");
        assert!(!shown.contains("rt-secret"), "{shown}");
        assert!(shown.contains("11 bytes"), "{shown}");
    }
}

conformance!(
    login_compare_and_set,
    concurrent_writers_of_one_version_have_one_winner,
    refresh_lock_is_exclusive_when_distributed,
    stored_logins_never_print_their_bytes,
);

/// The pair a gateway wrote before it was stopped is the one it reads after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_logins_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.redb");
    {
        let store = context_relay_store::RedbStore::open(&path).unwrap();
        let v = store
            .put_login("codex/a", 0, b"pair-1")
            .await
            .unwrap()
            .unwrap();
        store
            .put_login("codex/a", v, b"pair-2")
            .await
            .unwrap()
            .unwrap();
    }
    let store = context_relay_store::RedbStore::open(&path).unwrap();
    let stored = store.login("codex/a").await.unwrap().unwrap();
    assert_eq!((stored.version, stored.data), (2, b"pair-2".to_vec()));
}

/// Two replicas on one Redis: what one writes the other reads, and only one may refresh.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_replicas_share_one_login_and_one_lock() {
    let server = context_relay_testkit::redis_server::RedisServer::start();
    let prefix = common::unique_prefix();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let store = context_relay_store::RedisStore::builder(server.url.clone())
            .prefix(prefix.clone())
            .connect()
            .await
            .unwrap();
        replicas.push(store);
    }
    let (a, b) = (&replicas[0], &replicas[1]);
    let lock = a.lock_login("codex/a", LOCK).await.unwrap().unwrap();
    assert!(b.lock_login("codex/a", LOCK).await.unwrap().is_none());
    let v = a.put_login("codex/a", 0, b"pair-1").await.unwrap().unwrap();
    a.unlock_login(&lock).await.unwrap();
    assert_eq!(b.login("codex/a").await.unwrap().unwrap().version, v);
    assert_eq!(b.put_login("codex/a", 0, b"stale").await.unwrap(), None);
    assert!(b.lock_login("codex/a", LOCK).await.unwrap().is_some());
}
