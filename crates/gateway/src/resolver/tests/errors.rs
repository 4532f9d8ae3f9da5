//! Provider errors: quota bodies in other statuses, refused credentials, errors the request
//! caused, disabled accounts probed, server errors and head timeouts, long error bodies.

use super::*;

#[tokio::test]
async fn a_quota_body_in_another_status_rotates_until_its_reset() {
    let (p, log) = (pools3(), Log::default());
    let res = call_scripted(&p, &log, &[("a", 400, USAGE_LIMIT_400)], "s").await;
    assert_eq!(res.status(), 200);
    assert_eq!(accounts(&log), ["a", "b"]);
    assert_eq!(
        p.get("codex").unwrap().bound(&"anonymous\ns".into()),
        Some(1)
    );
    let now = SystemTime::now();
    let until = p.get("codex").unwrap().snapshot(now)[0]
        .exhausted_until
        .unwrap();
    let secs = until.duration_since(now).unwrap().as_secs();
    assert!((1700..=1800).contains(&secs), "{secs}");
}

#[tokio::test]
async fn a_refused_credential_takes_the_account_out_and_the_request_moves_on() {
    let (p, log) = (pools3(), Log::default());
    let scripts: [Script; 2] = [&[("a", 401, BAD_KEY)], &[("a", 403, BAD_KEY)]];
    for (script, status) in scripts.into_iter().zip([401, 403]) {
        // Enabled again (as a working probe does) for the second round.
        p.get("codex").unwrap().succeeded(0);
        let res = call_scripted(&p, &log, script, &format!("s{status}")).await;
        assert_eq!(res.status(), 200, "{status}");
        assert_eq!(
            res.extensions().fact::<ResolvedAccount>(),
            Some(&ResolvedAccount::new("codex", "b"))
        );
        let snap = p.get("codex").unwrap().snapshot(SystemTime::now());
        assert_eq!(snap[0].state(), "disabled");
        log.lock().unwrap().clear();
    }
    // Disabled: the next session skips it without a new 401.
    let res = call_scripted(&p, &log, &[], "t").await;
    assert_eq!(res.status(), 200);
    assert_eq!(accounts(&log), ["b"]);
}

/// A 429 or 403 that one request caused (its size, its model) reaches the client as it is
/// and leaves every account available to the other tenants.
#[tokio::test]
async fn an_error_caused_by_the_request_changes_no_account() {
    const TOO_LARGE: &str = r#"{"error":{"message":"Request too large for gpt-5.5 in organization org-abc on tokens per min (TPM): Limit 30000, Requested 41207. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
    const NO_MODEL: &str = r#"{"error":{"code":403,"message":"The caller does not have permission","status":"PERMISSION_DENIED"}}"#;
    let scripts: [(u16, &str, Script); 2] = [
        (429, TOO_LARGE, &[("a", 429, TOO_LARGE)]),
        (403, NO_MODEL, &[("a", 403, NO_MODEL)]),
    ];
    for (status, body, script) in scripts {
        let (p, log) = (pools3(), Log::default());
        let res = call_scripted(&p, &log, script, "s").await;
        assert_eq!(res.status().as_u16(), status);
        assert_eq!(text(res).await, body);
        assert_eq!(
            accounts(&log),
            ["a"],
            "{status}: no other account was tried"
        );
        let snap = p.get("codex").unwrap().snapshot(SystemTime::now());
        assert!(
            snap.iter().all(|a| a.state() == "available"),
            "{status}: {snap:?}"
        );
    }
}

/// A disabled account past its back-off is probed by one request; a working probe enables it.
#[tokio::test]
async fn a_disabled_account_is_probed_once_then_enabled() {
    let (p, log) = (pools3(), Log::default());
    let pool = p.get("codex").unwrap().clone();
    // Disabled long ago: its back-off is over.
    pool.disable(0, SystemTime::now() - std::time::Duration::from_secs(3600));
    let res = call_scripted(&p, &log, &[], "s").await;
    assert_eq!(res.status(), 200);
    assert_eq!(accounts(&log), ["a"]);
    assert_eq!(pool.snapshot(SystemTime::now())[0].state(), "available");
    // Refused again, it is disabled at once, and a refusal of a request already on its way
    // does not double the back-off.
    let res = call_scripted(&p, &log, &[("a", 401, BAD_KEY)], "t").await;
    assert_eq!(res.status(), 200);
    let now = SystemTime::now();
    let until = pool.snapshot(now)[0].disabled_until.unwrap();
    assert_eq!(pool.disable(0, now), until);
}

