//! Exactly one handoff per switch when the switch races with something: a second request of
//! the conversation going out at the same moment, or a summary that is done only after the
//! session has moved. Real gateway on loopback, real client, the strict simulated provider.

use std::time::Duration;

use context_relay_sim::SimProvider;
use context_relay_testkit::clients::{completed, contains};
use context_relay_testkit::conversation::{Client, Conversation, handoff_ready};
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY};

/// How many of the requests the second account received carry a handoff; every one of them
/// free of the first account's state.
fn handoffs_to(h: &Harness, account: &str) -> usize {
    let to: Vec<_> = h
        .turns()
        .into_iter()
        .filter(|r| r.account.as_deref() == Some(account))
        .collect();
    for r in &to {
        assert!(r.rejected.is_none(), "{:?}", r.rejected);
        assert!(h.owners(r).iter().all(|o| o.as_deref() == Some(account)));
    }
    to.iter().filter(|r| contains(&r.body, HANDOFF_TAG)).count()
}

/// Waits until `account` has received `n` turns. (The first request may try the used-up
/// account first and be refused there: only a turn on the new account has made its choice.)
async fn received(h: &Harness, account: &str, n: usize) {
    let on = || {
        h.turns()
            .iter()
            .filter(|r| r.account.as_deref() == Some(account))
            .count()
    };
    for _ in 0..500 {
        if on() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{account} received {} turns, not {n}", on());
}

/// The switching turn sent twice (a client's retry, parallel calls): the second goes out while
/// the first is streaming with the stored handoff. It carries none, and none is built for it.
async fn a_second_request_at_the_switch_carries_none(client: Client) {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let session = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a60";
    let mut conv = Conversation::new(client, session);
    handoff_ready(&h, &mut conv, session).await;
    let b = client.accounts()[1];
    let hold = h.sim.hold_streams();
    let first = h.send(0, client.path(), &conv.headers, &conv.body);
    let second = async {
        received(&h, b, 1).await;
        h.send(0, client.path(), &conv.headers, &conv.body).await
    };
    let release = async {
        received(&h, b, 2).await;
        drop(hold);
    };
    let ((s1, acted1, r1), (s2, acted2, r2), ()) = tokio::join!(first, second, release);
    assert_eq!((s1.as_u16(), s2.as_u16()), (200, 200));
    assert!(completed(&r1) && completed(&r2));
    assert_eq!(acted1.as_deref(), Some("injected, scrubbed"));
    assert_eq!(acted2.as_deref(), Some("scrubbed"), "{acted2:?}");
    assert_eq!(handoffs_to(&h, b), 1);
    h.idle().await;
    assert_eq!(h.handoffs(session).await, 0, "nothing left to inject later");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_codex_request_at_the_switch_carries_none() {
    a_second_request_at_the_switch_carries_none(Client::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_claude_request_at_the_switch_carries_none() {
    a_second_request_at_the_switch_carries_none(Client::Claude).await;
}

/// Turn 3 takes the first account into the band and starts a summary that the model takes
/// long to write; the account is used up at once and turn 4 switches with a handoff built
/// there. The summary, done after the switch, is not stored: turn 5 carries none.
async fn a_summary_done_after_the_switch_is_dropped(client: Client) {
    // Long enough for turn 4 to go out and finish first, even on a loaded machine.
    let sim = SimProvider::builder().summary_delay(Duration::from_secs(2));
    let h = Harness::start(1, MEMORY, sim).await;
    let session = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a61";
    let mut conv = Conversation::new(client, session);
    let [a, b, _] = client.accounts();
    for _ in 1..=3 {
        assert_eq!(conv.turn(&h, 0).await.0, 200);
    }
    h.sim.set_used(a, 100.0);
    let (status, acted, _) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert_eq!(acted.as_deref(), Some("injected, extractive, scrubbed"));
    h.idle().await;
    assert!(
        h.sim.requests().iter().any(|r| r.summary),
        "the summary was written"
    );
    assert_eq!(h.handoffs(session).await, 0, "and dropped");
    let (status, acted, _) = conv.turn(&h, 0).await;
    // Scrubbed (the scrub lasts), no handoff.
    assert_eq!((status.as_u16(), acted.as_deref()), (200, Some("scrubbed")));
    assert_eq!(handoffs_to(&h, b), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_summary_done_after_the_switch_is_dropped() {
    a_summary_done_after_the_switch_is_dropped(Client::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_summary_done_after_the_switch_is_dropped() {
    a_summary_done_after_the_switch_is_dropped(Client::Claude).await;
}
