//! Requests refused before they reach a provider: stacked compression, a model with a dot
//! segment, an open gateway on a public address; request ids set or propagated.

use super::*;

/// A body over the size limit is answered before it is read: the connection cannot carry
/// another request after it, and the answer says so (a keep-alive pool must not reuse it).
#[tokio::test]
async fn a_413_before_the_body_is_read_says_the_connection_closes() {
    let env = setup().await;
    let (text, _) = unfinished_request(&env, 999_999_999).await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
}

/// An unknown key, path or method, or a missing admin token, is refused before the body is
/// read: the 401, 404 or 405 says the connection closes, as the 413 does; a 401 to a request
/// without a body leaves it open.
#[tokio::test]
async fn a_refusal_before_the_body_is_read_says_the_connection_closes() {
    let env = setup().await;
    for (key, path, status) in [
        ("mallory-key", "/v1/chat/completions", "401"),
        ("alice-key", "/v1/v1/messages", "404"),
        ("alice-key", "/v1/models", "405"),
        ("alice-key", "/admin/logout", "401"),
    ] {
        let (text, _) = unfinished_request_as(&env, key, path, 1000).await;
        assert!(text.starts_with(&format!("HTTP/1.1 {status}")), "{text}");
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        // A 405 still names the methods the route takes.
        assert_eq!(status == "405", text.contains("\r\nallow: GET"), "{text}");
    }

    let mut tcp = TcpStream::connect(env.addr()).await.unwrap();
    for _ in 0..2 {
        tcp.write_all(
            b"GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer mallory-key\r\n\r\n",
        )
        .await
        .unwrap();
        let answer = read_answer(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(!answer.contains("connection: close"), "{answer}");
    }
}

/// A peer that writes the whole body before it reads the answer (a reverse proxy such as nginx,
/// which reports a 502 of its own when its write fails): the refusal given before the body was
/// read drains the connection rather than resetting it, so the body goes out and the answer
/// is read. Closed with unread bytes, the connection was reset and the writes failed.
#[tokio::test]
async fn an_early_refusal_lets_a_peer_finish_sending_before_it_reads() {
    let env = setup().await;
    for (key, length, status) in [
        ("mallory-key", 6 * 1024 * 1024, "401"),
        ("alice-key", 12 * 1024 * 1024, "413"),
    ] {
        let mut tcp = TcpStream::connect(env.addr()).await.unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\
             content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < length {
            let n = chunk.len().min(length - sent);
            let wrote = tokio::time::timeout(Duration::from_secs(10), tcp.write_all(&chunk[..n]))
                .await
                .expect("the gateway drains the body");
            wrote.unwrap_or_else(|e| panic!("{status}: the body could not be sent: {e}"));
            sent += n;
        }
        let (bytes, _) = read_until_closed(&mut tcp, Duration::from_secs(10)).await;
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with(&format!("HTTP/1.1 {status}")), "{text}");
    }
}

/// A peer whose body comes after the answer (a proxy reading from a slow client, nginx over a
/// real network): the connection the refusal ended still takes the body, then closes. Closed
/// at once, its socket answered the late bytes with a reset, and the peer's writes failed.
#[tokio::test]
async fn an_early_refusal_takes_a_body_that_comes_after_the_answer() {
    let env = setup().await;
    let mut tcp = TcpStream::connect(env.addr()).await.unwrap();
    let length = 2 * 1024 * 1024;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer mallory-key\r\n\
         content-type: application/json\r\ncontent-length: {length}\r\n\r\n{{\"model\":"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    // The whole answer, before any more of the body.
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("\"error\"") {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed before the answer");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 401"));
    // The gateway is done with the connection by now; the rest of the body follows.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let chunk = vec![b' '; 64 * 1024];
    let mut sent = head.len();
    while sent < length {
        let n = chunk.len().min(length - sent);
        tcp.write_all(&chunk[..n])
            .await
            .unwrap_or_else(|e| panic!("the late body could not be sent: {e}"));
        sent += n;
    }
    tcp.flush().await.unwrap();
    tcp.shutdown().await.unwrap();
    let (rest, _) = read_until_closed(&mut tcp, Duration::from_secs(10)).await;
    assert!(rest.is_empty(), "nothing after the answer");
}

#[tokio::test]
async fn stacked_gzip_layers_are_refused_without_decoding() {
    let env = setup().await;
    // A real 3-layer gzip body: refused by its header, before any layer is inflated.
    let mut body = br#"{"model":"codex-relay","messages":[]}"#.to_vec();
    for _ in 0..3 {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&body).unwrap();
        body = e.finish().unwrap();
    }
    let send = |encoding: String, body: Vec<u8>| {
        let req = Request::post(env.url("/v1/chat/completions"))
            .header("authorization", "Bearer alice-key")
            .header("content-encoding", encoding)
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        env.h.client.request(req)
    };
    let res = send("gzip, gzip, gzip".into(), body).await.unwrap();
    assert_eq!(res.status(), 415);
    // A thousand layers named in a header: still one quick refusal.
    let many = vec!["gzip"; 1000].join(", ");
    let started = Instant::now();
    let res = send(many, b"x".to_vec()).await.unwrap();
    assert_eq!(res.status(), 415);
    let v: Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("1000"));
    assert!(started.elapsed() < Duration::from_secs(2));
    // Two layers (what a client might really send) are still decoded.
    let mut two = br#"{"model":"codex-relay","messages":[{"role":"user","content":"x"}]}"#.to_vec();
    for _ in 0..2 {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&two).unwrap();
        two = e.finish().unwrap();
    }
    assert_eq!(send("gzip, gzip".into(), two).await.unwrap().status(), 200);
}

