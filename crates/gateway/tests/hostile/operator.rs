//! What an operator sees: the admin accounts view and readiness, and a spent byte budget.

use super::*;

#[tokio::test]
async fn admin_accounts_and_readyz() {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .account("acct-b", "key-b")
        .start()
        .await
        .unwrap();
    let gateway = Gateway::new(
        Config::from_toml_str(
            &format!(
                r#"
admin_token_env = "ADMIN"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "{}"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key = "key-b"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
"#,
                sim.base_url()
            ),
            |v| (v == "ADMIN").then(|| "adm-token".to_owned()),
        )
        .unwrap(),
    )
    .unwrap();
    let h = Harness::serve(sim, gateway).await;
    let get = |path: &str, token: Option<&str>| {
        let mut req = Request::get(h.url(0, path));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let client = h.client.clone();
        let req = req.body(Full::default()).unwrap();
        async move {
            let res = client.request(req).await.unwrap();
            let status = res.status();
            let v: Value =
                serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes())
                    .unwrap_or(Value::Null);
            (status, v)
        }
    };
    assert_eq!(get("/admin/accounts", None).await.0, 401);
    let (status, v) = get("/readyz", None).await;
    assert_eq!(
        (status, v["status"].as_str()),
        (StatusCode::OK, Some("ready"))
    );

    // One turn binds a session to acct-a and reports it at 100 %: acct-a is exhausted.
    h.sim.set_used("acct-a", 90.0);
    let req = Request::post(h.url(0, "/v1/chat/completions"))
        .header("authorization", "Bearer c")
        .header("session-id", "s-1")
        .body(Full::new(Bytes::from(
            r#"{"model":"codex-relay","messages":[{"role":"user","content":"x"}]}"#,
        )))
        .unwrap();
    assert_eq!(h.client.request(req).await.unwrap().status(), 200);

    let (status, v) = get("/admin/accounts", Some("adm-token")).await;
    assert_eq!(status, 200);
    let accounts = v["accounts"].as_array().unwrap();
    assert_eq!(accounts.len(), 2);
    let a = &accounts[0];
    assert_eq!(a["provider"], "codex");
    assert_eq!(a["account"], "acct-a");
    assert_eq!(a["state"], "exhausted");
    assert_eq!(a["sessions"], 1);
    assert!(a["used_ratio"].is_number(), "{a}");
    assert!(a["resets_at"].as_str().unwrap().ends_with('Z'));
    let b = &accounts[1];
    assert_eq!(
        (b["state"].as_str(), b["sessions"].as_u64()),
        (Some("available"), Some(0))
    );
    assert!(b["resets_at"].is_null());
    for k in [
        "provider",
        "account",
        "used_ratio",
        "resets_at",
        "state",
        "sessions",
    ] {
        assert!(a.get(k).is_some(), "{k} missing");
    }

    let readiness = h.gateways[0].0.readiness().clone();
    readiness.shutting_down();
    let (status, v) = get("/readyz", None).await;
    assert_eq!(status, 503);
    assert_eq!(v["status"], "shutting down");
    h.shutdown().await;
}

