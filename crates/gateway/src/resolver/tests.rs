//! Tests of the account resolver over `tower::service_fn` upstreams.

use std::convert::Infallible;
use std::sync::Mutex;

use tower::service_fn;

use super::*;
use crate::combo::Target;
use crate::config::Config;
use crate::upstream::UpstreamEndpoint;
use context_relay_core::QuotaSignal;
use context_relay_tower::SkipRelay;

fn pools() -> Arc<AccountPools> {
    let c = Config::from_toml_str(
        r#"
[[providers]]
name = "codex"
base_url = "http://up/v1"
[[providers.accounts]]
id = "a"
api_key = "ka"
[[providers.accounts]]
id = "b"
api_key = "kb"
[[providers]]
name = "claude"
base_url = "http://up2/v1"
auth = "x-api-key"
quota = "none"
[[providers.accounts]]
id = "c"
api_key = "kc"
[[combos]]
name = "relay"
targets = ["codex/gpt-5.5"]
"#,
        |_| None,
    )
    .unwrap();
    Arc::new(AccountPools::from_config(&c))
}

fn routes() -> Arc<Routes> {
    let c = Config::from_toml_str(
        r#"
[[providers]]
name = "codex"
base_url = "http://up/v1"
[[providers.accounts]]
id = "a"
api_key = "ka"
[[combos]]
name = "relay"
targets = ["codex/gpt-5.5"]
"#,
        |_| None,
    )
    .unwrap();
    Arc::new(Routes::from_config(&c))
}

type Log = Arc<Mutex<Vec<(String, Bytes)>>>;
type Res = Response<Either<Full<Bytes>, Peeked<Full<Bytes>>>>;

/// A fake upstream: accounts listed in `limited` answer 429, others 200 with `used` quota.
fn upstream(
    log: Log,
    limited: &'static [&'static str],
    used: &'static str,
) -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    service_fn(move |req: Request<Full<Bytes>>| {
        let log = log.clone();
        async move {
            let acct = req.extensions().get::<ResolvedAccount>().unwrap().clone();
            let ep = req.extensions().get::<UpstreamEndpoint>().unwrap().clone();
            assert!(ep.credential.is_some());
            let body = req.into_body().collect().await.unwrap().to_bytes();
            log.lock().unwrap().push((acct.account().to_string(), body));
            let mut res = if limited.contains(&&**acct.account()) {
                let mut r = Response::new(Full::new(Bytes::from_static(
                    br#"{"error":{"type":"usage_limit_reached","resets_in_seconds":3600}}"#,
                )));
                *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                r
            } else {
                Response::new(Full::new(Bytes::from_static(b"ok")))
            };
            res.headers_mut().insert(
                "x-codex-primary-used-percent",
                HeaderValue::from_static(used),
            );
            Ok(res)
        }
    })
}

