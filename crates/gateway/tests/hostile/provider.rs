//! What passes between the gateway and the provider: account headers, a passed-through 429,
//! and sessions of requests without a credential.

use super::*;

#[tokio::test]
async fn account_headers_stay_between_gateway_and_provider() {
    let stalled = StalledUpstream::start().await;
    let (_gateway, server) = small_gateway(&stalled.base_url(), "", "").await;
    let client = http_client();
    let mut req = Request::post(format!(
        "{}/v1/chat/completions?key=client-query-key&beta=1",
        server.url()
    ))
    .header("x-stall", "headers")
    .header("authorization", "Bearer client-key");
    for (name, value) in [
        ("openai-organization", "org-client"),
        ("openai-project", "proj-client"),
        ("anthropic-organization-id", "org-client"),
        ("cookie", "c=1"),
        ("api-key", "client-azure-key"),
        ("x-goog-api-key", "client-goog-key"),
        ("x-goog-user-project", "client-goog-project"),
        ("x-api-key", "client-x-key"),
        ("chatgpt-account-id", "client-chatgpt-account"),
        ("x-forwarded-for", "203.0.113.7"),
        ("forwarded", "for=203.0.113.8"),
        ("via", "1.1 client-proxy"),
        ("x-real-ip", "203.0.113.9"),
        ("cf-connecting-ip", "203.0.113.10"),
        ("true-client-ip", "203.0.113.11"),
        ("x-client-ip", "203.0.113.12"),
        ("x-forwarded-proto", "client-proto"),
        ("x-forwarded-port", "client-port"),
        ("x-client-header", "kept"),
    ] {
        req = req.header(name, value);
    }
    let res = client
        .request(
            req.body(Full::new(Bytes::from_static(
                br#"{"model":"codex-relay","messages":[]}"#,
            )))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    for hidden in [
        "set-cookie",
        "openai-organization",
        "openai-project",
        "anthropic-organization-id",
    ] {
        assert!(
            res.headers().get(hidden).is_none(),
            "{hidden} reached the client"
        );
    }
    // The client reads the gateway's request id, not the provider's.
    assert!(
        res.headers()
            .get_all("x-request-id")
            .iter()
            .all(|v| v != "req-provider"),
        "{:?}",
        res.headers()
    );
    assert_eq!(res.headers()["x-keep"], "1");
    let seen = String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec())
        .unwrap()
        .to_ascii_lowercase();
    for gone in [
        "org-client",
        "proj-client",
        "cookie:",
        "client-azure-key",
        "client-goog-key",
        "client-goog-project",
        "client-x-key",
        "client-key",
        "client-chatgpt-account",
        "203.0.113.",
        "client-proxy",
        "client-proto",
        "client-port",
        "client-query-key",
    ] {
        assert!(!seen.contains(gone), "{gone} was forwarded:\n{seen}");
    }
    assert!(seen.contains("/chat/completions?beta=1 "), "{seen}");
    assert!(seen.contains("x-client-header: kept"), "{seen}");
    assert!(seen.contains("authorization: bearer key-a"), "{seen}");
}

#[tokio::test]
async fn a_passed_through_429_has_the_length_of_its_body() {
    let stalled = StalledUpstream::start().await;
    let (_gateway, server) = small_gateway(&stalled.base_url(), "", "").await;
    // A raw client: it reads exactly what the gateway declares.
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    let body = r#"{"model":"codex-relay","messages":[]}"#;
    tcp.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-stall: big429\r\n\
             connection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (reply, _) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    let text = String::from_utf8_lossy(&reply);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    let declared: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a content-length");
    assert_eq!(declared, rest.len(), "{head}");
}

#[tokio::test]
async fn credential_less_requests_never_share_a_session() {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let (_gateway, server) = small_gateway(&sim.base_url(), "admin_token = \"adm\"", "").await;
    let client = http_client();
    // No session header: the session is the body's fingerprint, the same for all four.
    let send = |key: Option<&'static str>| {
        let mut req = Request::post(format!("{}/v1/chat/completions", server.url()));
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        client.request(
            req.body(Full::new(Bytes::from_static(
                br#"{"model":"codex-relay","messages":[{"role":"system","content":"s"},{"role":"user","content":"same first message"}]}"#,
            )))
            .unwrap(),
        )
    };
    // Sessions bound to acct-a, from `GET /admin/accounts`.
    let bound = || async {
        let req = Request::get(format!("{}/admin/accounts", server.url()))
            .header("authorization", "Bearer adm")
            .body(Full::default())
            .unwrap();
        let res = client.request(req).await.unwrap();
        let v: Value =
            serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
        v["accounts"][0]["sessions"].as_u64().unwrap()
    };
    assert_eq!(send(None).await.unwrap().status(), 200);
    assert_eq!(send(None).await.unwrap().status(), 200);
    assert_eq!(bound().await, 2, "two anonymous requests are two tenants");
    assert_eq!(send(Some("k1")).await.unwrap().status(), 200);
    assert_eq!(send(Some("k1")).await.unwrap().status(), 200);
    assert_eq!(bound().await, 3, "one credential, one tenant, one session");
}
