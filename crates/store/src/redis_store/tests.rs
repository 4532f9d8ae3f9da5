use super::scripts::glob_escape;

#[test]
fn glob_metacharacters_are_escaped() {
    assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    assert_eq!(glob_escape("context-relay:"), "context-relay:");
}

/// The write-back of a kept affinity is conditional: it lands only over what the replica
/// expects Redis holds, never over a newer write (another request of the session, another
/// replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_affinity_write_lands_only_over_what_it_expects() {
    use crate::{Affinity, HandoffStore};
    use context_relay_core::HandoffKey;

    let server = context_relay_testkit::redis_server::RedisServer::start();
    let store = super::RedisStore::builder(server.url.clone())
        .prefix(format!("cas-{}:", std::process::id()))
        .request_timeout(super::DEFAULT_TIMEOUT)
        .connect()
        .await
        .unwrap();
    let k = HandoffKey::new("acme", "s1", "combo");
    let (a, b, c) = (
        Affinity::new("codex", "acct-a"),
        Affinity::new("codex", "acct-b"),
        Affinity::new("codex", "acct-c"),
    );
    // Nothing there: only a write expecting nothing lands.
    assert!(
        !store
            .write_affinity_if(&k, &b, Some(Some(&a)))
            .await
            .unwrap()
    );
    assert!(store.write_affinity_if(&k, &a, Some(None)).await.unwrap());
    // A there: a write expecting C does not land, one expecting A does.
    assert!(
        !store
            .write_affinity_if(&k, &b, Some(Some(&c)))
            .await
            .unwrap()
    );
    assert!(!store.write_affinity_if(&k, &b, Some(None)).await.unwrap());
    assert_eq!(store.affinity(&k).await.unwrap(), Some(a.clone()));
    assert!(
        store
            .write_affinity_if(&k, &b, Some(Some(&a)))
            .await
            .unwrap()
    );
    assert_eq!(store.affinity(&k).await.unwrap(), Some(b));
}
