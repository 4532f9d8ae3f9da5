//! A request the provider rejects for account-bound state is repaired once; anything else is
//! passed on; a failed attempt gives its handoff back, before the response is handed on when
//! the status is an error. Against a provider double that mints account-bound state per
//! account and rejects foreign state with the real error bodies.

mod bound;

use std::time::Duration;

use bound::Mode;
use bound::clients::{Claude, Codex, Relay, action, tenant};
use bytes::Bytes;
use context_relay_core::HandoffKey;
use context_relay_tower::injection::RELAY_HEADER;
use futures_util::StreamExt;
use http::StatusCode;
use serde_json::json;
use tower::ServiceExt;

#[tokio::test]
async fn a_rejected_request_is_repaired_once_even_without_a_known_switch() {
    // The client comes from another gateway: its history holds acct-x's state, and the relay
    // has never seen the session.
    let relay = Relay::new();
    let mut codex = Codex::new("stranger");
    codex.history.push(
        json!({"type":"reasoning","id":"rs_x","summary":[],"encrypted_content":bound::enc("acct-x", 1)}),
    );
    let headers = codex.turn(&relay, "go on").await;
    assert_eq!(action(&headers), "repaired");
    let received = relay.provider.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].status, StatusCode::BAD_REQUEST);
    assert!(received[0].carries_state_of("acct-x"));
    assert_eq!(received[1].status, StatusCode::OK);
    assert!(!received[1].carries_state_of("acct-x"));
    assert_eq!(received[1].account, "acct-a", "retried on the same account");
    // What was rejected is remembered: the next turn is scrubbed, not rejected again, and the
    // account's own reasoning from the repaired turn is forwarded.
    let headers = codex.turn(&relay, "and then").await;
    assert_eq!(action(&headers), "scrubbed");
    let received = relay.provider.received();
    assert_eq!(received.len(), 3);
    assert_eq!(received[2].status, StatusCode::OK);
    assert!(received[2].text.contains(&bound::enc("acct-a", 1)));

    // The same for Anthropic's signed thinking blocks.
    let mut claude = Claude::new("claude-stranger");
    claude.messages.push(json!({"role":"user","content":"q"}));
    claude.messages.push(json!({"role":"assistant","content":[
        {"type":"thinking","thinking":"t","signature":bound::sig("acct-x", 9)},{"type":"text","text":"a"}]}));
    let headers = claude.turn(&relay, "next").await;
    assert_eq!(action(&headers), "repaired");
    let received = relay.provider.received();
    assert_eq!(received.len(), 5);
    assert!(!received[4].carries_state_of("acct-x"));
}

