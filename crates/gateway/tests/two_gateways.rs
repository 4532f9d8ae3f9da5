//! Two gateways share one store: one Redis, or one Redis Cluster started on loopback. A
//! session served by both in turns carries its handoff across the switch of its account, and
//! the new account never receives state another account minted; a session one gateway moved
//! stays where it moved on the other.

use context_relay_sim::{SimFault, SimProvider};
use context_relay_testkit::clients::{completed, contains};
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::Harness;
use context_relay_testkit::redis_cluster::RedisCluster;
use context_relay_testkit::redis_server::RedisServer;

#[tokio::test]
async fn two_gateways_on_one_redis_alternate_a_session_across_a_switch() {
    let redis = RedisServer::start();
    alternate_a_session_across_a_switch(&format!("backend = \"redis\"\nurl = \"{}\"", redis.url))
        .await;
}

#[tokio::test]
async fn two_gateways_on_a_redis_cluster_alternate_a_session_across_a_switch() {
    let cluster = RedisCluster::start();
    alternate_a_session_across_a_switch(&format!(
        "backend = \"redis\"\ncluster = true\nurl = \"{}\"",
        cluster.url
    ))
    .await;
}

/// Two gateways on the store of `store` (a `[store]` body) serve one session in turns, before
/// and after its account is used up: the handoff one wrote is injected once, by either.
async fn alternate_a_session_across_a_switch(store: &str) {
    let h = Harness::start(2, store, SimProvider::builder()).await;
    let session = format!(
        "0199a1b2-0000-7000-8000-{:012}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros()
            % 1_000_000_000_000
    );
    let mut conv = Conversation::new(Client::Codex, &session);
    // Turns 1–3 alternate between the gateways on acct-a; the handoff lands in Redis.
    for gw in [0, 1, 0] {
        assert_eq!(conv.turn(&h, gw).await.0, 200);
        h.idle().await;
    }
    assert_eq!(h.handoffs(&session).await, 1);
    h.sim.set_used("acct-a", 100.0);
    h.sim.clear_requests();
    // Turns 4–7 alternate too: each gateway learns of acct-a's exhaustion by its own 429.
    for (i, gw) in [1, 0, 1, 0].into_iter().enumerate() {
        let (status, _, reply) = conv.turn(&h, gw).await;
        assert_eq!(status, 200, "gateway {gw}");
        assert!(completed(&reply));
        h.idle().await;
        if i == 0 {
            assert_eq!(h.handoffs(&session).await, 0, "consumed on acct-b");
        }
    }
    let turns = h.turns();
    for r in turns
        .iter()
        .filter(|r| r.account.as_deref() == Some("acct-b"))
    {
        let owners = h.owners(r);
        assert!(
            owners.iter().all(|o| o.as_deref() == Some("acct-b")),
            "a request to acct-b carried state it did not mint: {owners:?}"
        );
        assert_eq!(r.rejected, None);
    }
    // (A gateway that had not seen acct-a's 429 yet tried it first: that attempt was a switch
    // back from acct-b and carried a handoff of its own, refused with the 429.)
    let injected = turns
        .iter()
        .filter(|r| r.account.as_deref() == Some("acct-b") && contains(&r.body, HANDOFF_TAG))
        .count();
    assert_eq!(
        injected, 1,
        "one handoff, injected once across both gateways"
    );
    // acct-b's own state of the earlier turns, served by either gateway, still goes out.
    let last = turns.last().unwrap();
    assert_eq!(last.account.as_deref(), Some("acct-b"));
    let own = h.owners(last);
    assert!(
        own.iter()
            .filter(|o| o.as_deref() == Some("acct-b"))
            .count()
            >= 3,
        "{own:?}"
    );
}

/// One gateway moves a session (a 503 of its account, retried on the next): the other, which
/// bound the session to the first account itself, follows the store's record. Before, its own
/// stale binding sent the next turn back to the first account (a switch, with a handoff), and
/// the first gateway the turn after that to the second again: every turn a switch.
#[tokio::test]
async fn a_session_one_gateway_moved_stays_put_on_the_other() {
    let redis = RedisServer::start();
    let h = Harness::start(
        2,
        &format!("backend = \"redis\"\nurl = \"{}\"", redis.url),
        SimProvider::builder(),
    )
    .await;
    let session = "0199a1b2-0000-7000-8000-0000000000b1";
    let mut conv = Conversation::new(Client::Codex, session);
    for gw in [0, 1] {
        assert_eq!(conv.turn(&h, gw).await.0, 200);
        h.idle().await;
    }
    assert_eq!(h.served(), ["acct-a", "acct-a"]);
    h.sim.fail_next(Some("acct-a"), SimFault::Overloaded);
    h.sim.clear_requests();
    // Gateway 0 retries on acct-b: a switch, one handoff (an extractive one).
    let (_, acted, _) = conv.turn(&h, 0).await;
    assert_eq!(acted.as_deref(), Some("injected, extractive, scrubbed"));
    h.idle().await;
    for gw in [1, 0, 1] {
        let (status, acted, reply) = conv.turn(&h, gw).await;
        assert_eq!(status, 200);
        assert!(completed(&reply));
        assert_eq!(
            acted.as_deref(),
            Some("scrubbed"),
            "gateway {gw}: no switch"
        );
        h.idle().await;
    }
    assert_eq!(
        h.served(),
        ["acct-a", "acct-b", "acct-b", "acct-b", "acct-b"],
        "the 503, then every turn on acct-b"
    );
}
