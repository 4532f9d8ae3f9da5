//! Redis stopped mid-run: requests keep passing through with little added latency (the store's
//! short request-path timeout and circuit breaker), `/readyz` stays 200 and says the store is
//! degraded (Redis is shared by every replica: a 503 would take them all out of their
//! balancer), and everything recovers once Redis is back on the same port.
#![cfg(feature = "redis")]

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_gateway::Gateway;
use context_relay_sim::SimProvider;
use context_relay_testkit::binary::signal;
use context_relay_testkit::harness::{CodexGateway, Harness, start_sim};
use context_relay_testkit::redis_server::spawn_ready;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

/// A redis-server of our own (this test stops it), killed on drop.
struct Redis(Child);

impl Redis {
    fn start(port: u16) -> Self {
        Self(spawn_ready(
            port,
            &["--port", &port.to_string(), "--bind", "127.0.0.1"],
        ))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        // A frozen server must be woken to die promptly.
        let _ = Command::new("kill")
            .arg("-CONT")
            .arg(self.0.id().to_string())
            .status();
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

async fn wait_ready(client: &Client<HttpConnector, Full<Bytes>>, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while readyz(client, url).await != (200, "ready".to_owned()) {
        assert!(
            Instant::now() < deadline,
            "the gateway never saw redis again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn turn(client: &Client<HttpConnector, Full<Bytes>>, url: &str, n: usize) -> Duration {
    turn_in(client, url, n, "outage-1").await
}

async fn turn_in(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
    n: usize,
    session: &str,
) -> Duration {
    let body = serde_json::json!({"model": "codex-relay",
        "messages": [{"role": "user", "content": format!("turn {n}")}]});
    let req = Request::post(format!("{url}/v1/chat/completions"))
        .header("authorization", "Bearer c")
        .header("session-id", session)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let started = Instant::now();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    res.into_body().collect().await.unwrap();
    started.elapsed()
}

/// The status of `/readyz` and the `status` of its body.
async fn readyz(client: &Client<HttpConnector, Full<Bytes>>, url: &str) -> (u16, String) {
    let req = Request::get(format!("{url}/readyz"))
        .body(Full::default())
        .unwrap();
    let res = client.request(req).await.unwrap();
    let status = res.status().as_u16();
    let body: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    (
        status,
        body["status"].as_str().unwrap_or_default().to_owned(),
    )
}

fn degraded() -> (u16, String) {
    (200, "degraded".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_pass_through_while_redis_is_down_and_recover() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let redis = Redis::start(port);
    let sim = start_sim(SimProvider::builder().quota_step(1.0), &["acct-a"]).await;
    let store = format!(
        "backend = \"redis\"\nurl = \"redis://127.0.0.1:{port}/\"\nprefix = \"outage-test:\""
    );
    let config = CodexGateway {
        accounts: &["acct-a"],
        store: &store,
        ..CodexGateway::default()
    }
    .config(&sim.base_url());
    let gateway = Gateway::connect(config).await.unwrap();
    let h = Harness::serve(sim, gateway).await;
    let url = h.url(0, "");
    let client = h.client.clone();

    let mut up = Vec::new();
    for n in 0..10 {
        up.push(turn(&client, &url, n).await);
    }
    assert_eq!(readyz(&client, &url).await, (200, "ready".to_owned()));

    drop(redis);
    let mut down = Vec::new();
    for n in 10..30 {
        down.push(turn(&client, &url, n).await);
    }
    let (up_median, down_median) = (median(up.clone()), median(down.clone()));
    let worst = down.iter().max().copied().unwrap_or_default();
    eprintln!("median with redis {up_median:?}, without {down_median:?}; worst without {worst:?}");
    // At most one short request-path timeout (40 ms) per request while the breaker learns;
    // the store's own 2 s timeout never shows.
    assert!(
        down_median <= up_median + Duration::from_millis(50),
        "median {down_median:?} without redis vs {up_median:?} with it"
    );
    assert!(worst < Duration::from_secs(1), "worst {worst:?}");
    assert_eq!(readyz(&client, &url).await, degraded());

    // Back on the same port: the breaker's next trial finds it and the store is used again.
    let redis = Redis::start(port);
    wait_ready(&client, &url).await;
    turn(&client, &url, 30).await;

    // Frozen rather than stopped (SIGSTOP): connections stay open and nothing answers, so
    // only the short request-path timeout and the breaker bound the wait.
    signal(&redis.0, "-STOP");
    let mut frozen = Vec::new();
    for n in 31..51 {
        frozen.push(turn(&client, &url, n).await);
    }
    let frozen_median = median(frozen.clone());
    let worst = frozen.iter().max().copied().unwrap_or_default();
    eprintln!("frozen redis: median {frozen_median:?}, worst {worst:?}");
    assert!(
        frozen_median <= up_median + Duration::from_millis(50),
        "median {frozen_median:?} with redis frozen vs {up_median:?}"
    );
    assert!(worst < Duration::from_secs(1), "worst {worst:?}");
    assert_eq!(readyz(&client, &url).await, degraded());
    signal(&redis.0, "-CONT");
    wait_ready(&client, &url).await;
    let probe = context_relay_core::HandoffKey::new("t", "s", "c");
    assert!(h.gateways[0].0.store().contains(&probe).await.is_ok());

    // Generation pauses while Redis is down: a turn past the handoff threshold costs one
    // upstream call, not two (no summary that could not be stored).
    let generating_turn = |session: &'static str| {
        let (client, url, h) = (&client, &url, &h);
        async move {
            h.sim.set_used("acct-a", 90.0);
            let before = h.sim.requests().len();
            turn_in(client, url, 60, session).await;
            h.idle().await;
            h.sim.requests().len() - before
        }
    };
    drop(redis);
    assert_eq!(
        generating_turn("gen-down").await,
        1,
        "no summary while redis is down"
    );
    let _redis = Redis::start(port);
    wait_ready(&client, &url).await;
    assert_eq!(
        generating_turn("gen-up").await,
        2,
        "the turn and its summary"
    );
    h.shutdown().await;
}
