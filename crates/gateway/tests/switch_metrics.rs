//! `context_relay_switches_total` and `context_relay_injected_total` count the switches that
//! happened: a request whose attempts were refused on the way (a used-up account, an
//! overloaded one) and that completed on a third counts one switch and one injection, as the
//! handoff it consumed counts one. Its own test binary: it installs the global recorder.

use context_relay_gateway::{Gateway, prometheus_builder};
use context_relay_sim::{SimFault, SimProvider};
use context_relay_testkit::harness::{CodexGateway, Harness, start_sim};
use serde_json::json;

fn counter(page: &str, series: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_switch_through_refused_attempts_counts_once() {
    let recorder = prometheus_builder()
        .install_recorder()
        .expect("one recorder");
    let sim = start_sim(SimProvider::builder(), &["acct-a", "acct-b", "acct-c"]).await;
    let config = CodexGateway {
        accounts: &["acct-a", "acct-b", "acct-c"],
        ..CodexGateway::default()
    }
    .config(&sim.base_url());
    let gateway = Gateway::new(config)
        .expect("gateway")
        .with_metrics(recorder.clone());
    let h = Harness::serve(sim, gateway).await;
    let headers = [
        ("authorization".to_owned(), "Bearer client".to_owned()),
        ("session-id".to_owned(), "counted".to_owned()),
    ];
    let body = |n: usize| {
        let mut messages = vec![json!({"role": "user", "content": "rename the crate"})];
        for _ in 1..n {
            messages.push(json!({"role": "assistant", "content": "done a step"}));
            messages.push(json!({"role": "user", "content": "go on"}));
        }
        json!({"model": "codex-relay", "messages": messages})
    };
    let (status, _, _) = h.send(0, "/v1/chat/completions", &headers, &body(1)).await;
    assert_eq!(status, 200);
    h.idle().await;

    // acct-a is used up and acct-b overloaded: the turn ends on acct-c.
    h.sim.set_used("acct-a", 100.0);
    h.sim.fail_next(Some("acct-b"), SimFault::Overloaded);
    let (status, acted, _) = h.send(0, "/v1/chat/completions", &headers, &body(2)).await;
    assert_eq!(status, 200);
    assert!(acted.is_some_and(|a| a.contains("injected")));
    h.idle().await;
    assert_eq!(h.served(), ["acct-a", "acct-a", "acct-b", "acct-c"]);

    let page = recorder.render();
    let switches = counter(&page, "context_relay_switches_total{kind=\"account\"}");
    let injected = counter(&page, "context_relay_injected_total{kind=\"account\"}");
    let consumed = counter(&page, "context_relay_consumed_total");
    assert_eq!((switches, injected, consumed), (1, 1, 1), "{page}");
}