/// A request as ComboService hands it on: routing targets and the request's identity set.
fn request(session: &str, targets: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut req = Request::post("/v1/responses")
        .header("session-id", session)
        .body(Full::new(Bytes::from_static(br#"{"model":"gpt-5.5"}"#)))
        .unwrap();
    req.extensions_mut().insert(SessionId::new(session));
    req.extensions_mut().insert(Tenant::new("anonymous"));
    let t: Arc<[Target]> = targets
        .iter()
        .map(|(p, m)| Target::new(Arc::from(*p), Arc::from(*m)))
        .collect();
    req.extensions_mut().insert(RouteTargets::new(t));
    req
}

async fn call(
    pools: &Arc<AccountPools>,
    log: &Log,
    limited: &'static [&'static str],
    used: &'static str,
    req: Request<Full<Bytes>>,
) -> Res {
    AccountResolverLayer::new(pools.clone())
        .layer(upstream(log.clone(), limited, used))
        .oneshot(req)
        .await
        .unwrap()
}

fn accounts(log: &Log) -> Vec<String> {
    log.lock().unwrap().iter().map(|(a, _)| a.clone()).collect()
}

#[tokio::test]
async fn resolved_account_on_response_and_sticky() {
    let (p, log) = (pools(), Log::default());
    let res = call(&p, &log, &[], "10", request("s1", &[("codex", "gpt-5.5")])).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.extensions().get::<ResolvedAccount>(),
        Some(&ResolvedAccount::new("codex", "a"))
    );
    assert_eq!(p.get("codex").unwrap().bound("anonymous\ns1"), Some(0));
}

#[tokio::test]
async fn retry_429_on_next_account() {
    let (p, log) = (pools(), Log::default());
    let res = call(
        &p,
        &log,
        &["a"],
        "10",
        request("s1", &[("codex", "gpt-5.5")]),
    )
    .await;
    assert_eq!(res.status(), 200);
    assert_eq!(accounts(&log), ["a", "b"]);
    assert_eq!(
        res.extensions().get::<ResolvedAccount>(),
        Some(&ResolvedAccount::new("codex", "b"))
    );
    // The exhausted account is skipped afterwards, without a new 429.
    let _ = call(
        &p,
        &log,
        &["a"],
        "10",
        request("s2", &[("codex", "gpt-5.5")]),
    )
    .await;
    assert_eq!(accounts(&log), ["a", "b", "b"]);
}

#[tokio::test]
async fn all_exhausted_gives_the_last_429_then_our_own() {
    let (p, log) = (pools(), Log::default());
    let res = call(
        &p,
        &log,
        &["a", "b"],
        "10",
        request("s", &[("codex", "gpt-5.5")]),
    )
    .await;
    assert_eq!(res.status(), 429);
    assert_eq!(accounts(&log), ["a", "b"]);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert!(
        std::str::from_utf8(&body)
            .unwrap()
            .contains("usage_limit_reached")
    );
    // Nothing left to try: the gateway answers itself, with retry-after.
    let res = call(&p, &log, &[], "10", request("s", &[("codex", "gpt-5.5")])).await;
    assert_eq!(res.status(), 429);
    assert_eq!(accounts(&log).len(), 2);
    let after: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(after > 60, "the announced reset (1 h) is used: {after}");
}

#[tokio::test]
async fn quota_signal_at_rotate_at_moves_the_next_turn() {
    let (p, log) = (pools(), Log::default());
    let res = call(&p, &log, &[], "96", request("s", &[("codex", "gpt-5.5")])).await;
    assert_eq!(res.status(), 200);
    let _ = call(&p, &log, &[], "10", request("s", &[("codex", "gpt-5.5")])).await;
    assert_eq!(accounts(&log), ["a", "b"]);
    assert_eq!(p.get("codex").unwrap().bound("anonymous\ns"), Some(1));
}

#[tokio::test]
async fn later_targets_get_their_model() {
    let (p, log) = (pools(), Log::default());
    let req = request("s", &[("codex", "gpt-5.5"), ("claude", "claude-x")]);
    let res = call(&p, &log, &["a", "b"], "10", req).await;
    assert_eq!(res.status(), 200);
    let log = log.lock().unwrap();
    assert_eq!(log[2].0, "c");
    assert_eq!(&log[2].1[..], br#"{"model":"claude-x"}"#);
    assert_eq!(&log[0].1[..], br#"{"model":"gpt-5.5"}"#);
}

#[tokio::test]
async fn missing_targets_is_a_clear_error() {
    let (p, log) = (pools(), Log::default());
    let req = Request::post("/v1/messages")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let res = call(&p, &log, &[], "10", req).await;
    assert_eq!(res.status(), 500);
    assert!(accounts(&log).is_empty());
}

#[tokio::test]
async fn quota_signal_on_the_response_follows_the_provider_kind() {
    let (p, log) = (pools(), Log::default());
    let res = call(&p, &log, &[], "42", request("s", &[("codex", "gpt-5.5")])).await;
    let signal = res.extensions().get::<QuotaSignal>().copied();
    assert_eq!(signal.map(|s| s.percent_used), Some(0.42));
    // `quota = "none"`: the same headers give no reading.
    let res = call(&p, &log, &[], "42", request("s", &[("claude", "c")])).await;
    assert_eq!(res.extensions().get::<QuotaSignal>(), None);
    assert_eq!(
        res.extensions().get::<ResolvedAccount>(),
        Some(&ResolvedAccount::new("claude", "c"))
    );
    // A final 429 carries a reading of at least 100 %.
    let res = call(
        &p,
        &log,
        &["a", "b"],
        "42",
        request("t", &[("codex", "gpt-5.5")]),
    )
    .await;
    assert_eq!(res.status(), 429);
    let used = res
        .extensions()
        .get::<QuotaSignal>()
        .map(|s| s.percent_used);
    assert!(used.is_some_and(|u| u >= 1.0), "{used:?}");
}

#[tokio::test]
async fn an_anonymous_request_skips_the_relay_but_is_retried_like_any_user_turn() {
    let (p, log) = (pools(), Log::default());
    let mut req = request("anon", &[("codex", "gpt-5.5")]);
    req.extensions_mut().insert(SkipRelay);
    let res = call(&p, &log, &["a"], "10", req).await;
    assert_eq!(res.status(), 200);
    assert_eq!(accounts(&log), ["a", "b"]);
}

fn internal(session: &str) -> Request<Full<Bytes>> {
    let mut req = Request::post("/v1/responses")
        .body(Full::new(Bytes::from_static(br#"{"model":"gpt-5.5"}"#)))
        .unwrap();
    req.extensions_mut().insert(SummaryCall);
    req.extensions_mut().insert(ComboName::new("relay"));
    req.extensions_mut().insert(SessionId::new(session));
    req.extensions_mut().insert(Tenant::new("anonymous"));
    req
}

async fn call_internal(
    pools: &Arc<AccountPools>,
    log: &Log,
    limited: &'static [&'static str],
    used: &'static str,
    session: &str,
) -> Res {
    AccountResolverLayer::new(pools.clone())
        .routes(routes())
        .layer(upstream(log.clone(), limited, used))
        .oneshot(internal(session))
        .await
        .unwrap()
}

#[tokio::test]
async fn summary_calls_follow_the_session_without_moving_it() {
    let (p, log) = (pools(), Log::default());
    // The session lives on b (a answered 429 and is exhausted; it comes back later).
    let _ = call(
        &p,
        &log,
        &["a"],
        "10",
        request("s", &[("codex", "gpt-5.5")]),
    )
    .await;
    assert_eq!(accounts(&log), ["a", "b"]);
    // The summary call (no RouteTargets, only the combo) goes to the session's account.
    let res = call_internal(&p, &log, &[], "96", "s").await;
    assert_eq!(res.status(), 200);
    assert_eq!(accounts(&log), ["a", "b", "b"]);
    // Its 96 % reading is recorded but does not exhaust b: the session stays there.
    let codex = p.get("codex").unwrap();
    assert_eq!(codex.snapshot(SystemTime::now())[1].used, Some(0.96));
    assert_eq!(codex.snapshot(SystemTime::now())[1].exhausted_until, None);
    let _ = call(&p, &log, &[], "10", request("s", &[("codex", "gpt-5.5")])).await;
    assert_eq!(accounts(&log), ["a", "b", "b", "b"]);
}

#[tokio::test]
async fn a_summary_call_gets_one_attempt_and_binds_nothing() {
    let (p, log) = (pools(), Log::default());
    // A 429 to the summary call: no retry on another account, the 429 goes back.
    let res = call_internal(&p, &log, &["a"], "10", "fresh").await;
    assert_eq!(res.status(), 429);
    assert_eq!(accounts(&log), ["a"]);
    // It did exhaust a (a real 429), and bound no session.
    let codex = p.get("codex").unwrap();
    assert!(
        codex.snapshot(SystemTime::now())[0]
            .exhausted_until
            .is_some()
    );
    assert_eq!(codex.bound("anonymous\nfresh"), None);
    // Without a routing table, an internal request cannot be routed: a clear 500.
    let res = AccountResolverLayer::new(p.clone())
        .layer(upstream(log.clone(), &[], "10"))
        .oneshot(internal("x"))
        .await
        .unwrap();
    assert_eq!(res.status(), 500);
}

#[test]
fn session_keys_come_from_the_extensions_only() {
    let mut req = Request::new(());
    req.headers_mut()
        .insert("session-id", HeaderValue::from_static("from-header"));
    assert_eq!(session_key(req.extensions()), None, "headers are not read");
    req.extensions_mut().insert(SessionId::new("ext"));
    assert_eq!(session_key(req.extensions()), None, "no tenant, no key");
    req.extensions_mut().insert(Tenant::new("t1"));
    assert_eq!(session_key(req.extensions()).as_deref(), Some("t1\next"));
}

/// Three Codex accounts, `a`, `b`, `c`.
fn pools3() -> Arc<AccountPools> {
    let accounts: String = ["a", "b", "c"]
        .iter()
        .map(|id| format!("[[providers.accounts]]\nid = \"{id}\"\napi_key = \"k{id}\"\n"))
        .collect();
    let text = format!("[[providers]]\nname = \"codex\"\nbase_url = \"http://up/v1\"\n{accounts}");
    Arc::new(AccountPools::from_config(
        &Config::from_toml_str(&text, |_| None).unwrap(),
    ))
}

/// What an account of the scripted upstream answers: status, extra header, body.
type Script = &'static [(&'static str, u16, &'static str)];

/// A fake upstream answering as `script` says for the accounts it lists, 200 otherwise.
async fn call_scripted(pools: &Arc<AccountPools>, log: &Log, script: Script, session: &str) -> Res {
    let log2 = log.clone();
    let svc = service_fn(move |req: Request<Full<Bytes>>| {
        let log = log2.clone();
        async move {
            let acct = req.extensions().get::<ResolvedAccount>().unwrap().clone();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            log.lock().unwrap().push((acct.account().to_string(), body));
            let (status, body) = script
                .iter()
                .find(|(a, _, _)| **a == **acct.account())
                .map_or((200, "ok"), |(_, s, b)| (*s, *b));
            let mut res = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
            *res.status_mut() = StatusCode::from_u16(status).unwrap();
            Ok::<_, Infallible>(res)
        }
    });
    AccountResolverLayer::new(pools.clone())
        .layer(svc)
        .oneshot(request(session, &[("codex", "gpt-5.5")]))
        .await
        .unwrap()
}

async fn text(res: Res) -> String {
    let body = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

const USAGE_LIMIT_400: &str = r#"{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","resets_in_seconds":1800}}"#;
const BAD_KEY: &str = r#"{"error":{"message":"Incorrect API key provided: sk-****. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
const BAD_PARAM: &str = r#"{"error":{"message":"Unsupported parameter: 'temperature' is not supported with this model.","type":"invalid_request_error","param":"temperature","code":"unsupported_parameter"}}"#;

#[tokio::test]
async fn a_quota_body_in_another_status_rotates_until_its_reset() {
    let (p, log) = (pools3(), Log::default());
    let res = call_scripted(&p, &log, &[("a", 400, USAGE_LIMIT_400)], "s").await;
    assert_eq!(res.status(), 200);
    assert_eq!(accounts(&log), ["a", "b"]);
    assert_eq!(p.get("codex").unwrap().bound("anonymous\ns"), Some(1));
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
            res.extensions().get::<ResolvedAccount>(),
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
    assert!(text(res).await.contains("refused the credential"));
    assert_eq!(p.get("codex").unwrap().bound("anonymous\ns"), None);
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
    assert_eq!(p.get("codex").unwrap().bound("anonymous\nt"), None);
}

#[tokio::test]
async fn other_errors_reach_the_client_unretried_and_bind_nothing() {
    let (p, log) = (pools3(), Log::default());
    let res = call_scripted(&p, &log, &[("a", 400, BAD_PARAM)], "s").await;
    assert_eq!(res.status(), 400);
    assert_eq!(accounts(&log), ["a"]);
    assert_eq!(
        res.extensions().get::<ResolvedAccount>(),
        Some(&ResolvedAccount::new("codex", "a"))
    );
    assert_eq!(text(res).await, BAD_PARAM);
    assert_eq!(p.get("codex").unwrap().bound("anonymous\ns"), None);
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

/// End to end (a gateway server, the simulated provider, a real client): new sessions fill the
/// first available account, a bound session stays on its account.
#[tokio::test]
async fn fill_first_and_sticky_sessions_over_loopback() {
    use context_relay_sim::SimProvider;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .account("acct-b", "key-b")
        .start()
        .await
        .unwrap();
    let config = Config::from_toml_str(
        &format!(
            r#"
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
        |_| None,
    )
    .unwrap();
    let gateway = crate::Gateway::new(config).unwrap();
    let server = gateway.spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http();
    let post = |session: Option<&str>| {
        let mut b = Request::post(format!("{}/v1/chat/completions", server.url()))
            .header("authorization", "Bearer client-key");
        if let Some(s) = session {
            b = b.header("session-id", s);
        }
        let req = b
            .body(Full::new(Bytes::from_static(
                br#"{"model":"codex-relay","messages":[{"role":"user","content":"hi"}]}"#,
            )))
            .unwrap();
        let client = client.clone();
        async move { client.request(req).await.unwrap().status() }
    };
    let served = || -> Vec<String> {
        sim.requests()
            .iter()
            .map(|r| r.account.clone().unwrap_or_default())
            .collect()
    };
    // s1 lands on acct-b: acct-a answers 429 once.
    sim.set_used("acct-a", 100.0);
    assert_eq!(post(Some("s1")).await, 200);
    assert_eq!(served(), ["acct-a", "acct-b"]);
    // acct-a recovers (its reset passed).
    sim.set_used("acct-a", 0.0);
    gateway
        .pools
        .get("codex")
        .unwrap()
        .mark_exhausted(0, std::time::UNIX_EPOCH);
    sim.clear_requests();
    // s1 stays on acct-b; new sessions and session-less requests fill acct-a first.
    assert_eq!(post(Some("s1")).await, 200);
    assert_eq!(post(Some("s2")).await, 200);
    assert_eq!(post(None).await, 200);
    assert_eq!(post(Some("s1")).await, 200);
    assert_eq!(served(), ["acct-b", "acct-a", "acct-a", "acct-b"]);
    server.shutdown().await.unwrap();
    sim.shutdown().await;
}

/// The gateway's own 504 after the head timeout is not tried on another account: the client
/// would wait the whole timeout again. A provider's own 5xx still is.
#[tokio::test]
async fn a_head_timeout_is_not_retried_on_another_account() {
    for (timed_out, tried) in [(true, 1), (false, 2)] {
        let (p, log) = (pools3(), Log::default());
        let log2 = log.clone();
        let svc = service_fn(move |req: Request<Full<Bytes>>| {
            let log = log2.clone();
            async move {
                let acct = req.extensions().get::<ResolvedAccount>().unwrap().clone();
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

/// A body ComboService rewrote: a later target's model goes where the first one's was
/// written, every other byte (a nested `"model"` included) as the client sent it.
#[tokio::test]
async fn a_later_target_gets_its_model_where_the_first_was_written() {
    use crate::collect::Buffered;
    use crate::model::{find_model, rewrite_model};

    let (p, log) = (pools(), Log::default());
    let client = br#"{ "model" : "relay-combo", "tools": [{"model": "kept"}], "n": 1.50 }"#;
    let field = find_model(client).unwrap();
    let (body, written) = rewrite_model(
        Buffered::Chunk(Bytes::from_static(client)),
        &field,
        &Arc::from("gpt-5.5"),
    );
    let mut req = request("s", &[("codex", "gpt-5.5"), ("claude", "claude-x")]);
    *req.body_mut() = Full::new(body);
    let targets = req.extensions_mut().get_mut::<RouteTargets>().unwrap();
    targets.written = Some(written);
    let res = call(&p, &log, &["a", "b"], "10", req).await;
    assert_eq!(res.status(), 200);
    let log = log.lock().unwrap();
    assert_eq!(
        &log[0].1[..],
        br#"{ "model" : "gpt-5.5", "tools": [{"model": "kept"}], "n": 1.50 }"#
    );
    assert_eq!(
        &log[2].1[..],
        br#"{ "model" : "claude-x", "tools": [{"model": "kept"}], "n": 1.50 }"#
    );
}