#[tokio::test]
async fn every_account_refused_is_the_gateways_own_502() {
    let (p, log) = (pools3(), Log::default());
    let script: Script = &[
        ("a", 401, BAD_KEY),
        ("b", 401, BAD_KEY),
        ("c", 403, BAD_KEY),
    ];
    let res = call_scripted(&p, &log, script, "s").await;
    assert_eq!(res.status(), 502);
    assert_eq!(accounts(&log), ["a", "b", "c"]);
    assert!(
        text(res)
            .await
            .contains("a credential the provider accepts")
    );
    assert_eq!(p.get("codex").unwrap().bound(&"anonymous\ns".into()), None);
    // While every account waits out its back-off, no account is tried and the answer is still
    // the 502: waiting (a 429's `retry-after`) would not bring a refused key back.
    log.lock().unwrap().clear();
    let res = call_scripted(&p, &log, &[], "t").await;
    assert_eq!(res.status(), 502);
    assert!(res.headers().get("retry-after").is_none());
    assert!(accounts(&log).is_empty());
    assert!(
        text(res)
            .await
            .contains("a credential the provider accepts")
    );
    // One account out for its quota instead: it comes back by waiting, so a 429.
    let pool = p.get("codex").unwrap();
    pool.succeeded(0);
    pool.mark_exhausted(0, SystemTime::now() + std::time::Duration::from_secs(30));
    let res = call_scripted(&p, &log, &[], "u").await;
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
    // Back within a client's retries: a rate limit, which clients retry after `retry-after`.
    let body = text(res).await;
    assert!(body.contains("\"rate_limit_error\""), "{body}");
}

/// A quota answer, then refused credentials: the client gets the quota answer (waiting helps),
/// not the 502 the last account's refusal alone would give.
#[tokio::test]
async fn a_refusal_after_a_quota_answer_does_not_hide_it() {
    let (p, log) = (pools3(), Log::default());
    let script: Script = &[
        ("a", 400, USAGE_LIMIT_400),
        ("b", 401, BAD_KEY),
        ("c", 403, BAD_KEY),
    ];
    let res = call_scripted(&p, &log, script, "s").await;
    assert_eq!(accounts(&log), ["a", "b", "c"]);
    assert_eq!(res.status(), 400);
    assert!(text(res).await.contains("usage_limit_reached"));
    // The next request finds nothing to try: a is out for its quota, so the gateway's 429.
    let res = call_scripted(&p, &log, &[], "t").await;
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
    // A server error between the two does not hide it either.
    let (p, log) = (pools3(), Log::default());
    let script: Script = &[
        ("a", 400, USAGE_LIMIT_400),
        ("b", 500, "{}"),
        ("c", 401, BAD_KEY),
    ];
    let res = call_scripted(&p, &log, script, "s").await;
    assert_eq!(accounts(&log), ["a", "b", "c"]);
    assert_eq!(res.status(), 400);
    assert!(text(res).await.contains("usage_limit_reached"));
}

#[tokio::test]
async fn a_server_error_is_retried_once_on_the_next_account() {
    let (p, log) = (pools3(), Log::default());
    let res = call_scripted(&p, &log, &[("a", 503, "upstream overloaded")], "s").await;
    assert_eq!(res.status(), 200);
    assert_eq!(accounts(&log), ["a", "b"]);
    // A 5xx does not exhaust or disable: the next session starts on a again.
    assert_eq!(
        p.get("codex").unwrap().snapshot(SystemTime::now())[0].state(),
        "available"
    );
    log.lock().unwrap().clear();
    // Only once: the second 5xx goes to the client, with its body intact.
    let script: Script = &[("a", 500, "boom-a"), ("b", 502, "boom-b")];
    let res = call_scripted(&p, &log, script, "t").await;
    assert_eq!(res.status(), 502);
    assert_eq!(accounts(&log), ["a", "b"]);
    assert_eq!(text(res).await, "boom-b");
    assert_eq!(p.get("codex").unwrap().bound(&"anonymous\nt".into()), None);
}

