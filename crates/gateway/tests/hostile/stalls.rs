//! Stalled peers: slow headers, a stalled request body, an upstream stalled before its first
//! byte or after its first event, and streams still running at shutdown.

use super::*;

#[tokio::test]
async fn slow_headers_are_cut_at_the_header_timeout() {
    let env = setup().await;
    let mut tcp = TcpStream::connect(env.addr()).await.unwrap();
    let request =
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer alice-key\r\n";
    let started = Instant::now();
    let mut closed_after = None;
    // One byte a second, as a slowloris client does.
    for b in request {
        if tcp.write_all(&[*b]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut probe = [0u8; 256];
        match tokio::time::timeout(Duration::from_secs(1), tcp.read(&mut probe)).await {
            Ok(Ok(_)) | Ok(Err(_)) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Err(_) => {}
        }
    }
    let closed_after = closed_after.expect("the gateway never closed the slow connection");
    // Closed at the header timeout (with a second of slack for the 1 s probe), long before the
    // request could have been completed.
    assert!(
        closed_after <= Duration::from_secs_f64(HEADER_TIMEOUT + 2.0),
        "closed after {closed_after:?}"
    );
    // The gateway still serves others.
    let (status, _) = env
        .post("/v1/chat/completions", Some("alice-key"), "codex-relay")
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn slow_headers_of_a_later_request_are_cut_at_the_header_timeout() {
    let env = setup().await;
    let mut tcp = TcpStream::connect(env.addr()).await.unwrap();
    // A first request, answered in full: the connection is admitted and kept alive.
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("an answer to the first request")
            .unwrap();
        assert!(n > 0, "closed before answering the first request");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    // Then the head of a second one, a byte now and then, never complete.
    let started = Instant::now();
    let trickle = async {
        for b in b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
            .iter()
            .cycle()
        {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if tcp.write_all(&[*b]).await.is_err() {
                break;
            }
            let mut probe = [0u8; 64];
            if let Ok(Ok(0) | Err(_)) =
                tokio::time::timeout(Duration::from_millis(1), tcp.read(&mut probe)).await
            {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs_f64(HEADER_TIMEOUT * 5.0), trickle)
        .await
        .expect("the gateway kept a connection whose next head never completed");
    let closed_after = started.elapsed();
    assert!(
        closed_after <= Duration::from_secs_f64(HEADER_TIMEOUT + 1.5),
        "closed after {closed_after:?}"
    );
}

#[tokio::test]
async fn a_stalled_request_body_gets_408_and_is_closed() {
    let env = setup().await;
    let (text, after) = unfinished_request(&env, 1000).await;
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("client_body_timeout_secs"), "{text}");
    // The connection ends with the answer, and the answer says so.
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(
        after <= Duration::from_secs_f64(BODY_TIMEOUT + 1.5),
        "closed after {after:?}"
    );
}

#[tokio::test]
async fn a_stalled_upstream_gives_504_before_the_first_byte() {
    let env = setup().await;
    let started = Instant::now();
    let (status, body) = env.post("/v1/messages", Some("alice-key"), "stalled").await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "timeout_error");
    assert!(started.elapsed() <= Duration::from_secs_f64(HEAD_TIMEOUT + 1.5));
    let (status, body) = env
        .post("/v1/chat/completions", Some("alice-key"), "stalled")
        .await;
    assert_eq!(status, 504);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("upstream_head_timeout_secs"), "{message}");
    // The provider's address stays in the gateway's log.
    assert!(!message.contains("127.0.0.1"), "{message}");
    drop(env.stalled);
}

#[tokio::test]
async fn a_stream_stalled_after_its_first_event_is_closed() {
    let env = setup().await;
    let req = Request::post(env.url("/v1/chat/completions"))
        .header("authorization", "Bearer alice-key")
        .header("x-stall", "body")
        .body(Full::new(Bytes::from(
            serde_json::json!({"model": "stalled", "stream": true,
                "messages": [{"role": "user", "content": "hi"}]})
            .to_string(),
        )))
        .unwrap();
    let started = Instant::now();
    let res = env.h.client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("partial"));
    // Then the stream ends in an error (cut), not in a clean end and not never.
    let end = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .expect("the stalled stream was never closed");
    assert!(end.is_err(), "a cut stream must not look complete");
    assert!(started.elapsed() <= Duration::from_secs_f64(IDLE_TIMEOUT + 2.0));
}

#[tokio::test]
async fn shutdown_cuts_streams_still_running_after_its_timeout() {
    let stalled = StalledUpstream::start().await;
    let (_gateway, server) = small_gateway(
        &stalled.base_url(),
        "",
        "shutdown_timeout_secs = 0.5\nupstream_idle_timeout_secs = 60",
    )
    .await;
    let client = http_client();
    let req = Request::post(format!("{}/v1/chat/completions", server.url()))
        .header("x-stall", "body")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","stream":true,"messages":[]}"#,
        )))
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    body.frame().await.unwrap().unwrap();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), server.shutdown())
        .await
        .expect("shutdown waited for a stalled stream")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    // The client sees its stream end in an error, not complete.
    let end = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .unwrap();
    assert!(end.is_err());
}
