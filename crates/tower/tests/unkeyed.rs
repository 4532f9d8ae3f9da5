//! Callers that send no key and name no session can only be told apart by their
//! conversation's opening (every keyless caller is one tenant), so the relay leaves their
//! requests alone: one caller's handoff never reaches another whose conversation opens the
//! same way. A session it names (in a header, or in its body's `prompt_cache_key` or
//! `metadata.user_id`), or a `Tenant` or `SessionId` the application gives, is enough for the
//! relay to act.

mod support;

use http::Request;
use support::{Body, Stack, chat, request};

/// A Chat turn of `user_turns` user messages with no credential, and with `session` in its
/// header when given.
fn unkeyed(session: Option<&str>, user_turns: usize) -> Request<Body> {
    let mut req = chat(session.unwrap_or("-"), "-", user_turns);
    req.headers_mut().remove("authorization");
    if session.is_none() {
        req.headers_mut().remove("x-session-id");
    }
    req
}

#[tokio::test]
async fn keyless_callers_without_a_session_share_nothing() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0);
    // Alice, past the threshold on acct-a: nothing is summarised for her.
    stack.send(unkeyed(None, 3)).await;
    stack.idle().await;
    assert!(stack.upstream.summaries().is_empty());
    // Bob, whose conversation opens as hers did, on acct-b: nothing of hers.
    stack.use_account("acct-b");
    stack.send(unkeyed(None, 2)).await;
    stack.idle().await;
    let turns = stack.upstream.turns();
    assert!(!turns.last().expect("Bob's turn").has_handoff());
    // A keyless caller that names its session is relayed: in a header, or in its body.
    stack.use_account("acct-a");
    stack.send(unkeyed(Some("s-carol"), 3)).await;
    stack.idle().await;
    assert_eq!(stack.upstream.summaries().len(), 1);
    let body = r#"{"model":"gpt-5","prompt_cache_key":"s-dave","messages":[
        {"role":"system","content":"You are a coding agent."},
        {"role":"user","content":"step 0: add the --json flag"}]}"#;
    let mut req = request("/v1/chat/completions", "-", "-", body);
    req.headers_mut().remove("authorization");
    req.headers_mut().remove("x-session-id");
    stack.send(req).await;
    stack.idle().await;
    assert_eq!(stack.upstream.summaries().len(), 2);
}