#[tokio::test]
async fn other_errors_reach_the_client_unretried_and_bind_nothing() {
    let (p, log) = (pools3(), Log::default());
    let res = call_scripted(&p, &log, &[("a", 400, BAD_PARAM)], "s").await;
    assert_eq!(res.status(), 400);
    assert_eq!(accounts(&log), ["a"]);
    assert_eq!(
        res.extensions().fact::<ResolvedAccount>(),
        Some(&ResolvedAccount::new("codex", "a"))
    );
    assert_eq!(text(res).await, BAD_PARAM);
    assert_eq!(p.get("codex").unwrap().bound(&"anonymous\ns".into()), None);
}

#[tokio::test]
async fn a_long_error_body_is_forwarded_whole() {
    static LONG: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| "x".repeat(MAX_ERROR_BODY * 2));
    let (p, log) = (pools3(), Log::default());
    let script: &'static [(&'static str, u16, &'static str)] =
        Box::leak(Box::new([("a", 400, LONG.as_str())]));
    let res = call_scripted(&p, &log, script, "s").await;
    assert_eq!(res.status(), 400);
    assert_eq!(text(res).await.len(), MAX_ERROR_BODY * 2);
}

/// The gateway's own 504 after the head timeout is not tried on another account: the client
/// would wait the whole timeout again. A provider's own 5xx still is.
#[tokio::test]
async fn a_head_timeout_is_not_retried_on_another_account() {
    for (timed_out, tried) in [(true, 1), (false, 2)] {
        let (p, log) = (pools3(), Log::default());
        let log2 = log.clone();
        let svc = service_fn(move |req: Request<crate::chunks::Chunks>| {
            let log = log2.clone();
            async move {
                let acct = req.extensions().fact::<ResolvedAccount>().unwrap().clone();
                log.lock()
                    .unwrap()
                    .push((acct.account().to_string(), Bytes::new()));
                let mut res = Response::new(Full::new(Bytes::from_static(b"{}")));
                *res.status_mut() = StatusCode::GATEWAY_TIMEOUT;
                if timed_out {
                    res.extensions_mut().insert(HeadTimedOut);
                }
                Ok::<_, Infallible>(res)
            }
        });
        let res = AccountResolverLayer::new(p.clone())
            .layer(svc)
            .oneshot(request("s", &[("codex", "gpt-5.5")]))
            .await
            .unwrap();
        assert_eq!(res.status(), 504);
        assert_eq!(accounts(&log).len(), tried, "timed out: {timed_out}");
    }
}

/// A quota failure ending a stream that began with a `200` takes the account out as soon as
/// the event is read: the provider may hold the failed stream open, and the client's retry
/// comes before its end.
#[tokio::test]
async fn a_quota_failure_in_a_stream_exhausts_its_account_when_read() {
    use crate::usage::{Labels, MeteredBody, Traffic, UsageLedger};
    let pools = pools();
    let pool = pools.get("codex").expect("codex").clone();
    let now = SystemTime::now();
    assert_eq!(pool.pick(None, &[], now), Some(0));
    let failed = Bytes::from_static(
        b"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"Please try again in 20s.\"}}}\n\n",
    );
    let frames = futures_util::StreamExt::chain(
        futures_util::stream::iter([Ok::<_, Infallible>(http_body::Frame::data(failed))]),
        futures_util::stream::pending(),
    );
    let labels = Labels {
        client: Arc::from("c"),
        provider: Arc::from("codex"),
        account: Arc::from("a"),
        serving: Arc::from("codex/gpt-5.5"),
        kind: Traffic::Client,
    };
    let in_band = InBandQuota::new(pool.clone(), 0, Activity::default());
    let body = MeteredBody::new(
        http_body_util::StreamBody::new(frames),
        UsageLedger::default(),
        labels,
        "",
        Some(in_band),
    );
    let mut body = std::pin::pin!(body);
    body.frame().await.expect("the failure").expect("data");
    // The stream is still open: the account is out all the same.
    assert_eq!(pool.pick(None, &[], now), Some(1));
}