#[tokio::test]
async fn an_unrelated_400_is_passed_on_unretried() {
    let relay = Relay::new();
    relay.provider.with(|s| {
        s.next_error = Some((StatusCode::BAD_REQUEST, bound::UNRELATED_400));
    });
    let mut codex = Codex::new("plain");
    let (status, headers, body) = relay.send(codex.request("x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, Bytes::from_static(bound::UNRELATED_400.as_bytes()));
    assert!(headers.get(RELAY_HEADER).is_none());
    assert_eq!(relay.provider.received().len(), 1);
}

#[tokio::test]
async fn a_failure_in_band_before_any_output_is_repaired_invisibly() {
    let relay = Relay::new();
    relay.provider.with(|s| s.mode = Mode::FailInBand);
    let mut codex = Codex::new("inband");
    codex.history.push(
        json!({"type":"reasoning","id":"rs_x","summary":[],"encrypted_content":bound::enc("acct-x", 1)}),
    );
    let (status, _, body) = relay.send(codex.request("go")).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8_lossy(&body);
    assert!(!text.contains("response.failed"), "{text}");
    assert_eq!(text.matches("event: response.created").count(), 1, "{text}");
    assert!(text.contains("response.completed"));
    assert_eq!(relay.provider.received().len(), 2);
}

#[tokio::test]
async fn an_in_band_failure_keeps_the_handoff_and_the_affinity() {
    let relay = Relay::new();
    let mut codex = Codex::new("fails");
    codex.turn(&relay, "a").await;
    relay.upsert_handoff("fails", "acct-a").await;
    relay.use_account("acct-b");
    // Not repairable: a server error in band.
    relay.provider.with(|s| {
        s.mode = Mode::FailInBand;
        s.next_error = Some((
            StatusCode::BAD_REQUEST,
            r#"{"error":{"code":"server_error","message":"boom"}}"#,
        ));
    });
    let (status, _, body) = relay.send(codex.request("b")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("response.failed"));
    assert!(
        relay.handoff_left("fails").await,
        "the next attempt gets it again"
    );
    // The affinity did not move: the retry is still a switch, injected and scrubbed.
    relay.provider.with(|s| s.mode = Mode::Reject);
    let headers = codex.turn(&relay, "b again").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    assert!(!relay.handoff_left("fails").await);
}

/// The relay reads a Responses stream's opening ahead when the request carries account-bound
/// state (here the serving account's own reasoning, beside a handoff another account wrote);
/// an in-band failure seen there gives the handoff back before the client reads it, though the
/// provider holds the failed stream open: the client's retry gets it.
#[tokio::test]
async fn an_in_band_failure_read_ahead_gives_the_handoff_back_before_the_stream_closes() {
    let relay = Relay::new();
    let mut codex = Codex::new("held");
    codex.turn(&relay, "a").await;
    relay.upsert_handoff("held", "acct-x").await;
    let (close, held) = tokio::sync::oneshot::channel::<()>();
    relay.provider.with(|s| {
        s.mode = Mode::FailInBand;
        s.hold = Some(held);
        s.next_error = Some((
            StatusCode::BAD_REQUEST,
            r#"{"error":{"code":"server_error","message":"boom"}}"#,
        ));
    });
    let res = relay.svc.clone().oneshot(codex.request("b")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let label = res
        .headers()
        .get(RELAY_HEADER)
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(label, None, "given back, so not labelled as injected");
    let mut body = res.into_body();
    let read = http_body_util::BodyExt::frame(&mut body)
        .await
        .unwrap()
        .unwrap();
    let read = read.into_data().unwrap();
    assert!(String::from_utf8_lossy(&read).contains("response.failed"));
    relay.background.idle().await;
    assert!(
        relay.handoff_left("held").await,
        "the handoff is back while the failed stream is still open"
    );
    // The client retries on the stream it has not finished reading.
    relay.provider.with(|s| s.mode = Mode::Reject);
    codex.history.pop();
    let headers = codex.turn(&relay, "b").await;
    assert_eq!(action(&headers), "injected");
    assert!(!relay.handoff_left("held").await);
    drop(close);
    http_body_util::BodyExt::collect(body).await.unwrap();
    relay.background.idle().await;
    // The failed stream's end gives nothing back a second time.
    let headers = codex.turn(&relay, "c").await;
    assert!(!action(&headers).contains("injected"), "{headers:?}");
}

#[tokio::test]
async fn an_error_status_releases_the_claim_before_the_response_is_handed_back() {
    let relay = Relay::new();
    let mut codex = Codex::new("rotate");
    codex.turn(&relay, "a").await;
    relay.upsert_handoff("rotate", "acct-a").await;
    relay.use_account("acct-b");
    relay.provider.with(|s| {
        s.next_error = Some((
            StatusCode::TOO_MANY_REQUESTS,
            r#"{"error":{"code":"rate_limit_exceeded"}}"#,
        ));
    });
    let res = relay.svc.clone().oneshot(codex.request("b")).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // No waiting for background work: a retry on the next account can claim it now.
    let key = HandoffKey::new(tenant(), "rotate", "relay");
    let claim = relay
        .store
        .claim(&key, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(claim.is_some(), "released synchronously");
    relay.store.release(&claim.unwrap()).await.unwrap();
    drop(res);
    relay.use_account("acct-c");
    let headers = codex.turn(&relay, "b").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    assert_eq!(relay.provider.received().last().unwrap().handoffs(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_goes_quiet_after_its_opening_is_passed_on() {
    use std::convert::Infallible;
    use std::sync::Arc;

    use bytes::Bytes;
    use context_relay_store::MemoryStore;
    use context_relay_tower::{ComboName, ContextRelay, ResolvedAccount};
    use http::{Request, Response};
    use http_body_util::{BodyExt, StreamBody};
    use tower::ServiceBuilder;

    let opening = Bytes::from_static(
        b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n",
    );
    let upstream = tower::service_fn(move |req: Request<_>| {
        let opening = opening.clone();
        async move {
            // Read the request, as a provider does (the layer keeps it for a repair).
            let _ = BodyExt::collect(req.into_body()).await;
            // The opening event, then nothing (the provider stalls).
            let frames =
                futures_util::stream::iter([Ok::<_, Infallible>(http_body::Frame::data(opening))])
                    .chain(futures_util::stream::pending());
            let mut res = Response::new(StreamBody::new(frames));
            res.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            Ok::<_, Infallible>(res)
        }
    });
    let svc = ServiceBuilder::new()
        .layer(
            ContextRelay::builder(Arc::new(MemoryStore::new()))
                .build()
                .injection_layer(),
        )
        .service(upstream);
    let body = json!({"stream": true, "input": [
        {"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":bound::enc("acct-x", 1)}]});
    let mut req = Request::post("/v1/responses")
        .header("session-id", "quiet")
        .body(http_body_util::Full::new(Bytes::from(body.to_string())))
        .unwrap();
    req.extensions_mut().insert(ComboName::new("relay"));
    req.extensions_mut()
        .insert(ResolvedAccount::new("codex", "acct-a"));
    // The opening is held back while the provider is quiet, then passed on: the head and the
    // first event arrive (in paused time, the hold's limit elapses at once).
    let res = svc.oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("response.created"));
}

/// The double is as strict as the real providers: only state the serving account minted, whole
/// and unaltered, is accepted.
#[tokio::test]
async fn the_double_rejects_state_the_serving_account_did_not_mint() {
    async fn ask(provider: &bound::Provider, path: &str, body: serde_json::Value) -> StatusCode {
        let mut req = http::Request::post(path)
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .unwrap();
        req.extensions_mut()
            .insert(context_relay_tower::ResolvedAccount::new("codex", "acct-a"));
        provider.clone().answer(req).await.unwrap().status()
    }
    let provider = bound::Provider::default();
    let blob = bound::enc("acct-a", 1);
    assert!(blob.len() >= 1024, "a real-size blob: {} bytes", blob.len());
    let reasoning = |b: &str| json!({"input": [{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":b}]});
    assert_eq!(
        ask(&provider, "/v1/responses", reasoning(&blob)).await,
        StatusCode::OK
    );
    // One character changed, truncated, or never minted at all.
    let mut mangled = blob.clone().into_bytes();
    let i = blob.find('.').unwrap() + 3;
    mangled[i] = if mangled[i] == b'0' { b'1' } else { b'0' };
    let mangled = String::from_utf8(mangled).unwrap();
    let unknown = "gAAAAABreasoningblobfromnowhere==";
    for bad in [
        mangled.as_str(),
        &blob[..blob.find('.').unwrap() + 8],
        unknown,
    ] {
        assert_eq!(
            ask(&provider, "/v1/responses", reasoning(bad)).await,
            StatusCode::BAD_REQUEST,
            "{bad:.40}"
        );
    }
    assert_eq!(
        ask(
            &provider,
            "/v1/responses",
            json!({"previous_response_id": "resp_9999", "input": []})
        )
        .await,
        StatusCode::BAD_REQUEST
    );
    let thinking = |s: &str| {
        json!({"messages": [{"role":"user","content":"q"}, {"role":"assistant","content":[
            {"type":"thinking","thinking":"t","signature":s},{"type":"text","text":"a"}]}]})
    };
    let signature = bound::sig("acct-a", 1);
    assert_eq!(
        ask(&provider, "/v1/messages", thinking(&signature)).await,
        StatusCode::OK
    );
    let truncated = &signature[..signature.len() / 2];
    assert_eq!(
        ask(&provider, "/v1/messages", thinking(truncated)).await,
        StatusCode::BAD_REQUEST
    );
    let (ok, bad) = (StatusCode::OK, StatusCode::BAD_REQUEST);
    let statuses: Vec<_> = provider.received().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [ok, bad, bad, bad, bad, ok, bad]);
}

#[tokio::test(start_paused = true)]
async fn keepalives_before_output_do_not_hold_the_head_forever() {
    use std::convert::Infallible;
    use std::sync::Arc;

    use bytes::Bytes;
    use context_relay_store::MemoryStore;
    use context_relay_tower::{ComboName, ContextRelay, ResolvedAccount};
    use http::{Request, Response};
    use http_body_util::StreamBody;
    use tower::ServiceBuilder;

    let upstream = tower::service_fn(move |req: Request<_>| async move {
        let _ = http_body_util::BodyExt::collect(req.into_body()).await;
        let opening = Bytes::from_static(
            b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n",
        );
        // A keep-alive comment every 9 s (a proxy in front of a model that thinks for minutes).
        let pings = futures_util::stream::unfold(0u32, |n| async move {
            tokio::time::sleep(Duration::from_secs(9)).await;
            Some((
                Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(b": ping\n\n"))),
                n + 1,
            ))
        });
        let frames =
            futures_util::stream::iter([Ok::<_, Infallible>(http_body::Frame::data(opening))])
                .chain(pings);
        let mut res = Response::new(StreamBody::new(frames));
        res.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        Ok::<_, Infallible>(res)
    });
    let svc = ServiceBuilder::new()
        .layer(
            ContextRelay::builder(Arc::new(MemoryStore::new()))
                .build()
                .injection_layer(),
        )
        .service(upstream);
    let body = json!({"stream": true, "input": [
        {"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":bound::enc("acct-x", 1)}]});
    let mut req = Request::post("/v1/responses")
        .header("session-id", "pings")
        .body(http_body_util::Full::new(Bytes::from(body.to_string())))
        .unwrap();
    req.extensions_mut().insert(ComboName::new("relay"));
    req.extensions_mut()
        .insert(ResolvedAccount::new("codex", "acct-a"));
    let start = tokio::time::Instant::now();
    let res = svc.oneshot(req).await.unwrap();
    let waited = start.elapsed();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        waited <= Duration::from_secs(30),
        "response head held back for {waited:?}"
    );
}
