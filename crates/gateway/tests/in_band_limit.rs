//! An account that runs out of quota in the middle of a stream it began with a `200` (the
//! providers end such a stream with a quota error event) waits for its reset as after a 429:
//! the client gets the failed stream as it came, and its retry goes to the next account.

use context_relay_sim::{SimFault, SimProvider};
use context_relay_testkit::clients::completed;
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::harness::{Harness, MEMORY};
use http::Request;
use http_body_util::{BodyExt, Full};

async fn a_quota_failure_in_the_stream_moves_the_next_turn(client: Client, session: &str) {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let [a, b, _] = client.accounts();
    let mut conv = Conversation::new(client, session);
    h.sim.fail_next(Some(a), SimFault::InBandLimit);
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200, "the head went out before the failure");
    assert!(!completed(&reply));
    h.idle().await;
    // The client's retry.
    let (status, _, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert!(completed(&reply));
    assert_eq!(h.served(), [a, b], "the retry goes to the next account");
}

#[tokio::test]
async fn a_responses_stream_failed_for_quota_moves_the_next_turn() {
    a_quota_failure_in_the_stream_moves_the_next_turn(
        Client::Codex,
        "0199a1b2-0000-7000-8000-0000000000d1",
    )
    .await;
}

#[tokio::test]
async fn a_messages_stream_failed_for_quota_moves_the_next_turn() {
    a_quota_failure_in_the_stream_moves_the_next_turn(
        Client::Claude,
        "0199a1b2-0000-7000-8000-0000000000d2",
    )
    .await;
}

/// A Chat stream whose only event is the error body: the same.
#[tokio::test]
async fn a_chat_stream_failed_for_quota_moves_the_next_turn() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    h.sim.fail_next(Some("acct-a"), SimFault::InBandLimit);
    let send = || async {
        let req = Request::post(h.url(0, "/v1/chat/completions"))
            .header("authorization", "Bearer c")
            .header("session-id", "chat-in-band")
            .body(Full::from(
                r#"{"model":"codex-relay","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
            ))
            .unwrap();
        let res = h.client.request(req).await.unwrap();
        assert_eq!(res.status(), 200);
        res.into_body().collect().await.unwrap().to_bytes()
    };
    let failed = send().await;
    assert!(String::from_utf8_lossy(&failed).contains("rate_limit_exceeded"));
    h.idle().await;
    let answered = send().await;
    assert!(String::from_utf8_lossy(&answered).contains("[DONE]"));
    assert_eq!(h.served(), ["acct-a", "acct-b"]);
}
