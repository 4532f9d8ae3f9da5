//! A Redis Cluster master killed mid-run and its replica promoted: calls keep answering within
//! their timeout (an error or the breaker's refusal, never a hang), writes resume once the
//! replica is a master, and the test reports how many handoffs acknowledged in the last
//! second before the kill are still there (Redis replicates asynchronously: some may not be).
#![cfg(feature = "redis")]

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::{record, unique_prefix};
use context_relay_core::HandoffKey;
use context_relay_store::{HandoffStore, RedisStore, StoreError};
use context_relay_testkit::redis_cluster::RedisCluster;

const HOUR: Duration = Duration::from_secs(3600);
/// The store's limit on every call here.
const TIMEOUT: Duration = Duration::from_millis(300);
/// Longest a failover may take: the cluster notices a dead master after its node timeout
/// (1 s in the helper) and then elects the replica.
const FAILOVER: Duration = Duration::from_secs(20);

fn key(i: usize) -> HandoffKey {
    HandoffKey::new("acme", format!("s{i}"), "codex-relay")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_mid_run_is_replaced_by_its_replica_and_writes_resume() {
    let mut cluster = RedisCluster::start_with(3, 1);
    let store = RedisStore::builder(cluster.url.clone())
        .cluster(true)
        .prefix(unique_prefix())
        .timeout(TIMEOUT)
        .request_timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();

    // Writes for a little over a second, each acknowledged one remembered with its time.
    let mut acked: Vec<(usize, Instant)> = Vec::new();
    let mut i = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1200) {
        store
            .upsert(record(&key(i), "before", SystemTime::now(), HOUR))
            .await
            .unwrap();
        acked.push((i, Instant::now()));
        i += 1;
    }
    // The first master redis-cli made, killed at once, writes still arriving.
    let killed_at = Instant::now();
    cluster.kill(cluster.ports[0]);

    // Writes go on until the promoted replica takes them: a write that fails (its key is in a
    // slot of the killed master) is tried again until it passes. No call outlives its timeout.
    let (mut failed, mut slowest) = (0usize, Duration::ZERO);
    let resumed = loop {
        assert!(
            killed_at.elapsed() < FAILOVER,
            "writes never resumed after the failover ({failed} failed)"
        );
        let t = Instant::now();
        let result = store
            .upsert(record(&key(i), "during", SystemTime::now(), HOUR))
            .await;
        slowest = slowest.max(t.elapsed());
        match result {
            Ok(()) => {
                acked.push((i, Instant::now()));
                i += 1;
                if failed > 0 {
                    break killed_at.elapsed();
                }
            }
            Err(e) => {
                failed += 1;
                // The breaker says when it lets a call through again: no spinning until then.
                if let StoreError::Unavailable { retry_in, .. } = e {
                    tokio::time::sleep(retry_in).await;
                }
            }
        }
    };
    assert!(failed > 0, "the kill never reached the store");
    assert!(
        slowest < TIMEOUT + Duration::from_millis(500),
        "a call took {slowest:?} against a timeout of {TIMEOUT:?}"
    );

    // What was acknowledged: all of it outside the last second before the kill, and that
    // second counted.
    let (mut last_second, mut survived, mut other_lost) = (0, 0, 0);
    for (k, at) in &acked {
        let found = store.get(&key(*k)).await.unwrap().is_some();
        if *at + Duration::from_secs(1) >= killed_at && *at <= killed_at {
            last_second += 1;
            survived += usize::from(found);
        } else if !found {
            other_lost += 1;
        }
    }
    eprintln!(
        "failover: writes resumed {resumed:?} after the kill ({failed} writes failed or refused meanwhile, \
         slowest call {slowest:?}); of {last_second} handoffs acknowledged in the last second \
         before the kill, {survived} survived"
    );
    assert!(last_second > 0);
    assert_eq!(
        other_lost, 0,
        "handoffs acknowledged long before the kill were lost"
    );
}
