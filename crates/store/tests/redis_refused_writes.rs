//! A Redis that answers reads but refuses writes (`maxmemory` with `noeviction`): the replica
//! whose affinity write failed keeps its own decision while Redis still holds the old value,
//! and gives it up as soon as Redis holds anything else.
#![cfg(feature = "redis")]

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::unique_prefix;
use context_relay_core::HandoffKey;
use context_relay_core::portable::ForeignSet;
use context_relay_store::{Affinity, DEFAULT_REDIS_TIMEOUT, HandoffStore, RedisStore};
use context_relay_testkit::redis_server::RedisServer;

/// A server of our own, two replicas on it (the first trusting its cached affinities for
/// `cache_ttl`), and a session the first one has put on acct-A.
async fn on_acct_a(cache_ttl: Duration) -> (RedisServer, RedisStore, RedisStore, HandoffKey) {
    let server = RedisServer::start_own();
    let prefix = unique_prefix();
    let replica = |ttl| {
        RedisStore::builder(server.url.clone())
            .prefix(prefix.clone())
            // Semantics, not latency: a busy test machine must not time calls out.
            .request_timeout(DEFAULT_REDIS_TIMEOUT)
            .affinity_cache_ttl(ttl)
            .connect()
    };
    let one = replica(cache_ttl).await.unwrap();
    let other = replica(Duration::ZERO).await.unwrap();
    let k = HandoffKey::new("acme", "s1", "combo");
    let a = Affinity::new("codex", "acct-A");
    one.set_affinity(&k, a.clone()).await.unwrap();
    assert_eq!(other.affinity(&k).await.unwrap(), Some(a));
    (server, one, other, k)
}

/// Makes the server refuse every write (`maxmemory` 1 under `noeviction`), or accept them.
fn refuse_writes(server: &RedisServer, refuse: bool) {
    server.config_set("maxmemory-policy", "noeviction");
    server.config_set("maxmemory", if refuse { "1" } else { "0" });
}

fn switched(to: &str, from: &str) -> Affinity {
    let until = SystemTime::now() + Duration::from_secs(3600);
    Affinity::new("codex", to)
        .with_foreign(ForeignSet::from_digests([7, 9]), until)
        .with_previous(context_relay_core::ResolvedAccount::new("codex", from))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_affinity_write_does_not_make_every_later_request_a_switch() {
    let (server, one, other, k) = on_acct_a(Duration::ZERO).await;
    let a = Affinity::new("codex", "acct-A");
    let one = Arc::new(one);

    // The session moves to B while Redis refuses writes: the write fails, and this replica
    // still sees B on every later read (before, Redis's A came back and every request was a
    // switch to B again, each with a handoff).
    refuse_writes(&server, true);
    let b = switched("acct-B", "acct-A");
    Arc::clone(&one)
        .set_affinity_now(k.clone(), b.clone())
        .await
        .expect_err("Redis refuses writes");
    for _ in 0..3 {
        assert_eq!(one.affinity(&k).await.unwrap(), Some(b.clone()));
        one.set_affinity(&k, b.clone())
            .await
            .expect_err("still refused");
    }
    // Another replica sees what Redis holds, as it would have anyway.
    assert_eq!(other.affinity(&k).await.unwrap(), Some(a.clone()));

    // Writes come back: the next write of the unwritten affinity lands, though it is the same
    // value this replica already reads.
    refuse_writes(&server, false);
    one.set_affinity(&k, b.clone()).await.unwrap();
    let in_redis = other.affinity(&k).await.unwrap().expect("written");
    assert!(in_redis.serves(b.account()));
    assert_eq!(in_redis.foreign, b.foreign);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritten_affinity_gives_way_to_what_another_replica_wrote() {
    let (server, one, other, k) = on_acct_a(Duration::ZERO).await;
    refuse_writes(&server, true);
    let b = switched("acct-B", "acct-A");
    one.set_affinity(&k, b.clone()).await.expect_err("refused");
    assert_eq!(one.affinity(&k).await.unwrap(), Some(b));

    // Writes come back and the session moves on elsewhere: Redis's value wins from then on.
    refuse_writes(&server, false);
    let c = switched("acct-C", "acct-B");
    other.set_affinity(&k, c.clone()).await.unwrap();
    for _ in 0..2 {
        let read = one.affinity(&k).await.unwrap().expect("C");
        assert!(read.serves(c.account()), "{read:?}");
    }

    // A session with nothing in Redis: an unwritten first affinity is kept too, and a session
    // Redis knows nothing of stays unknown.
    let fresh = HandoffKey::new("acme", "s2", "combo");
    refuse_writes(&server, true);
    let d = Affinity::new("codex", "acct-D");
    one.set_affinity(&fresh, d.clone())
        .await
        .expect_err("refused");
    assert_eq!(one.affinity(&fresh).await.unwrap(), Some(d));
    assert_eq!(other.affinity(&fresh).await.unwrap(), None);
    let unknown = HandoffKey::new("acme", "s3", "combo");
    assert_eq!(one.affinity(&unknown).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritten_affinity_is_written_again_though_the_cache_holds_it_fresh() {
    // The replica trusts its cached affinities for a minute.
    let (server, one, other, k) = on_acct_a(Duration::from_secs(60)).await;
    refuse_writes(&server, true);
    let b = switched("acct-B", "acct-A");
    one.set_affinity(&k, b.clone()).await.expect_err("refused");
    refuse_writes(&server, false);
    one.set_affinity(&k, b.clone()).await.unwrap();
    let in_redis = other.affinity(&k).await.unwrap().expect("written");
    assert!(in_redis.serves(b.account()), "{in_redis:?}");
}
