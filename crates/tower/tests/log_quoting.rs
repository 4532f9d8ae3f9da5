//! Values a client chooses (its session id) are written quoted and escaped in the relay's log
//! lines, so that a session id cannot forge `key=value` fields of its own (a `tenant=` that
//! charges another tenant). Its own test binary (its own process): it installs the global
//! `tracing` subscriber.

mod bound;

use context_relay_testkit::captured::Captured;

use bound::clients::{Codex, Relay, action};

#[tokio::test]
async fn a_session_id_cannot_forge_log_fields() {
    let captured = Captured::install();
    const FORGED: &str = r#"x" tenant="t" account=c}: handoff stored"#;
    let relay = Relay::new();
    let mut codex = Codex::new(FORGED);
    codex.turn(&relay, "a").await;
    relay.upsert_handoff(FORGED, "acct-a").await;
    relay.use_account("acct-b");
    let headers = codex.turn(&relay, "b").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    let logs = captured.text();
    let consumed = logs
        .lines()
        .find(|l| l.contains("handoff consumed"))
        .unwrap_or_else(|| panic!("{logs}"));
    assert!(
        consumed.contains(r#"session="x\" tenant=\"t\" account=c}: handoff stored""#),
        "{consumed}"
    );
    assert!(!logs.contains(r#" tenant="t" account=c"#), "{logs}");
}
