//! The simulated subscription logins are as strict as the real ones: rotating single-use
//! refresh tokens (a reused one refused in the issuer's words, and the login lost), access tokens
//! that expire, the Codex backend's account header and request rules, Claude's OAuth beta and
//! Claude Code identity.

use bytes::Bytes;
use context_relay_sim::subscription::{CLAUDE_CODE_IDENTITIES, OAUTH_BETA};
use context_relay_sim::{CLAUDE_CLIENT_ID, CODEX_CLIENT_ID, SimLogin, SimProvider};
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

async fn post(url: &str, headers: &[(&str, &str)], body: &Value) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::post(url).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let res = client.request(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, v)
}

async fn refresh(sim: &SimProvider, kind: SimLogin, client_id: &str, token: &str) -> (u16, Value) {
    let body =
        json!({"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id});
    post(&sim.token_url(kind), &[], &body).await
}

fn codex_turn() -> Value {
    json!({"model": "gpt-5.5", "instructions": "You are Codex.", "stream": true, "store": false,
           "input": [{"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "hi"}]}]})
}

#[tokio::test]
async fn codex_tokens_rotate_and_a_reused_one_loses_the_login() {
    let sim = SimProvider::builder()
        .login("a", SimLogin::Codex)
        .start()
        .await
        .unwrap();
    let file = sim.login_file("a").unwrap();
    assert_eq!(file["OPENAI_API_KEY"], Value::Null);
    let tokens = &file["tokens"];
    let rt1 = tokens["refresh_token"].as_str().unwrap().to_owned();
    assert_eq!(
        tokens["access_token"].as_str().unwrap().split('.').count(),
        3,
        "a JWT"
    );
    assert!(file["last_refresh"].as_str().unwrap().ends_with('Z'));

    let (status, body) = refresh(&sim, SimLogin::Codex, CLAUDE_CLIENT_ID, &rt1).await;
    assert_eq!((status, &body["error"]), (401, &json!("invalid_client")));
    let (status, fresh) = refresh(&sim, SimLogin::Codex, CODEX_CLIENT_ID, &rt1).await;
    assert_eq!(status, 200, "{fresh}");
    let rt2 = fresh["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(rt1, rt2, "the refresh token rotates");
    assert!(fresh["id_token"].is_string() && fresh["access_token"].is_string());
    assert_eq!(sim.refreshes("a"), 1);

    // The old refresh token is single-use: refused in the issuer's words, and the login lost.
    let (status, body) = refresh(&sim, SimLogin::Codex, CODEX_CLIENT_ID, &rt1).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "refresh_token_reused");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already been used")
    );
    let (status, body) = refresh(&sim, SimLogin::Codex, CODEX_CLIENT_ID, &rt2).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("refresh_token_invalidated"))
    );
    assert_eq!(sim.token_requests().len(), 4);
}

#[tokio::test]
async fn codex_backend_wants_its_account_header_a_live_token_and_its_rules() {
    let sim = SimProvider::builder()
        .login("a", SimLogin::Codex)
        .account("k", "key-k")
        .start()
        .await
        .unwrap();
    let file = sim.login_file("a").unwrap();
    let access = file["tokens"]["access_token"].as_str().unwrap().to_owned();
    let workspace = file["tokens"]["account_id"].as_str().unwrap().to_owned();
    let url = format!("{}/responses", sim.codex_base_url());
    let bearer = format!("Bearer {access}");
    let auth = [
        ("authorization", bearer.as_str()),
        ("chatgpt-account-id", workspace.as_str()),
    ];

    let (status, _) = post(&url, &auth, &codex_turn()).await;
    assert_eq!(status, 200);
    let (status, _) = post(&url, &auth[..1], &codex_turn()).await;
    assert_eq!(status, 403, "no chatgpt-account-id");
    let (status, _) = post(&url, &[("authorization", "Bearer key-k")], &codex_turn()).await;
    assert_eq!(status, 401, "an API key is no ChatGPT token");
    let (status, _) = post(
        &format!("{}/responses", sim.base_url()),
        &auth,
        &codex_turn(),
    )
    .await;
    assert_eq!(status, 401, "a ChatGPT token is no API key");
    let mut no_instructions = codex_turn();
    no_instructions
        .as_object_mut()
        .unwrap()
        .remove("instructions");
    let (status, body) = post(&url, &auth, &no_instructions).await;
    assert_eq!(
        (status, body),
        (400, json!({"detail": "Instructions are required"}))
    );
    let mut unstreamed = codex_turn();
    unstreamed["stream"] = json!(false);
    assert_eq!(post(&url, &auth, &unstreamed).await.0, 400);

    sim.expire_access("a");
    let (status, body) = post(&url, &auth, &codex_turn()).await;
    assert_eq!(status, 401);
    assert_eq!(body["detail"]["code"], "token_expired");
    let rejected: Vec<_> = sim
        .requests()
        .into_iter()
        .filter_map(|r| r.rejected)
        .collect();
    assert!(
        rejected.contains(&"token_expired".to_owned()),
        "{rejected:?}"
    );
}

#[tokio::test]
async fn claude_logins_want_the_oauth_beta_and_claude_codes_identity() {
    let sim = SimProvider::builder()
        .login("x", SimLogin::Claude)
        .start()
        .await
        .unwrap();
    let file = sim.login_file("x").unwrap();
    let oauth = &file["claudeAiOauth"];
    let access = oauth["accessToken"].as_str().unwrap().to_owned();
    let rt1 = oauth["refreshToken"].as_str().unwrap().to_owned();
    assert!(access.starts_with("sk-ant-oat01-") && rt1.starts_with("sk-ant-ort01-"));
    assert!(
        oauth["expiresAt"].as_u64().unwrap() > 1_700_000_000_000,
        "epoch ms"
    );

    let url = format!("{}/messages?beta=true", sim.base_url());
    let bearer = format!("Bearer {access}");
    let betas = format!("claude-code-20250219,{OAUTH_BETA}");
    let turn = json!({"model": "claude-opus-4-8", "max_tokens": 100,
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
                   {"type": "text", "text": CLAUDE_CODE_IDENTITIES[0]}],
        "messages": [{"role": "user", "content": "hi"}]});
    let auth = [
        ("authorization", bearer.as_str()),
        ("anthropic-beta", betas.as_str()),
    ];
    assert_eq!(post(&url, &auth, &turn).await.0, 200);
    let (status, body) = post(&url, &auth[..1], &turn).await;
    assert_eq!(status, 401);
    assert_eq!(
        body["error"]["message"],
        "OAuth authentication is currently not supported."
    );
    let mut other = turn.clone();
    other["system"] = json!("You are a helpful assistant.");
    let (status, body) = post(&url, &auth, &other).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only authorized for use with Claude Code")
    );

    sim.expire_access("x");
    let (status, body) = post(&url, &auth, &turn).await;
    assert_eq!(status, 401);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("OAuth token has expired")
    );

    let (status, fresh) = refresh(&sim, SimLogin::Claude, CLAUDE_CLIENT_ID, &rt1).await;
    assert_eq!(status, 200, "{fresh}");
    assert_eq!(fresh["expires_in"], 3600);
    let rt2 = fresh["refresh_token"].as_str().unwrap();
    assert_ne!(rt2, rt1);
    let (status, body) = refresh(&sim, SimLogin::Claude, CLAUDE_CLIENT_ID, &rt1).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"error": "invalid_grant", "error_description": "Refresh token not found or invalid"})
    );

    // Revoked: the access token and the refresh token are both refused.
    let sim2 = SimProvider::builder()
        .login("y", SimLogin::Claude)
        .start()
        .await
        .unwrap();
    let file = sim2.login_file("y").unwrap();
    let access = file["claudeAiOauth"]["accessToken"]
        .as_str()
        .unwrap()
        .to_owned();
    let rt = file["claudeAiOauth"]["refreshToken"]
        .as_str()
        .unwrap()
        .to_owned();
    sim2.revoke("y");
    let bearer = format!("Bearer {access}");
    let url = format!("{}/messages", sim2.base_url());
    let auth = [
        ("authorization", bearer.as_str()),
        ("anthropic-beta", OAUTH_BETA),
    ];
    assert_eq!(post(&url, &auth, &turn).await.0, 401);
    assert_eq!(
        refresh(&sim2, SimLogin::Claude, CLAUDE_CLIENT_ID, &rt)
            .await
            .0,
        400
    );
}
