//! `/metrics` shows the relay counters once the relay acted. This file is its own test binary
//! (its own process) because it installs the global Prometheus recorder.

use bytes::Bytes;
use context_relay_gateway::Gateway;
use context_relay_sim::SimProvider;
use context_relay_testkit::handoff::SUMMARY_NEEDLE;
use context_relay_testkit::harness::{CodexGateway, Harness, start_sim};
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::json;

#[tokio::test]
async fn relay_counters_appear_on_metrics() {
    let handle = context_relay_gateway::prometheus_builder()
        .install_recorder()
        .unwrap();
    let sim = start_sim(
        SimProvider::builder().quota_step(30.0).summary_reply(
            SUMMARY_NEEDLE,
            json!({"summary": "Renaming the crate.", "keyDecisions": [], "taskProgress": "",
                       "activeEntities": []})
            .to_string(),
        ),
        &["acct-a", "acct-b"],
    )
    .await;
    let config = CodexGateway::default().config(&sim.base_url());
    let gateway = Gateway::new(config).unwrap().with_metrics(handle);
    let h = Harness::serve(sim, gateway).await;
    let (sim, client) = (&h.sim, &h.client);
    let get_metrics = || async {
        let req = Request::get(h.url(0, "/metrics"))
            .body(Full::<Bytes>::default())
            .unwrap();
        let res = client.request(req).await.unwrap();
        assert_eq!(res.status(), 200);
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    };
    let first = get_metrics().await;
    assert!(!first.contains("context_relay_injected_total"));
    // The first request of a connection sees it counted as admitted, not as pending.
    assert!(
        first.contains("context_relay_gateway_connections 1\n")
            && first.contains("context_relay_gateway_connections_pending 0\n"),
        "{first}"
    );

    // A stream counts as in flight for as long as it streams, not only until its head (the
    // request for `/metrics` counts itself).
    let hold = sim.hold_streams();
    let req = Request::post(h.url(0, "/v1/responses"))
        .header("authorization", "Bearer c")
        .header("session-id", "streaming")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","stream":true,"input":"x"}"#,
        )))
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    assert!(body.frame().await.is_some(), "the first event arrived");
    let page = get_metrics().await;
    assert!(
        page.contains("context_relay_gateway_requests_in_flight 2\n"),
        "{page}"
    );
    hold.release();
    body.collect().await.unwrap();
    let page = get_metrics().await;
    assert!(
        page.contains("context_relay_gateway_requests_in_flight 1\n"),
        "{page}"
    );
    // The conversation below starts from an unused account.
    sim.set_used("acct-a", 0.0);

    // One conversation: every turn resends the history, as chat clients do.
    let send = |turn: usize| {
        let mut messages = Vec::new();
        for t in 1..=turn {
            messages.push(json!({"role": "user", "content": format!("turn {t}")}));
            if t < turn {
                messages.push(json!({"role": "assistant", "content": "ok"}));
            }
        }
        let req = Request::post(h.url(0, "/v1/chat/completions"))
            .header("authorization", "Bearer c")
            .header("session-id", "m1")
            .body(Full::new(Bytes::from(
                json!({"model": "codex-relay", "messages": messages}).to_string(),
            )))
            .unwrap();
        let client = client.clone();
        async move {
            let res = client.request(req).await.unwrap();
            assert_eq!(res.status(), 200);
            res.into_body().collect().await.unwrap();
        }
    };
    for t in 1..=3 {
        send(t).await;
    }
    h.idle().await;
    sim.set_used("acct-a", 100.0);
    send(4).await;
    h.idle().await;

    let page = get_metrics().await;
    for name in [
        "context_relay_generations_total",
        "context_relay_injected_total",
        "context_relay_consumed_total",
        "context_relay_switches_total",
        "context_relay_gateway_retries_total",
        "context_relay_gateway_requests_in_flight",
    ] {
        assert!(page.contains(name), "{name} missing from\n{page}");
    }
    assert!(page.contains("outcome=\"generated\""), "{page}");
    // An account switch: the relay counters say which kind of handoff.
    for series in [
        "context_relay_injected_total{kind=\"account\"} 1",
        "context_relay_switches_total{kind=\"account\"} 1",
        "context_relay_generations_total{outcome=\"generated\",kind=\"account\"}",
    ] {
        assert!(page.contains(series), "{series} missing from\n{page}");
    }
    // Histograms with their explicit buckets and labels.
    assert!(
        page.contains(
            "context_relay_gateway_request_seconds_bucket{route=\"/v1/chat/completions\",status=\"200\",le=\"0.005\"}"
        ),
        "{page}"
    );
    assert!(
        page.contains("context_relay_gateway_upstream_first_byte_seconds_bucket{provider=\"codex\",le=\"300\"}"),
        "{page}"
    );
    assert!(
        page.contains(
            "context_relay_gateway_request_seconds_count{route=\"/metrics\",status=\"200\"}"
        ),
        "{page}"
    );

    // A revoked key is counted; with acct-a still exhausted nothing is left: a 502 of the
    // gateway, not the provider's 401.
    sim.revoke("acct-b");
    let req = Request::post(h.url(0, "/v1/chat/completions"))
        .header("authorization", "Bearer c")
        .header("session-id", "m1")
        .body(Full::new(Bytes::from(
            json!({"model": "codex-relay", "messages": [{"role": "user", "content": "turn 5"}]})
                .to_string(),
        )))
        .unwrap();
    assert_eq!(client.request(req).await.unwrap().status(), 502);
    let page = get_metrics().await;
    assert!(
        page.contains("context_relay_gateway_account_refused_total{provider=\"codex\",account=\"acct-b\",status=\"401\"} 1"),
        "{page}"
    );
}
