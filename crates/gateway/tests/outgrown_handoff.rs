//! A handoff the conversation outgrew: written when the account crossed the handoff band,
//! then the account's usage fell back below it (its window reset) and the session worked on
//! for many turns before a jump past the band moved it. The stored handoff tells none of that
//! later work; the switch builds one from the request instead.

use context_relay_sim::SimProvider;
use context_relay_testkit::clients::contains;
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY};

/// The handoff block a request carries.
fn handoff_of(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body).replace("\\n", "\n");
    let start = text.find(HANDOFF_TAG).expect("a handoff");
    let end = text[start..]
        .find("</context_handoff>")
        .map_or(text.len(), |e| start + e);
    text[start..end].to_owned()
}

/// `turns` below the band after the handoff was written, then the jump: the handoff the
/// new account gets is the stored one, or (`rebuilt`) one built from the request.
async fn outgrown_at_the_switch(client: Client, turns: usize, rebuilt: bool) {
    // Each turn uses 30 % of the account.
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let [a, b, _] = client.accounts();
    let session = "outgrown-handoff";
    let mut conv = Conversation::new(client, session);
    // In the band: the account writes its handoff.
    h.sim.set_used(a, 58.0);
    assert_eq!(conv.turn(&h, 0).await.0, 200);
    h.idle().await;
    assert_eq!(h.handoffs(session).await, 1);
    // The window resets; the session works on below the band.
    for _ in 0..turns {
        h.sim.set_used(a, 10.0);
        assert_eq!(conv.turn(&h, 0).await.0, 200);
    }
    h.idle().await;
    // A jump past the band moves the session.
    h.sim.set_used(a, 100.0);
    h.sim.clear_requests();
    let latest = format!("Turn {}: go on with the next step.", conv.turn);
    let (status, acted, _) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    let acted = acted.unwrap_or_default();
    assert!(acted.contains("injected"), "{acted}");
    assert_eq!(acted.contains("extractive"), rebuilt, "{acted}");
    let turns = h.turns();
    let to_b: Vec<_> = turns
        .iter()
        .filter(|r| r.account.as_deref() == Some(b))
        .collect();
    assert_eq!(to_b.len(), 1);
    assert!(to_b[0].rejected.is_none());
    let handoff = handoff_of(&to_b[0].body);
    assert_eq!(
        handoff.contains(&latest),
        rebuilt,
        "the latest ask ({latest}):\n{handoff}"
    );
    assert_eq!(
        turns
            .iter()
            .filter(|r| contains(&r.body, HANDOFF_TAG))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_handoff_the_conversation_outgrew_is_rebuilt_at_the_switch() {
    outgrown_at_the_switch(Client::Codex, 25, true).await;
}

/// Between one and two refreshes' worth of entries behind (what the refresh gate alone would
/// already call stale): the model's handoff is still carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_a_few_turns_behind_is_carried() {
    outgrown_at_the_switch(Client::Codex, 8, false).await;
    outgrown_at_the_switch(Client::Claude, 11, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_handoff_the_conversation_outgrew_is_rebuilt_at_the_switch() {
    outgrown_at_the_switch(Client::Claude, 25, true).await;
}
