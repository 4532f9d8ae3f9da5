//! 2 000 idle connections against a gateway with `max_connections = 100`: the limit holds
//! (the open-connections gauge never passes it, the rest are closed at once), the idle ones are
//! closed at the header timeout, and `/healthz` answers. Its own test binary because it reads
//! the global metrics recorder.

use std::time::{Duration, Instant};

use context_relay_gateway::Gateway;
use context_relay_gateway::config::Config;
use context_relay_gateway::prometheus_builder;
use context_relay_testkit::harness::{http_client, spawn};
use http::Request;
use http_body_util::Full;
use tokio::net::TcpStream;

const MAX: usize = 100;
const FLOOD: usize = 2000;

fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_take_the_gateway() {
    let handle = prometheus_builder().install_recorder().unwrap();
    let config = Config::from_toml_str(
        &format!(
            r#"
[store]
backend = "memory"
[limits]
max_connections = {MAX}
client_header_timeout_secs = 1
[[providers]]
name = "p"
base_url = "http://127.0.0.1:9/v1"
  [[providers.accounts]]
  id = "a"
  api_key = "k"
"#
        ),
        |_| None,
    )
    .unwrap();
    // No provider behind it: the flood never gets past the connection limit.
    let (_gateway, server) = spawn(Gateway::new(config).unwrap()).await;

    let started = Instant::now();
    let mut idle = Vec::with_capacity(FLOOD);
    let mut peak = 0.0f64;
    for i in 0..FLOOD {
        idle.push(TcpStream::connect(server.addr()).await.unwrap());
        if i % 100 == 0 {
            peak = peak.max(metric(
                &handle.render(),
                "context_relay_gateway_connections",
            ));
        }
    }
    // Every connection beyond the limit is closed as soon as the gateway has seen it. (The
    // deadlines only bound a failing run: a loaded CI machine takes seconds to accept 2 000.)
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = handle.render();
        peak = peak.max(metric(&page, "context_relay_gateway_connections"));
        let rejected = metric(&page, "context_relay_gateway_connections_rejected_total");
        if rejected >= (FLOOD - MAX) as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {rejected} connections rejected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(peak <= MAX as f64, "{peak} connections open at once");

    // The idle connections that were taken are closed at the header timeout; /healthz answers
    // on a fresh connection (a client retries a connection closed at the limit).
    let client = http_client();
    let healthy_at = loop {
        let req = Request::get(format!("{}/healthz", server.url()))
            .body(Full::default())
            .unwrap();
        if let Ok(Ok(res)) = tokio::time::timeout(Duration::from_secs(2), client.request(req)).await
            && res.status() == 200
        {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "/healthz never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(peak <= MAX as f64);
    drop(idle);
    eprintln!("healthz answered {healthy_at:?} after the flood began");
    server.shutdown().await.unwrap();
}
