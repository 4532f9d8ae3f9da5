//! `context_relay_generations_total{outcome}` tells every outcome apart. Its own test binary
//! (its own process): it installs the global metrics recorder.

mod support;

use http::StatusCode;
use support::{Stack, chat};

#[tokio::test]
async fn every_outcome_has_its_label() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("recorder");
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    let ok = support::Script::default().summary_content;
    // A session with a model handoff, then a refresh 20+ messages later that goes wrong in
    // `how`: the outcome is that failure itself (the key still has a handoff).
    let cases: [(&str, StatusCode, &str); 3] = [
        ("s-rejected", StatusCode::FORBIDDEN, "x"),
        ("s-unavailable", StatusCode::SERVICE_UNAVAILABLE, "x"),
        ("s-unparseable", StatusCode::OK, "not a handoff"),
    ];
    for (session, status, content) in cases {
        stack.upstream.with(|s| {
            s.summary_status = StatusCode::OK;
            s.summary_content = ok.clone();
        });
        stack.send(chat(session, "k1", 3)).await;
        stack.idle().await;
        stack.upstream.with(|s| {
            s.summary_status = status;
            s.summary_content = content.to_owned();
        });
        stack.send(chat(session, "k1", 14)).await;
        stack.idle().await;
    }
    // A session whose first summary fails keeps its own words instead.
    stack
        .upstream
        .with(|s| s.summary_status = StatusCode::FORBIDDEN);
    stack.send(chat("s-extractive", "k1", 3)).await;
    stack.idle().await;

    let text = handle.render();
    for (outcome, count) in [
        ("generated", 3),
        ("rejected", 1),
        ("unavailable", 1),
        ("unparseable", 1),
        ("extractive", 1),
    ] {
        let line = format!(
            "context_relay_generations_total{{outcome=\"{outcome}\",kind=\"account\"}} {count}"
        );
        assert!(text.contains(&line), "{line} missing in\n{text}");
    }
}
