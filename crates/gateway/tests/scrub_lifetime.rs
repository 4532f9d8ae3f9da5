//! What a switched session must not send its new account (the old accounts' reasoning items,
//! signed thinking, turn state) is recorded for the handoff TTL after the switch, and lives on
//! while the session still sends it: a session that keeps working on its new account past the
//! TTL is still scrubbed, never refused by the provider and repaired (a repair also drops the
//! new account's own state).

use std::time::Duration;

use context_relay_sim::SimProvider;
use context_relay_testkit::clients::completed;
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::harness::Harness;

/// The handoff TTL of these tests, in seconds.
const TTL: u64 = 4;

async fn the_scrub_outlives_the_ttl_while_the_session_carries_old_state(
    client: Client,
    session: &str,
) {
    let store = format!("backend = \"memory\"\n[relay]\nttl_secs = {TTL}");
    let h = Harness::start(1, &store, SimProvider::builder()).await;
    let [a, b, _] = client.accounts();
    let mut conv = Conversation::new(client, session);
    assert_eq!(conv.turn(&h, 0).await.0, 200);
    h.idle().await;
    h.sim.set_used(a, 100.0);
    let (status, acted, _) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert!(
        acted.as_deref().is_some_and(|a| a.contains("scrubbed")),
        "{acted:?}"
    );
    h.idle().await;
    h.sim.clear_requests();
    // Past half the TTL, then past the whole TTL since the switch.
    for wait in [TTL * 1000 * 5 / 8, TTL * 1000 * 5 / 8] {
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let (status, acted, reply) = conv.turn(&h, 0).await;
        assert_eq!(status, 200);
        assert!(completed(&reply));
        assert_eq!(
            acted.as_deref(),
            Some("scrubbed"),
            "never refused and repaired"
        );
        h.idle().await;
    }
    for r in h.turns() {
        assert_eq!(r.account.as_deref(), Some(b));
        assert_eq!(r.rejected, None);
        assert!(h.owners(&r).iter().all(|o| o.as_deref() == Some(b)));
    }
}

#[tokio::test]
async fn a_codex_session_is_scrubbed_past_the_ttl() {
    the_scrub_outlives_the_ttl_while_the_session_carries_old_state(
        Client::Codex,
        "0199a1b2-0000-7000-8000-0000000000c1",
    )
    .await;
}

#[tokio::test]
async fn a_claude_session_is_scrubbed_past_the_ttl() {
    the_scrub_outlives_the_ttl_while_the_session_carries_old_state(
        Client::Claude,
        "0199a1b2-0000-7000-8000-0000000000c2",
    )
    .await;
}
