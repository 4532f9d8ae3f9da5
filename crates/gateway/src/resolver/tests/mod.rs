//! Tests of the account resolver over `tower::service_fn` upstreams.

use std::convert::Infallible;
use std::sync::Mutex;

use http::HeaderValue;
use http_body_util::{BodyExt, Full};
use tower::service_fn;

use super::*;
use crate::chunks::Chunks;
use crate::combo::Target;
use crate::config::Config;
use crate::routing::Routing;
use context_relay_core::QuotaSignal;
use context_relay_tower::SkipRelay;

mod errors;
mod routing;

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
    Request<Chunks>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    service_fn(move |req: Request<Chunks>| {
        let log = log.clone();
        async move {
            let acct = req.extensions().fact::<ResolvedAccount>().unwrap().clone();
            let ep = Routing::endpoint(req.extensions()).unwrap().clone();
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
    // As ComboService sets them.
    req.extensions_mut().set_fact(SessionId::new(session));
    req.extensions_mut().set_fact(Tenant::new("anonymous"));
    let t: Arc<[Target]> = targets
        .iter()
        .map(|(p, m)| Target::new(Arc::from(*p), Arc::from(*m)))
        .collect();
    Routing::set_targets(req.extensions_mut(), crate::combo::RouteTargets::new(t));
    req
}

async fn call<B>(
    pools: &Arc<AccountPools>,
    log: &Log,
    limited: &'static [&'static str],
    used: &'static str,
    req: Request<B>,
) -> Res
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
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
        res.extensions().fact::<ResolvedAccount>(),
        Some(&ResolvedAccount::new("codex", "a"))
    );
    assert_eq!(
        p.get("codex").unwrap().bound(&"anonymous\ns1".into()),
        Some(0)
    );
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
        res.extensions().fact::<ResolvedAccount>(),
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

/// The account after a 429 gets the client's head whole: its own values, the gateway's
/// (whose map the first attempt took, when they are all the gateway's) and an embedding
/// application's (whose map is copied), and nothing the first attempt carried for its account.
#[tokio::test]
async fn the_next_account_gets_every_value_the_client_request_carried() {
    #[derive(Debug, Clone, PartialEq)]
    struct Own(u8);
    type Seen = (
        String,
        Option<Tenant>,
        Option<SessionId>,
        Option<Own>,
        usize,
    );
    for own in [None, Some(Own(7))] {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let upstream = service_fn({
            let seen = seen.clone();
            move |req: Request<Chunks>| {
                let ext = req.extensions();
                let account = ext.fact::<ResolvedAccount>().unwrap().account().to_string();
                let first = account == "a";
                let Some(endpoint) = Routing::endpoint(ext) else {
                    panic!("no endpoint")
                };
                assert_eq!(endpoint.base_url.as_str(), "http://up/v1");
                assert_eq!(req.headers()["session-id"], "s1");
                seen.lock().unwrap().push((
                    account,
                    ext.fact().cloned(),
                    ext.fact().cloned(),
                    ext.get().cloned(),
                    ext.len(),
                ));
                let mut res = Response::new(Full::new(Bytes::from_static(if first {
                    br#"{"error":{"type":"usage_limit_reached","resets_in_seconds":60}}"#
                } else {
                    b"ok"
                })));
                if first {
                    *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                }
                std::future::ready(Ok::<_, Infallible>(res))
            }
        });
        let mut req = request("s1", &[("codex", "gpt-5.5")]);
        if let Some(own) = own.clone() {
            req.extensions_mut().insert(own);
        }
        let res = AccountResolverLayer::new(pools())
            .layer(upstream)
            .oneshot(req)
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        // `Facts` (Tenant, SessionId, ServingModel, ResolvedAccount), UpstreamEndpoint and
        // `Own`.
        let count = 2 + usize::from(own.is_some());
        let expected = |account: &str| {
            let (tenant, session) = (Tenant::new("anonymous"), SessionId::new("s1"));
            (
                account.to_owned(),
                Some(tenant),
                Some(session),
                own.clone(),
                count,
            )
        };
        assert_eq!(
            *seen.lock().unwrap(),
            [expected("a"), expected("b")],
            "{own:?}"
        );
    }
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
    // A wait that long is a used-up quota window, named as the ChatGPT backend names one:
    // Codex CLI shows it at once instead of retrying after each `retry-after` for hours.
    let body: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["error"]["type"], "usage_limit_reached", "{body}");
}

#[tokio::test]
async fn quota_signal_at_rotate_at_moves_the_next_turn() {
    let (p, log) = (pools(), Log::default());
    let res = call(&p, &log, &[], "96", request("s", &[("codex", "gpt-5.5")])).await;
    assert_eq!(res.status(), 200);
    let _ = call(&p, &log, &[], "10", request("s", &[("codex", "gpt-5.5")])).await;
    assert_eq!(accounts(&log), ["a", "b"]);
    assert_eq!(
        p.get("codex").unwrap().bound(&"anonymous\ns".into()),
        Some(1)
    );
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
    let signal = res.extensions().fact::<QuotaSignal>().copied();
    assert_eq!(signal.map(|s| s.percent_used), Some(0.42));
    // `quota = "none"`: the same headers give no reading.
    let res = call(&p, &log, &[], "42", request("s", &[("claude", "c")])).await;
    assert_eq!(res.extensions().fact::<QuotaSignal>(), None);
    assert_eq!(
        res.extensions().fact::<ResolvedAccount>(),
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
        .fact::<QuotaSignal>()
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
    assert_eq!(codex.bound(&"anonymous\nfresh".into()), None);
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
    assert_eq!(session_key(req.extensions()), Some("t1\next".into()));
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
    let svc = service_fn(move |req: Request<Chunks>| {
        let log = log2.clone();
        async move {
            let acct = req.extensions().fact::<ResolvedAccount>().unwrap().clone();
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
