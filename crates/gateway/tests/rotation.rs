//! Account rotation beyond 429 through a real gateway and the strict simulated provider: a
//! quota body in another status, a revoked key, a provider failure before any byte, and the
//! handoff reaching the next account at once when the account that took the switch fails.

use context_relay_sim::{SimFault, SimProvider};
use context_relay_testkit::clients::{completed, contains};
use context_relay_testkit::conversation::{Client, Conversation, handoff_ready};
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY};
use http::StatusCode;
use serde_json::{Value, json};

/// How the second account fails the attempt that carries the handoff.
#[derive(Clone, Copy, Debug)]
enum BFails {
    Quota,
    Revoked,
    ServerError,
}

/// B fails the first attempt after the switch; C, tried right after within the same request,
/// must get the handoff (B's claim was released before the resolver moved on).
async fn b_fails_and_c_gets_the_handoff(fails: BFails) {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let session = "0199a1b2-0000-7000-8000-000000000004";
    let mut conv = Conversation::new(Client::Codex, session);
    handoff_ready(&h, &mut conv, session).await;
    match fails {
        BFails::Quota => h.sim.set_used("acct-b", 100.0),
        BFails::Revoked => h.sim.revoke("acct-b"),
        BFails::ServerError => h.sim.fail_next(
            Some("acct-b"),
            SimFault::Status(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": {"message": "The server is overloaded.", "type": "server_error",
                                 "param": null, "code": null}}),
            ),
        ),
    }
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200, "{fails:?}");
    assert!(completed(&reply));
    let turns = h.turns();
    let accounts = h.served();
    assert_eq!(accounts, ["acct-a", "acct-b", "acct-c"], "{fails:?}");
    // B was offered the handoff and failed; C, tried right after, got it too.
    assert!(contains(&turns[1].body, HANDOFF_TAG));
    assert!(contains(&turns[2].body, HANDOFF_TAG), "{fails:?}");
    assert!(h.owners(&turns[2]).is_empty(), "C gets none of A's state");
    h.idle().await;
    assert_eq!(h.handoffs(session).await, 0);
}

#[tokio::test]
async fn a_429_on_b_hands_the_handoff_to_c_at_once() {
    b_fails_and_c_gets_the_handoff(BFails::Quota).await;
}

#[tokio::test]
async fn a_401_on_b_hands_the_handoff_to_c_at_once() {
    b_fails_and_c_gets_the_handoff(BFails::Revoked).await;
}

#[tokio::test]
async fn a_503_on_b_hands_the_handoff_to_c_at_once() {
    b_fails_and_c_gets_the_handoff(BFails::ServerError).await;
}

#[tokio::test]
async fn a_revoked_account_is_rotated_away() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    h.sim.revoke("acct-a");
    let mut conv = Conversation::new(Client::Codex, "0199a1b2-0000-7000-8000-000000000005");
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert!(completed(&reply));
    let accounts = h.served();
    assert_eq!(accounts, ["acct-a", "acct-b"]);
    assert_eq!(h.account(0, "acct-a").await["state"], "disabled");
    // The disabled account is skipped: another session goes straight to acct-b.
    h.sim.clear_requests();
    let mut other = Conversation::new(Client::Codex, "0199a1b2-0000-7000-8000-000000000006");
    assert_eq!(other.turn(&h, 0).await.0, 200);
    let accounts = h.served();
    assert_eq!(accounts, ["acct-b"]);
}

#[tokio::test]
async fn a_server_error_before_any_byte_is_retried_once_on_the_next_account() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    h.sim.fail_next(
        Some("acct-x"),
        SimFault::Status(StatusCode::from_u16(529).unwrap(), overloaded.clone()),
    );
    let mut conv = Conversation::new(Client::Claude, "0199a1b2-0000-7000-8000-000000000007");
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert!(completed(&reply));
    let accounts = h.served();
    assert_eq!(accounts, ["acct-x", "acct-y"]);
    // Once only: two failures in a row reach the client, body intact.
    h.sim.clear_requests();
    for account in ["acct-x", "acct-y"] {
        h.sim.fail_next(
            Some(account),
            SimFault::Status(StatusCode::from_u16(529).unwrap(), overloaded.clone()),
        );
    }
    let mut other = Conversation::new(Client::Claude, "0199a1b2-0000-7000-8000-000000000008");
    let (status, _, reply) = other.turn(&h, 0).await;
    assert_eq!(status.as_u16(), 529);
    assert_eq!(serde_json::from_slice::<Value>(&reply).unwrap(), overloaded);
    assert_eq!(h.turns().len(), 2);
}

#[tokio::test]
async fn a_quota_error_in_another_status_rotates_the_account() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let limit = json!({"error": {"type": "usage_limit_reached",
                                 "message": "The usage limit has been reached",
                                 "plan_type": "plus", "resets_in_seconds": 1800}});
    h.sim.fail_next(
        Some("acct-a"),
        SimFault::Status(StatusCode::BAD_REQUEST, limit),
    );
    let mut conv = Conversation::new(Client::Codex, "0199a1b2-0000-7000-8000-000000000009");
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert!(completed(&reply));
    let accounts = h.served();
    assert_eq!(accounts, ["acct-a", "acct-b"]);
    let a = h.account(0, "acct-a").await;
    assert_eq!(a["state"], "exhausted");
    let until: jiff::Timestamp = a["resets_at"].as_str().unwrap().parse().unwrap();
    assert!(
        until.as_second() - jiff::Timestamp::now().as_second() > 1700,
        "until its announced reset"
    );
}

#[tokio::test]
async fn a_connection_error_is_retried_once_on_the_next_account() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let mut conv = Conversation::asking(
        Client::Codex,
        "0199a1b2-0000-7000-8000-00000000000c",
        "fallback-relay",
    );
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert!(completed(&reply));
    // The unreachable provider never saw the request; the next target's account served it.
    assert_eq!(h.served(), ["acct-a"]);
}
