//! Pooled subscription logins end to end: two Codex (ChatGPT plan) logins and two Claude
//! (Pro/Max) logins behind a real gateway, a real HTTP client, and the strict simulated issuer
//! and backends (rotating single-use refresh tokens, expiring access tokens, the Codex
//! backend's account header and request rules, Claude's OAuth beta and identity).

use std::sync::Arc;

use context_relay_testkit::clients::{completed, contains, json_headers};
use context_relay_testkit::conversation::Client;
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY};
use context_relay_testkit::logins::Logins;
use context_relay_testkit::redis_server::RedisServer;
use futures_util::future::join_all;
use serde_json::Value;

/// A session on two logins crosses the quota switch with its handoff, while the first login's
/// access token expires mid-session (refreshed once on the backend's 401, the turn sent again).
async fn crosses_the_switch_while_a_token_expires(client: Client) {
    let l = Logins::new(client);
    let [a, b] = l.accounts();
    let h = l.start(l.sim(), None, MEMORY).await;
    let session = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
    let mut conv = l.conversation(session);

    assert_eq!(conv.turn(&h, 0).await.0, 200);
    let before = l.refresh_token(a);
    h.sim.expire_access(a);
    let (status, acted, reply) = conv.turn(&h, 0).await;
    assert_eq!((status, acted), (http::StatusCode::OK, None));
    assert!(completed(&reply));
    assert_eq!(h.sim.refreshes(a), 1, "refreshed once on the 401");
    let expired: Vec<_> = h
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.rejected.as_deref() == Some("token_expired"))
        .collect();
    assert_eq!(
        expired.len(),
        1,
        "the turn was sent again with the new token"
    );
    assert_ne!(
        l.refresh_token(a),
        before,
        "the rotated pair is in the file"
    );

    // Turn 3 takes the login to 90 %: the summary call (to the same strict backend) writes the
    // handoff.
    assert_eq!(conv.turn(&h, 0).await.0, 200);
    h.idle().await;
    assert_eq!(h.handoffs(session).await, 1);
    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert!(!summaries.is_empty());
    assert!(
        summaries.iter().all(|r| r.rejected.is_none()),
        "the summary request met the backend's rules: {:?}",
        summaries.iter().map(|r| &r.rejected).collect::<Vec<_>>()
    );

    // The login is used up: the turn moves to the second login with the handoff.
    h.sim.set_used(a, 100.0);
    h.sim.clear_requests();
    let (status, acted, reply) = conv.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert!(completed(&reply));
    assert_eq!(acted.as_deref(), Some("injected, scrubbed"));
    let to_b: Vec<_> = h
        .turns()
        .into_iter()
        .filter(|r| r.account.as_deref() == Some(b))
        .collect();
    assert_eq!(to_b.len(), 1);
    assert!(contains(&to_b[0].body, HANDOFF_TAG));
    assert!(to_b[0].rejected.is_none());
    assert!(h.owners(&to_b[0]).iter().all(|o| o.as_deref() == Some(b)));
    assert_eq!(h.sim.refreshes(b), 0, "a fresh login is used as it is");
    let admin = h.account(0, b).await;
    assert_eq!(admin["login"]["state"], "valid");
    assert!(admin["login"]["expires_at"].is_string());
    assert!(
        !admin.to_string().contains(&l.refresh_token(b)),
        "no token on /admin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_codex_logins_cross_the_switch_while_a_token_expires() {
    crosses_the_switch_while_a_token_expires(Client::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_claude_logins_cross_the_switch_while_a_token_expires() {
    crosses_the_switch_while_a_token_expires(Client::Claude).await;
}

/// How long the issuer takes in the concurrency tests.
const SLOW_ISSUER: std::time::Duration = std::time::Duration::from_millis(300);

/// Sends `n` small turns at once to every gateway of `h`, round robin; their statuses.
async fn concurrent_turns(h: &Harness, l: &Logins, n: usize) -> Vec<u16> {
    let h = Arc::new(h);
    let turns = (0..n).map(|i| {
        let (path, body) = l.small_turn(&format!("request {i}"));
        let h = h.clone();
        async move {
            let (status, _, reply) = h
                .send(i % h.gateways.len(), path, &json_headers(), &body)
                .await;
            assert!(
                completed(&reply) || status != 200,
                "{}",
                String::from_utf8_lossy(&reply)
            );
            status.as_u16()
        }
    });
    join_all(turns).await
}

/// 50 requests at once on a login whose access token is about to expire: one refresh, every
/// request served. The issuer takes 300 ms to answer, so the requests pile up behind the
/// refresh in flight.
async fn fifty_concurrent_requests_refresh_once(client: Client) {
    let l = Logins::new(client);
    let [a, _] = l.accounts();
    let sim = l.sim().quota_step(0.0).token_delay(SLOW_ISSUER);
    let h = l.start(sim, Some(60), MEMORY).await;
    let statuses = concurrent_turns(&h, &l, 50).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(h.sim.refreshes(a), 1, "one refresh for 50 requests");
    assert_eq!(h.sim.token_requests().len(), 1);
    assert!(h.served().iter().all(|s| s == a), "all on the first login");
    assert!(h.sim.requests().iter().all(|r| r.rejected.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_codex_requests_refresh_once() {
    fifty_concurrent_requests_refresh_once(Client::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_claude_requests_refresh_once() {
    fifty_concurrent_requests_refresh_once(Client::Claude).await;
}

/// A login revoked mid-session: its refresh is refused for good, the account is disabled (and
/// shown so), and the session moves to the other login.
async fn a_revoked_login_is_disabled_and_the_session_moves(client: Client) {
    let l = Logins::new(client);
    let [a, b] = l.accounts();
    let h = l.start(l.sim(), None, MEMORY).await;
    let mut conv = l.conversation("revoked-session");
    assert_eq!(conv.turn(&h, 0).await.0, 200);
    h.sim.revoke(a);
    h.sim.clear_requests();
    for turn in 2..=3 {
        let (status, _, reply) = conv.turn(&h, 0).await;
        assert_eq!(
            status,
            200,
            "turn {turn}: {}",
            String::from_utf8_lossy(&reply)
        );
        assert!(completed(&reply));
    }
    assert_eq!(h.served().last().map(String::as_str), Some(b));
    // One refused refresh, no retry of it; turn 3 went to the second login directly.
    assert_eq!(h.sim.token_requests().len(), 1);
    assert_eq!(h.sim.refreshes(a), 0);
    let to_a = h
        .turns()
        .iter()
        .filter(|r| r.account.as_deref() == Some(a))
        .count();
    assert_eq!(
        to_a, 1,
        "only turn 2's first attempt reached the revoked login"
    );
    let admin = h.account(0, a).await;
    assert_eq!(admin["state"], "disabled");
    assert_eq!(
        admin["resets_at"],
        Value::Null,
        "until someone logs in again"
    );
    assert_eq!(admin["login"]["state"], "refused");
    let code = match client {
        Client::Codex => "refresh_token_invalidated",
        Client::Claude => "invalid_grant",
    };
    assert_eq!(admin["login"]["error"], code);
    assert_eq!(h.account(0, b).await["state"], "available");
    // The login said why (its refresh refused): no "check its key" verdict on top of it.
    let activity = h.admin(0, "/admin/activity").await;
    let refused = activity["activity"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "credential_refused")
        .count();
    assert_eq!(refused, 0, "{activity}");
    // A reload with the file unchanged keeps the login refused; someone logs in again into the
    // same file, and the next reload takes the new login: the account serves at once.
    let text = l.config(&h.sim, MEMORY);
    let config = || context_relay_gateway::Config::from_toml_str(&text, |_| None).unwrap();
    let _same = h.gateways[0].0.reload(config()).await.unwrap();
    assert_eq!(h.account(0, a).await["login"]["state"], "refused");
    l.log_in(&h.sim, a, None);
    h.sim.restore(a);
    let _renewed = h.gateways[0].0.reload(config()).await.unwrap();
    let admin = h.account(0, a).await;
    assert_eq!(admin["state"], "available", "{admin}");
    assert_eq!(admin["login"]["state"], "valid", "{admin}");
    let mut fresh = l.conversation("after-new-login");
    assert_eq!(fresh.turn(&h, 0).await.0, 200);
    assert_eq!(h.served().last().map(String::as_str), Some(a), "fill first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_codex_login_is_disabled_and_the_session_moves() {
    a_revoked_login_is_disabled_and_the_session_moves(Client::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_claude_login_is_disabled_and_the_session_moves() {
    a_revoked_login_is_disabled_and_the_session_moves(Client::Claude).await;
}

/// Two replicas on one Redis, each with its own copy of the same logins: requests at both at
/// once refresh each login once (refresh tokens are single-use: a second refresh would lose
/// the login).
async fn replicas_on_one_redis_refresh_once(client: Client) {
    let server = RedisServer::start();
    let l = Logins::new(client);
    let sim = l
        .sim()
        .quota_step(0.0)
        .token_delay(SLOW_ISSUER)
        .start()
        .await
        .unwrap();
    let [a, b] = l.accounts();
    l.log_in(&sim, a, Some(60));
    let before = l.refresh_token(a);
    l.log_in(&sim, b, None);
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nprefix = \"logins-{}:\"\nrequest_timeout_ms = 2000",
        server.url,
        std::process::id()
    );
    let one = l.config(&sim, &store);
    // The second replica has its own copy of the credential files.
    let copy = tempfile::tempdir().unwrap();
    for id in [a, b] {
        std::fs::copy(l.path(id), copy.path().join(format!("{id}.json"))).unwrap();
    }
    let two = one.replace(
        &l.dir.path().display().to_string(),
        &copy.path().display().to_string(),
    );
    let mut h = Harness::single(sim, &one).await;
    let config = context_relay_gateway::Config::from_toml_str(&two, |_| None).unwrap();
    let gateway = context_relay_gateway::Gateway::connect(config)
        .await
        .unwrap();
    h.add(gateway).await;
    let statuses = concurrent_turns(&h, &l, 40).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(h.sim.refreshes(a), 1, "one refresh across both replicas");
    assert_eq!(h.sim.token_requests().len(), 1);
    // One more request to each replica: the one that did not refresh takes the stored pair
    // (without refreshing) and writes it into its own copy of the file.
    for gw in 0..2 {
        let (path, body) = l.small_turn("after the burst");
        assert_eq!(h.send(gw, path, &json_headers(), &body).await.0, 200);
    }
    assert_eq!(h.sim.refreshes(a), 1);
    let rotated = l.refresh_token(a);
    assert_ne!(rotated, before);
    assert_eq!(
        l.refresh_token_at(&copy.path().join(format!("{a}.json"))),
        rotated
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_replicas_on_one_redis_refresh_once() {
    replicas_on_one_redis_refresh_once(Client::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_replicas_on_one_redis_refresh_once() {
    replicas_on_one_redis_refresh_once(Client::Claude).await;
}