#[tokio::test]
async fn a_spent_byte_budget_is_a_503_with_retry_after() {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let (_gateway, server) = small_gateway(
        &sim.base_url(),
        "max_request_bytes = 1024",
        "max_buffered_bytes = 1024\nclient_body_timeout_secs = 1",
    )
    .await;
    // A client that sends 900 of its 1000 bytes and waits holds 900 bytes of the budget.
    let mut holder = TcpStream::connect(server.addr()).await.unwrap();
    let partial = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{}",
        " ".repeat(900)
    );
    holder.write_all(partial.as_bytes()).await.unwrap();
    let client = http_client();
    let body = r#"{"model":"codex-relay","messages":[{"role":"user","content":"a message that needs more than what is left of the budget"}],"pad":"................................................................................................................................................................"}"#;
    let send = || {
        client.request(
            Request::post(format!("{}/v1/chat/completions", server.url()))
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap(),
        )
    };
    // The holder's bytes are taken as they arrive: wait until they are.
    let deadline = Instant::now() + Duration::from_secs(5);
    let res = loop {
        let res = send().await.unwrap();
        if res.status() == 503 || Instant::now() > deadline {
            break res;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    let message = error_message(res).await;
    assert!(message.contains("max_buffered_bytes"), "{message}");
    // Once the holder is gone (its body timed out), the budget is back.
    let (reply, _) = read_until_closed(&mut holder, Duration::from_secs(5)).await;
    assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 408"));
    assert_eq!(send().await.unwrap().status(), 200);
}

/// The size limit of the budget tests.
const SIZE_LIMIT: usize = 1 << 20;

/// A provider with one account, and the top-level and `[limits]` lines of the smallest
/// `max_buffered_bytes` the configuration check accepts without a warning for [`SIZE_LIMIT`].
async fn smallest_budget() -> (SimProvider, String, String) {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let budget = 2 * SIZE_LIMIT as u64 + context_relay_gateway::config::BUFFER_SLACK;
    (
        sim,
        format!("max_request_bytes = {SIZE_LIMIT}"),
        format!("max_buffered_bytes = {budget}"),
    )
}

/// A budget the configuration check accepts without a warning (twice `max_request_bytes` and
/// the slack it names) serves a lone body of the largest size allowed, whether it comes with
/// a `content-length` or chunked, with a session header or without: a 503 with `retry-after`
/// would be retried for ever.
#[tokio::test]
async fn a_lone_body_at_the_size_limit_fits_the_smallest_budget_allowed() {
    let (sim, top, limits) = smallest_budget().await;
    let config_warnings = {
        let store = format!("backend = \"memory\"\n[limits]\n{limits}");
        CodexGateway {
            accounts: &["acct-a"],
            top: &top,
            store: &store,
            provider: "quota = \"none\"",
        }
        .config(&sim.base_url())
        .warnings()
    };
    assert!(
        config_warnings
            .iter()
            .all(|w| !w.contains("max_buffered_bytes")),
        "{config_warnings:?}"
    );
    let (_gateway, server) = small_gateway(&sim.base_url(), &top, &limits).await;
    const LIMIT: usize = SIZE_LIMIT;
    let head = r#"{"model":"codex-relay","messages":[{"role":"user","content":""#;
    let tail = r#""}]}"#;
    let body = format!(
        "{head}{}{tail}",
        "x".repeat(LIMIT - head.len() - tail.len())
    );
    assert_eq!(body.len(), LIMIT);
    for session in [Some("lone"), None] {
        for chunked in [false, true] {
            let mut s = TcpStream::connect(server.addr()).await.unwrap();
            let mut req = String::from("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n");
            if let Some(id) = session {
                req.push_str(&format!("session-id: {id}\r\n"));
            }
            if chunked {
                req.push_str("transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
                for piece in body.as_bytes().chunks(1000) {
                    req.push_str(&format!("{:x}\r\n", piece.len()));
                    req.push_str(std::str::from_utf8(piece).unwrap());
                    req.push_str("\r\n");
                }
                req.push_str("0\r\n\r\n");
            } else {
                req.push_str(&format!(
                    "content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                ));
            }
            s.write_all(req.as_bytes()).await.unwrap();
            let (reply, _) = read_until_closed(&mut s, Duration::from_secs(10)).await;
            let reply = String::from_utf8_lossy(&reply);
            assert!(
                reply.starts_with("HTTP/1.1 200"),
                "session {session:?}, chunked {chunked}: {}",
                reply.lines().next().unwrap_or_default()
            );
        }
    }
}

/// A compressed body that would hold more than the whole budget alone (its compressed bytes,
/// the decoded body and room for a rewritten copy) gets a 413, which no retry changes, not a
/// 503 with `retry-after` that a client would retry for ever.
#[tokio::test]
async fn a_request_that_can_never_fit_the_budget_is_a_413() {
    use std::io::Write as _;
    const LIMIT: usize = SIZE_LIMIT;
    let (sim, top, limits) = smallest_budget().await;
    let (_gateway, server) = small_gateway(&sim.base_url(), &top, &limits).await;
    // Text that barely compresses (a hash chain in hex), about the size limit decoded.
    let mut noise = String::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while noise.len() < LIMIT - 200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.push_str(&format!("{x:016x}"));
    }
    let body =
        format!(r#"{{"model":"codex-relay","messages":[{{"role":"user","content":"{noise}"}}]}}"#);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(body.as_bytes()).unwrap();
    let compressed = gz.finish().unwrap();
    assert!(compressed.len() > LIMIT / 3, "{}", compressed.len());
    let res = http_client()
        .request(
            Request::post(format!("{}/v1/chat/completions", server.url()))
                .header("content-encoding", "gzip")
                .header("session-id", "squeezed")
                .body(Full::new(Bytes::from(compressed)))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    assert!(res.headers().get("retry-after").is_none());
    let message = error_message(res).await;
    assert!(message.contains("max_buffered_bytes"), "{message}");
}
