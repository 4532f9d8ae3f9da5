//! A gateway on a Redis Cluster whose master is killed mid-run: every request keeps passing
//! (the store's calls fail within their timeout, then its breaker skips Redis) while the
//! cluster promotes the master's replica.

use std::time::{Duration, Instant};

use context_relay_sim::SimProvider;
use context_relay_testkit::clients::completed;
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::harness::Harness;
use context_relay_testkit::redis_cluster::RedisCluster;

/// Longer than a failover on loopback (the master is found dead after the cluster's 1 s node
/// timeout, then its replica is elected): requests run through all of it.
const RUN: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_keep_passing_while_a_cluster_master_fails_over() {
    let mut cluster = RedisCluster::start_with(3, 1);
    let store = format!(
        "backend = \"redis\"\ncluster = true\nurl = \"{}\"",
        cluster.url
    );
    let h = Harness::start(1, &store, SimProvider::builder()).await;
    // Each turn uses some quota: given back before each, so the accounts outlast the run.
    let refill = || {
        for id in Client::Codex.accounts() {
            h.sim.set_used(id, 0.0);
        }
    };
    let mut n = 0u64;
    let mut session = || {
        n += 1;
        format!("0199a1b2-0000-7000-8000-{n:012}")
    };
    for _ in 0..6 {
        refill();
        let mut conv = Conversation::new(Client::Codex, &session());
        assert_eq!(conv.turn(&h, 0).await.0, 200);
    }

    cluster.kill(cluster.ports[0]);
    let killed_at = Instant::now();
    let (mut turns, mut slowest) = (0, Duration::ZERO);
    while killed_at.elapsed() < RUN {
        refill();
        let mut conv = Conversation::new(Client::Codex, &session());
        let t = Instant::now();
        let (status, _, reply) = conv.turn(&h, 0).await;
        slowest = slowest.max(t.elapsed());
        assert_eq!(status, 200, "turn {turns} after the kill");
        assert!(completed(&reply));
        turns += 1;
    }
    eprintln!("failover: {turns} turns passed in {RUN:?} after the kill; slowest {slowest:?}");
    assert!(turns > 0);
}
