//! What only the redis backend has to show: replicas share claims and generation leases, and
//! an unreachable or vanished Redis gives errors within the timeout, never a hang.
#![cfg(feature = "redis")]

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{record, unique_prefix};
use context_relay_core::HandoffKey;
use context_relay_store::{
    Affinity, DEFAULT_REDIS_REQUEST_TIMEOUT, DEFAULT_REDIS_TIMEOUT, HandoffStore, RedisStore,
    StoreError,
};
use context_relay_testkit::redis_server::RedisServer;

const HOUR: Duration = Duration::from_secs(3600);
/// Far above the store's own timeout: only a hang would reach it.
const HANG: Duration = Duration::from_secs(30);

async fn replicas(url: &str, n: usize) -> Vec<Arc<dyn HandoffStore>> {
    let prefix = unique_prefix();
    let mut out: Vec<Arc<dyn HandoffStore>> = Vec::new();
    for _ in 0..n {
        let s = RedisStore::builder(url)
            .prefix(prefix.clone())
            .request_timeout(DEFAULT_REDIS_TIMEOUT)
            .connect()
            .await
            .unwrap();
        out.push(Arc::new(s));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_records_claims_and_generation_leases() {
    let server = RedisServer::start();
    let stores = replicas(&server.url, 4).await;
    let k = HandoffKey::new("acme", "s1", "combo");
    stores[0]
        .upsert(record(&k, "shared", SystemTime::now(), HOUR))
        .await
        .unwrap();
    assert!(stores[3].contains(&k).await.unwrap());

    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = Arc::clone(&stores[i % stores.len()]);
            let k = k.clone();
            tokio::spawn(async move { store.claim(&k, HOUR).await.unwrap() })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap().is_some());
    }
    assert_eq!(winners, 1);

    let lease = stores[1].begin_generation(&k, HOUR).await.unwrap().unwrap();
    assert!(lease.is_distributed());
    assert!(
        stores[2]
            .begin_generation(&k, HOUR)
            .await
            .unwrap()
            .is_none()
    );
    stores[1].end_generation(&lease).await.unwrap();
    assert!(
        stores[2]
            .begin_generation(&k, HOUR)
            .await
            .unwrap()
            .is_some()
    );

    // Affinity written by one replica is read by another (its cache had nothing).
    stores[0]
        .set_affinity(&k, Affinity::new("codex", "bob"))
        .await
        .unwrap();
    assert_eq!(stores[3].cached_affinity(&k), None);
    let seen = stores[3].affinity(&k).await.unwrap().unwrap();
    assert_eq!(&**seen.account().account(), "bob");
    // A replica never decides on its cached view: after another replica moved the session,
    // the first one sees the move at once.
    stores[3]
        .set_affinity(&k, Affinity::new("codex", "carol"))
        .await
        .unwrap();
    assert_eq!(stores[0].cached_affinity(&k), None);
    let seen = stores[0].affinity(&k).await.unwrap().unwrap();
    assert_eq!(&**seen.account().account(), "carol");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_keep_deployments_apart() {
    let server = RedisServer::start();
    let a = replicas(&server.url, 1).await.remove(0);
    let b = replicas(&server.url, 1).await.remove(0);
    let k = HandoffKey::new("acme", "s1", "combo");
    a.upsert(record(&k, "a's", SystemTime::now(), HOUR))
        .await
        .unwrap();
    assert!(!b.contains(&k).await.unwrap());
    assert!(b.list(None, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn unreachable_redis_fails_within_the_timeout() {
    let connect = RedisStore::builder("redis://127.0.0.1:1/")
        .timeout(Duration::from_millis(500))
        .connect();
    let err = tokio::time::timeout(HANG, connect)
        .await
        .expect("connect must not hang")
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Redis { op: "connect", .. } | StoreError::Timeout { op: "connect", .. }
        ),
        "{err}"
    );
}

/// A server that wants a password the URL does not give answers every command `NOAUTH`: the
/// store refuses to open, as for a wrong password, rather than run with every call failing.
#[tokio::test]
async fn a_password_the_url_lacks_fails_at_connect() {
    let (port, mut child) = context_relay_testkit::redis_server::spawn_on_free_port(|port| {
        [
            "--port",
            port,
            "--requirepass",
            "s3cret",
            "--user",
            "relay",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-ping",
        ]
        .map(str::to_owned)
        .to_vec()
    });
    let url = format!("redis://127.0.0.1:{port}/");
    let err = RedisStore::builder(&url).connect().await.map(|_| ());
    let with = RedisStore::builder(format!("redis://:s3cret@127.0.0.1:{port}/"))
        .connect()
        .await
        .map(|_| ());
    // A user whose ACL leaves PING out is authenticated all the same.
    let limited = RedisStore::builder(format!("redis://relay:pw@127.0.0.1:{port}/"))
        .connect()
        .await
        .map(|_| ());
    let _ = child.kill();
    let _ = child.wait();
    assert!(limited.is_ok(), "{limited:?}");
    let err = err.unwrap_err();
    assert!(
        matches!(err, StoreError::Redis { op: "connect", .. })
            && err.to_string().contains("NOAUTH"),
        "{err}"
    );
    assert!(with.is_ok(), "{with:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_redis_fails_every_call_within_the_timeout() {
    let mut server = RedisServer::start_own();
    let store = RedisStore::builder(server.url.clone())
        .prefix(unique_prefix())
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let k = HandoffKey::new("acme", "s1", "combo");
    store
        .upsert(record(&k, "x", SystemTime::now(), HOUR))
        .await
        .unwrap();
    server.kill();
    let get = tokio::time::timeout(HANG, store.get(&k))
        .await
        .expect("get must not hang");
    assert!(get.is_err());
    let claim = tokio::time::timeout(HANG, store.claim(&k, HOUR))
        .await
        .expect("claim must not hang");
    assert!(claim.is_err());
    let up = tokio::time::timeout(HANG, store.upsert(record(&k, "y", SystemTime::now(), HOUR)))
        .await
        .expect("upsert must not hang");
    assert!(up.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_record_is_skipped_not_fatal() {
    let server = RedisServer::start();
    let prefix = unique_prefix();
    let store = RedisStore::builder(server.url.clone())
        .prefix(prefix.clone())
        .connect()
        .await
        .unwrap();
    let k = HandoffKey::new("acme", "s1", "combo");
    store
        .upsert(record(&k, "x", SystemTime::now(), HOUR))
        .await
        .unwrap();
    // Overwrite the stored JSON behind the store's back.
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let hkey = format!("{prefix}h:4.2.5:acmes1combo");
    let () = redis::cmd("HSET")
        .arg(&hkey)
        .arg("rec")
        .arg("{not json")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(store.get(&k).await.unwrap(), None);
    assert!(store.claim(&k, HOUR).await.unwrap().is_none());
    assert!(store.list(None, None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_gives_up_on_the_request_path_after_the_short_default() {
    let server = RedisServer::start_own();
    let store = RedisStore::builder(server.url.clone())
        .prefix(unique_prefix())
        .connect()
        .await
        .unwrap();
    let k = HandoffKey::new("acme", "s1", "combo");
    store
        .upsert(record(&k, "x", SystemTime::now(), HOUR))
        .await
        .unwrap();
    // The server stops answering for a second, well under the off-path timeout.
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = tokio::time::timeout(HANG, store.get(&k))
        .await
        .expect("get must not hang")
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Timeout { op: "get", after } if after == DEFAULT_REDIS_REQUEST_TIMEOUT
        ),
        "{err}"
    );
    assert!(DEFAULT_REDIS_REQUEST_TIMEOUT <= Duration::from_millis(50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_affinity_written_without_a_model_loads_without_one() {
    let server = RedisServer::start();
    let prefix = unique_prefix();
    let store = RedisStore::builder(server.url.clone())
        .prefix(prefix.clone())
        .connect()
        .await
        .unwrap();
    // The hash as the code before model-switch handoffs wrote it: `p`, `a`, `f`, no `m`.
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let akey = format!("{prefix}ac:4:2:acmes1combo");
    let () = redis::cmd("HSET")
        .arg(&akey)
        .arg("p")
        .arg("codex")
        .arg("a")
        .arg("acct-A")
        .arg("f")
        .arg(r#"{"foreign":[5],"until":0}"#)
        .query_async(&mut conn)
        .await
        .unwrap();
    let k = HandoffKey::new("acme", "s1", "combo");
    let a = store.affinity(&k).await.unwrap().expect("loaded");
    assert!(a.is("codex", "acct-A"));
    assert_eq!(a.model(), None);
    assert_eq!(a.foreign.digests(), [5]);
    // Recording the model adds the field; forgetting it removes it again.
    let with = a.clone().with_model("codex/gpt-5.5");
    store.set_affinity(&k, with.clone()).await.unwrap();
    let m: Option<String> = redis::cmd("HGET")
        .arg(&akey)
        .arg("m")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(m.as_deref(), Some("codex/gpt-5.5"));
    assert_eq!(store.affinity(&k).await.unwrap(), Some(with));
    store.set_affinity(&k, a.clone()).await.unwrap();
    let m: Option<String> = redis::cmd("HGET")
        .arg(&akey)
        .arg("m")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(m, None);
    assert_eq!(store.affinity(&k).await.unwrap(), Some(a));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_switch_handoff_has_its_own_key() {
    let server = RedisServer::start();
    let prefix = unique_prefix();
    let store = RedisStore::builder(server.url.clone())
        .prefix(prefix.clone())
        .connect()
        .await
        .unwrap();
    let k = HandoffKey::new("acme", "s1", "combo");
    let mut model = record(&k, "m", SystemTime::now(), HOUR);
    model.kind = context_relay_core::HandoffKind::ModelSwitch;
    store.upsert(model.clone()).await.unwrap();
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let exists = |key: String| redis::cmd("EXISTS").arg(key).to_owned();
    let n: i64 = exists(format!("{prefix}hm:4.2.5:acmes1combo"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 1);
    let n: i64 = exists(format!("{prefix}h:4.2.5:acmes1combo"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 0);
    // A record of the wrong kind moved under the model key is skipped, not served as one.
    let account = record(&k, "a", SystemTime::now(), HOUR);
    let () = redis::cmd("HSET")
        .arg(format!("{prefix}hm:4.2.5:acmes1combo"))
        .arg("rec")
        .arg(serde_json::to_string(&account).unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    let slot = context_relay_core::HandoffSlot::Model;
    assert_eq!(store.get_in(&k, slot).await.unwrap(), None);
    assert!(store.list(None, None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offer_at_a_switch_has_the_request_paths_limit_and_waits_for_no_replica() {
    let server = RedisServer::start_own();
    // Every handoff write waits for a replica this server does not have, for a minute.
    let store = RedisStore::builder(server.url.clone())
        .prefix(unique_prefix())
        .wait_for_replicas(1, Duration::from_secs(60))
        .connect()
        .await
        .unwrap();
    let k = HandoffKey::new("acme", "s1", "combo");
    let offered = tokio::time::timeout(
        HANG,
        store.offer_at_switch(record(&k, "x", SystemTime::now(), HOUR)),
    )
    .await
    .expect("an offer at a switch waits for no replica");
    assert!(offered.unwrap());
    let claim = store.claim(&k, HOUR).await.unwrap().expect("offered");
    assert!(store.complete(&claim).await.unwrap());

    // Writes stall for a second: the offer gives up after the request path's limit.
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = store
        .offer_at_switch(record(&k, "y", SystemTime::now(), HOUR))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Timeout { op: "offer_at_switch", after } if after == DEFAULT_REDIS_REQUEST_TIMEOUT
        ),
        "{err}"
    );
}
