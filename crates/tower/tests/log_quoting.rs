//! Values a client chooses (its session id) are written quoted and escaped in the relay's log
//! lines, so that a session id cannot forge `key=value` fields of its own (a `tenant=` that
//! charges another tenant). Its own test binary (its own process): it installs the global
//! `tracing` subscriber.

mod bound;

use std::sync::{Arc, Mutex};

use bound::clients::{Codex, Relay, action};

/// Where the subscriber writes: the test reads it back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_session_id_cannot_forge_log_fields() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();
    const FORGED: &str = r#"x" tenant="t" account=c}: handoff stored"#;
    let relay = Relay::new();
    let mut codex = Codex::new(FORGED);
    codex.turn(&relay, "a").await;
    relay.upsert_handoff(FORGED, "acct-a").await;
    relay.use_account("acct-b");
    let headers = codex.turn(&relay, "b").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
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
