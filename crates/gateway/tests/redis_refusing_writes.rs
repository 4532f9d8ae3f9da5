//! A Redis that answers reads but refuses writes (`maxmemory` with `noeviction`) while a
//! session changes account: the turns after the switch are not switches again, each with a
//! handoff, and the new account never receives the old one's state. Once Redis takes writes
//! again, it learns the session's account, and another replica serves the session there.

use context_relay_sim::SimProvider;
use context_relay_testkit::clients::{completed, contains};
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::Harness;
use context_relay_testkit::redis_server::RedisServer;

const SESSION: &str = "0199a1b2-0000-7000-8000-00000000ref1";

#[tokio::test]
async fn turns_after_a_switch_on_a_redis_refusing_writes_carry_no_more_handoffs() {
    let redis = RedisServer::start_own();
    let store = format!("backend = \"redis\"\nurl = \"{}\"", redis.url);
    let h = Harness::start(2, &store, SimProvider::builder()).await;
    let mut conv = Conversation::new(Client::Codex, SESSION);
    for _ in 0..3 {
        assert_eq!(conv.turn(&h, 0).await.0, 200);
        h.idle().await;
    }
    assert_eq!(h.handoffs(SESSION).await, 1);

    // Redis fills up: reads go on, every write is refused from now on.
    redis.config_set("maxmemory-policy", "noeviction");
    redis.config_set("maxmemory", "1");
    h.sim.set_used("acct-a", 100.0);
    h.sim.clear_requests();
    // (Three turns in all on acct-b, each using 30 % of its quota: it stays available.)
    for _ in 0..2 {
        let (status, _, reply) = conv.turn(&h, 0).await;
        assert_eq!(status, 200);
        assert!(completed(&reply));
        h.idle().await;
    }
    let turns = h.turns();
    let on_b: Vec<_> = turns
        .iter()
        .filter(|r| r.account.as_deref() == Some("acct-b"))
        .collect();
    assert!(on_b.len() >= 2, "{} turns on acct-b", on_b.len());
    for r in &on_b {
        let owners = h.owners(r);
        assert!(
            owners.iter().all(|o| o.as_deref() == Some("acct-b")),
            "a request to acct-b carried state it did not mint: {owners:?}"
        );
        assert_eq!(r.rejected, None);
    }
    let injected = on_b
        .iter()
        .filter(|r| contains(&r.body, HANDOFF_TAG))
        .count();
    assert_eq!(
        injected, 1,
        "the handoff was injected into {injected} turns after one switch"
    );

    // Writes come back. The session's next turn on this replica writes its account (the
    // engine writes an affinity only when it changes: the store writes what it kept), and the
    // other replica, which reads Redis, serves the session on acct-b straight away.
    redis.config_set("maxmemory", "0");
    assert_eq!(conv.turn(&h, 0).await.0, 200);
    h.idle().await;
    h.sim.clear_requests();
    let (status, _, reply) = conv.turn(&h, 1).await;
    assert_eq!(status, 200);
    assert!(completed(&reply));
    let sent: Vec<_> = h
        .turns()
        .into_iter()
        .map(|r| (r.account, contains(&r.body, HANDOFF_TAG)))
        .collect();
    assert_eq!(sent, [(Some("acct-b".to_owned()), false)], "{sent:?}");
}