#[tokio::test]
async fn request_ids_are_set_or_propagated() {
    let env = setup().await;
    let get_at = |path: &str, id: Option<&'static str>| {
        let mut req = Request::get(env.url(path));
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        env.h.client.request(req.body(Full::default()).unwrap())
    };
    let get = |id| get_at("/healthz", id);
    // On a route's answer, the proxy's refusal of a method and an unknown path alike: once.
    for path in ["/healthz", "/v1/chat/completions", "/nowhere"] {
        let res = get_at(path, Some("req-123")).await.unwrap();
        assert_eq!(res.headers()["x-request-id"], "req-123", "{path}");
        assert_eq!(res.headers().get_all("x-request-id").iter().count(), 1);
    }
    let res = get(None).await.unwrap();
    assert_eq!(res.headers()["x-request-id"].len(), 36, "a UUID");
    // An id that could forge fields of the access line, or make it arbitrarily long, is
    // replaced.
    for forged in ["a status=500 tenant=\"x\"", "a\"b", &*"x".repeat(200)] {
        let forged: &'static str = Box::leak(forged.to_owned().into_boxed_str());
        let res = get(Some(forged)).await.unwrap();
        let id = res.headers()["x-request-id"].to_str().unwrap();
        assert_ne!(id, forged);
        assert_eq!(id.len(), 36, "a UUID instead of {forged:?}");
    }
}

#[tokio::test]
async fn a_gemini_model_with_a_dot_segment_is_no_route_and_never_forwarded() {
    let stalled = StalledUpstream::start().await;
    let (_gateway, server) = small_gateway(&stalled.base_url(), "", "").await;
    let client = http_client();
    // `codex/../../x` would be the provider `codex` and a model that climbs out of
    // `{base_url}/models/`.
    for path in [
        "/v1beta/models/codex%2F..%2F..%2Fx:generateContent",
        "/v1/models/codex/../../x:generateContent",
        "/v1/models/codex%2F%2e%2e%2Fx:streamGenerateContent",
    ] {
        let req = Request::post(format!("{}{path}", server.url()))
            .header("x-stall", "headers")
            .header("x-goog-api-key", "client-key")
            .body(Full::new(Bytes::from_static(br#"{"contents":[]}"#)))
            .unwrap();
        let res = client.request(req).await.unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(!body.contains("x-stall"), "{path} was forwarded: {body}");
    }
}

#[tokio::test]
async fn an_open_gateway_refuses_a_public_address_unless_allowed() {
    let text = r#"
[store]
backend = "memory"
[[providers]]
name = "p"
base_url = "http://127.0.0.1:9/v1"
  [[providers.accounts]]
  id = "a"
  api_key = "k"
"#;
    let e = Config::from_toml_str(&format!("listen = \"0.0.0.0:4000\"\n{text}"), |_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("allow_open"), "{e}");
    let open = Config::from_toml_str(
        &format!("listen = \"0.0.0.0:4000\"\nallow_open = true\n{text}"),
        |_| None,
    )
    .unwrap();
    assert!(open.warnings().iter().any(|w| w.contains("open")));
    // A loopback gateway may be open, but spawning it on a public address is refused.
    let gateway = Gateway::new(Config::from_toml_str(text, |_| None).unwrap()).unwrap();
    let e = gateway
        .spawn("0.0.0.0:0".parse().unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
}
