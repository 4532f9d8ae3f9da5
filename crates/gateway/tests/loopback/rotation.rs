//! Accounts rotated on their quota headers and on a 429, and the answer when every account
//! is spent.

use super::*;

#[tokio::test]
async fn rotation_when_the_quota_header_crosses_rotate_at() {
    let env = setup_with(SimProvider::builder().quota_step(50.0)).await;
    for _ in 0..3 {
        let (status, _) = env
            .post(
                "/v1/responses",
                Some("s"),
                r#"{"model":"codex-relay","input":"x"}"#,
            )
            .await;
        assert_eq!(status, 200);
    }
    // 50 %, then 100 % ≥ rotate_at: the third turn moves without ever seeing a 429.
    assert_eq!(env.upstream_accounts(), ["acct-a", "acct-a", "acct-b"]);
    let (a, b) = (
        env.account(0, "acct-a").await,
        env.account(0, "acct-b").await,
    );
    assert_eq!(a["used_ratio"], 1.0);
    assert_eq!(a["state"], "exhausted");
    assert_eq!(b["used_ratio"], 0.5);
}

#[tokio::test]
async fn anthropic_quota_headers_rotate_too() {
    let env = setup_with(
        SimProvider::builder()
            .quota_step(100.0)
            .quota_headers(SimQuotaHeaders::Anthropic),
    )
    .await;
    let body = r#"{"model":"codex-relay","input":"x"}"#;
    assert_eq!(env.post("/v1/responses", Some("s"), body).await.0, 200);
    assert_eq!(env.post("/v1/responses", Some("s"), body).await.0, 200);
    assert_eq!(env.upstream_accounts(), ["acct-a", "acct-b"]);
}

#[tokio::test]
async fn a_429_is_retried_on_the_next_account_transparently() {
    let env = setup().await;
    env.sim.set_used("acct-a", 100.0);
    let (status, body) = env.post("/v1/chat/completions", Some("s"), CHAT).await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Reply 1 from account acct-b."
    );
    let reqs = env.sim.requests();
    assert_eq!(env.upstream_accounts(), ["acct-a", "acct-b"]);
    // The same request, byte for byte, with the other account's key.
    assert_eq!(reqs[0].body, reqs[1].body);
    assert_eq!(reqs[1].headers["authorization"], "Bearer key-b");
}

#[tokio::test]
async fn all_accounts_exhausted_gives_429() {
    let env = setup().await;
    env.sim.set_used("acct-a", 100.0);
    env.sim.set_used("acct-b", 100.0);
    let (status, body) = env
        .post(
            "/v1/responses",
            Some("s"),
            r#"{"model":"codex-relay","input":"x"}"#,
        )
        .await;
    assert_eq!(status, 429);
    assert!(
        std::str::from_utf8(&body)
            .unwrap()
            .contains("usage_limit_reached")
    );
    assert_eq!(env.upstream_accounts(), ["acct-a", "acct-b"]);
    // Known exhausted: the gateway answers without calling the provider.
    let req = Request::post(env.url("/v1/responses"))
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","input":"x"}"#,
        )))
        .unwrap();
    let res = env.send(req).await;
    assert_eq!(res.status(), 429);
    let after: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(after > 60, "the sim announced a reset in 1 h, got {after}");
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("codex"));
    assert_eq!(env.sim.requests().len(), 2);
}

/// A large turn sent with a session header, as agent clients send one (read by the gateway in
/// several chunks and forwarded in them), goes to the provider byte for byte but for its
/// `model`, on the first account and on the one a 429 moves it to.
#[tokio::test]
async fn a_large_turn_with_a_session_header_is_retried_byte_for_byte() {
    let env = setup().await;
    env.sim.set_used("acct-a", 100.0);
    let history = "line of tool output, 48 bytes of it, repeated.\n".repeat(12_000);
    let input = serde_json::to_string(&history).unwrap();
    let tail = format!(r#","input":{input},"stream":false}}"#);
    let body = format!(r#"{{"model":"codex-relay"{tail}"#);
    let (status, _) = env.post("/v1/responses", Some("s-large"), &body).await;
    assert_eq!(status, 200);
    assert_eq!(env.upstream_accounts(), ["acct-a", "acct-b"]);
    let reqs = env.sim.requests();
    assert_eq!(reqs[0].body, reqs[1].body);
    let sent = std::str::from_utf8(&reqs[1].body).unwrap();
    assert!(sent.starts_with(r#"{"model":""#), "{}", &sent[..40]);
    assert!(!sent.starts_with(r#"{"model":"codex-relay""#));
    assert!(sent.ends_with(&tail), "every byte after `model` as sent");
    assert_eq!(sent.len() - tail.len(), sent.find(',').unwrap());
}
