//! AccountResolver: picks the provider account of each attempt, retries a 429 on the other
//! accounts, and tells the services around it who served.
//!
//! It sits between GenerationLayer and InjectionLayer (DESIGN §3), so a retry on a new account
//! passes through InjectionLayer again, which is exactly where a handoff gets injected:
//!
//! ```text
//! ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ Upstream
//!                 reads ResolvedAccount  sets ResolvedAccount + UpstreamEndpoint on the
//!                 from the response      request, and ResolvedAccount on the response
//! ```
//!
//! For each request (which needs a [`RouteTargets`] extension, set by
//! [`ComboService`](crate::combo::ComboService)):
//! 1. the session id is the [`SessionId`] extension, else the first of the headers
//!    `x-session-id`, `x-claude-code-session-id`, `session-id`, `session_id`, `thread-id`
//!    (scoped by the [`Tenant`] extension when there is one);
//! 2. targets are tried in order; within a target's provider the [`ProviderPool`] picks the
//!    session's account or the first available one;
//! 3. the attempt carries [`ResolvedAccount`] and an [`UpstreamEndpoint`] (base URL and the
//!    account's credential, applied by the upstream client after it strips the client's);
//!    the `model` is rewritten when a later target names another model;
//! 4. quota headers of every response are recorded (a signal at or above `rotate_at` exhausts
//!    the account for the next requests); a 429 exhausts the account until its announced reset
//!    and the same request is sent once to each other available account;
//! 5. when every account is exhausted the client gets the last upstream 429 (or a 429 of the
//!    gateway when no account could be tried), with `ResolvedAccount` of the last attempt.
//!
//! The request body is collected once and replayed from memory on each attempt.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use context_relay_tower::{ResolvedAccount, SessionId, Tenant};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, Limited};
use tower::ServiceExt;
use tower_layer::Layer;
use tower_service::Service;

use crate::combo::{BoxError, RouteTargets, Target};
use crate::config::DEFAULT_MAX_REQUEST_BYTES;
use crate::error::{ErrorShape, error_response};
use crate::model::{find_model, replace_model};
use crate::pool::{AccountPools, ProviderPool, reset_or_default};
use crate::quota;
use crate::upstream::UpstreamEndpoint;

/// Headers a session id is read from, in order (DESIGN §7).
pub const SESSION_HEADERS: [&str; 5] = [
    "x-session-id",
    "x-claude-code-session-id",
    "session-id",
    "session_id",
    "thread-id",
];
/// Longest session id kept (longer ones are cut).
const MAX_SESSION_LEN: usize = 128;
/// Largest 429 body read to learn the reset (they are a few hundred bytes).
const MAX_429_BODY: usize = 64 * 1024;

/// Layer building [`AccountResolver`].
#[derive(Debug, Clone)]
pub struct AccountResolverLayer {
    pools: Arc<AccountPools>,
    max_body_bytes: usize,
}

impl AccountResolverLayer {
    /// A resolver over `pools`.
    pub fn new(pools: Arc<AccountPools>) -> Self {
        Self {
            pools,
            max_body_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }

    /// Largest request body collected for replay (8 MiB); larger ones get a 413.
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body_bytes = limit;
        self
    }
}

impl<S> Layer<S> for AccountResolverLayer {
    type Service = AccountResolver<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AccountResolver {
            inner,
            pools: self.pools.clone(),
            max_body_bytes: self.max_body_bytes,
        }
    }
}

/// See the [module docs](self).
#[derive(Debug, Clone)]
pub struct AccountResolver<S> {
    inner: S,
    pools: Arc<AccountPools>,
    max_body_bytes: usize,
}

impl<S> AccountResolver<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes `self`, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The future of [`AccountResolver`].
pub type ResponseFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, ResBody> Service<Request<B>> for AccountResolver<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Either<ResBody, Full<Bytes>>>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let pools = self.pools.clone();
        let limit = self.max_body_bytes;
        Box::pin(resolve(inner, pools, limit, req))
    }
}

/// The session id of a request: the extension, else the first non-blank session header.
pub fn session_id<B>(req: &Request<B>) -> Option<Arc<str>> {
    let raw: Option<Arc<str>> = req
        .extensions()
        .get::<SessionId>()
        .map(|s| s.0.clone())
        .filter(|s| !s.trim().is_empty())
        .or_else(|| {
            SESSION_HEADERS.iter().find_map(|h| {
                let v = req.headers().get(*h)?.to_str().ok()?.trim();
                (!v.is_empty()).then(|| Arc::from(v))
            })
        });
    let raw = raw?;
    let trimmed = raw.trim();
    let cut: String = trimmed.chars().take(MAX_SESSION_LEN).collect();
    let key = match req.extensions().get::<Tenant>() {
        Some(t) => format!("{}\n{cut}", t.0),
        None => cut,
    };
    Some(Arc::from(key))
}

async fn resolve<S, B, ResBody>(
    mut inner: S,
    pools: Arc<AccountPools>,
    limit: usize,
    req: Request<B>,
) -> Result<Response<Either<ResBody, Full<Bytes>>>, S::Error>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let shape = ErrorShape::for_path(req.uri().path());
    let session = session_id(&req);
    let (parts, body) = req.into_parts();
    let Some(targets) = parts.extensions.get::<RouteTargets>().cloned() else {
        return Ok(own_error(
            shape,
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "the gateway could not route this request: no RouteTargets extension (ComboService must run before AccountResolver)",
        ));
    };
    let body = match Limited::new(body, limit).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Ok(own_error(
                shape,
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                &format!("the request body is larger than the gateway's limit of {limit} bytes"),
            ));
        }
        Err(e) => {
            return Ok(own_error(
                shape,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("the request body could not be read: {e}"),
            ));
        }
    };
    let first_model = targets.0.first().map(|t| t.model.clone());

    let mut last_429: Option<(Response<Full<Bytes>>, ResolvedAccount)> = None;
    let mut providers_seen: Vec<Arc<ProviderPool>> = Vec::new();
    for target in targets.0.iter() {
        let Some(pool) = pools.get(&target.provider).cloned() else {
            tracing::warn!(provider = %target.provider, "route target names an unknown provider");
            continue;
        };
        if !providers_seen.iter().any(|p| Arc::ptr_eq(p, &pool)) {
            providers_seen.push(pool.clone());
        }
        let body = body_for_target(&body, target, first_model.as_deref());
        let mut tried: Vec<usize> = Vec::new();
        loop {
            let now = SystemTime::now();
            let Some(idx) = pool.pick(session.as_deref(), &tried, now) else {
                break;
            };
            tried.push(idx);
            let Some(account) = pool.accounts().get(idx) else {
                break;
            };
            let resolved = ResolvedAccount::new(pool.name().clone(), account.id.clone());
            let attempt = attempt_request(&parts, body.clone(), &pool, idx, resolved.clone());
            if tried.len() > 1 {
                metrics::counter!("context_relay_gateway_retries_total", "provider" => pool.name().to_string())
                    .increment(1);
            }
            let mut res = inner.ready().await?.call(attempt).await?;
            let now = SystemTime::now();
            let status = res.status();
            metrics::counter!(
                "context_relay_gateway_upstream_responses_total",
                "provider" => pool.name().to_string(),
                "account" => account.id.to_string(),
                "status" => status.as_str().to_owned()
            )
            .increment(1);
            if let Some(signal) = quota::from_headers(pool.quota_format(), res.headers(), now) {
                metrics::gauge!(
                    "context_relay_gateway_account_used_ratio",
                    "provider" => pool.name().to_string(),
                    "account" => account.id.to_string()
                )
                .set(signal.percent_used);
                if pool.observe(idx, &signal, now) {
                    tracing::info!(
                        provider = %pool.name(), account = %account.id, used = signal.percent_used,
                        "account reached rotate_at; new turns go to the next account"
                    );
                    exhausted_metric(&pool, &account.id, "quota");
                }
            }
            if status != StatusCode::TOO_MANY_REQUESTS {
                if let Some(s) = &session {
                    pool.bind(s, idx, now);
                }
                res.extensions_mut().insert(resolved);
                return Ok(res.map(Either::Left));
            }

            let (res_parts, res_body) = res.into_parts();
            let bytes = match Limited::new(res_body, MAX_429_BODY).collect().await {
                Ok(c) => c.to_bytes(),
                Err(_) => Bytes::new(),
            };
            let until = reset_or_default(
                quota::reset_of_429(pool.quota_format(), &res_parts.headers, &bytes, now),
                now,
            );
            pool.mark_exhausted(idx, until);
            exhausted_metric(&pool, &account.id, "429");
            tracing::info!(
                provider = %pool.name(), account = %account.id,
                error = quota::error_type_of_429(&bytes).as_deref().unwrap_or("-"),
                "429 from upstream; account exhausted, retrying on the next available account"
            );
            last_429 = Some((Response::from_parts(res_parts, Full::new(bytes)), resolved));
        }
    }

    if let Some((mut res, resolved)) = last_429 {
        res.extensions_mut().insert(resolved);
        return Ok(res.map(Either::Right));
    }
    let now = SystemTime::now();
    let names: Vec<&str> = providers_seen.iter().map(|p| &**p.name()).collect();
    let next = providers_seen
        .iter()
        .filter_map(|p| p.next_reset(now))
        .min();
    let wait = next
        .and_then(|t| t.duration_since(now).ok())
        .map_or(60, |d| d.as_secs().max(1));
    let mut res = own_error(
        shape,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        &format!(
            "every account of {} is exhausted; the next one becomes available in about {wait} s",
            if names.is_empty() {
                "the route".to_owned()
            } else {
                names.join(", ")
            }
        ),
    );
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(wait));
    Ok(res)
}

fn exhausted_metric(pool: &ProviderPool, account: &str, reason: &'static str) {
    metrics::counter!(
        "context_relay_gateway_account_exhausted_total",
        "provider" => pool.name().to_string(),
        "account" => account.to_owned(),
        "reason" => reason
    )
    .increment(1);
}

/// The body for `target`: the model is rewritten when this target names another model than
/// the one ComboService wrote (the first target's).
fn body_for_target(body: &Bytes, target: &Target, first_model: Option<&str>) -> Bytes {
    if first_model == Some(&*target.model) {
        return body.clone();
    }
    match find_model(body) {
        Ok(field) if field.value != *target.model => {
            replace_model(body, &field, &target.model).unwrap_or_else(|| body.clone())
        }
        _ => body.clone(),
    }
}

fn attempt_request(
    parts: &http::request::Parts,
    body: Bytes,
    pool: &ProviderPool,
    idx: usize,
    resolved: ResolvedAccount,
) -> Request<Full<Bytes>> {
    let len = body.len();
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = parts.uri.clone();
    *req.version_mut() = parts.version;
    *req.headers_mut() = parts.headers.clone();
    *req.extensions_mut() = parts.extensions.clone();
    req.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    let credential: Option<(HeaderName, HeaderValue)> =
        pool.accounts().get(idx).map(|a| a.credential());
    req.extensions_mut().insert(UpstreamEndpoint {
        base_url: pool.base_url().clone(),
        credential,
    });
    req.extensions_mut().insert(resolved);
    req
}

fn own_error<B>(
    shape: ErrorShape,
    status: StatusCode,
    openai_kind: &str,
    message: &str,
) -> Response<Either<B, Full<Bytes>>> {
    let kind = match (shape, status) {
        (ErrorShape::OpenAi, _) => openai_kind,
        (ErrorShape::Anthropic, StatusCode::TOO_MANY_REQUESTS) => "rate_limit_error",
        (ErrorShape::Anthropic, StatusCode::PAYLOAD_TOO_LARGE) => "request_too_large",
        (ErrorShape::Anthropic, StatusCode::BAD_REQUEST) => "invalid_request_error",
        (ErrorShape::Anthropic, _) => "api_error",
    };
    error_response(shape, status, kind, message).map(Either::Right)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Mutex;

    use tower::service_fn;

    use super::*;
    use crate::config::Config;

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
[[providers.accounts]]
id = "c"
api_key = "kc"
"#,
            |_| None,
        )
        .unwrap();
        Arc::new(AccountPools::from_config(&c))
    }

    type Log = Arc<Mutex<Vec<(String, Bytes)>>>;

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
                log.lock().unwrap().push((acct.account.to_string(), body));
                let mut res = if limited.contains(&&*acct.account) {
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

    fn request(session: &str, targets: &[(&str, &str)]) -> Request<Full<Bytes>> {
        let mut req = Request::post("/v1/responses")
            .header("session-id", session)
            .body(Full::new(Bytes::from_static(br#"{"model":"gpt-5.5"}"#)))
            .unwrap();
        let t: Arc<[Target]> = targets
            .iter()
            .map(|(p, m)| Target {
                provider: Arc::from(*p),
                model: Arc::from(*m),
            })
            .collect();
        req.extensions_mut().insert(RouteTargets(t));
        req
    }

    async fn call(
        pools: &Arc<AccountPools>,
        log: &Log,
        limited: &'static [&'static str],
        used: &'static str,
        req: Request<Full<Bytes>>,
    ) -> Response<Either<Full<Bytes>, Full<Bytes>>> {
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
        assert_eq!(p.get("codex").unwrap().bound("s1"), Some(0));
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
        assert_eq!(p.get("codex").unwrap().bound("s"), Some(1));
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

    #[test]
    fn session_ids() {
        let mut req = Request::new(());
        assert_eq!(session_id(&req), None);
        req.headers_mut()
            .insert("thread-id", HeaderValue::from_static("t"));
        req.headers_mut()
            .insert("session-id", HeaderValue::from_static("  "));
        assert_eq!(session_id(&req).as_deref(), Some("t"));
        req.headers_mut()
            .insert("x-claude-code-session-id", HeaderValue::from_static("cc"));
        assert_eq!(session_id(&req).as_deref(), Some("cc"));
        req.extensions_mut().insert(SessionId::new("ext"));
        assert_eq!(session_id(&req).as_deref(), Some("ext"));
        req.extensions_mut().insert(Tenant::new("t1"));
        assert_eq!(session_id(&req).as_deref(), Some("t1\next"));
        let long = "x".repeat(300);
        let mut req = Request::new(());
        req.headers_mut()
            .insert("x-session-id", HeaderValue::from_str(&long).unwrap());
        assert_eq!(session_id(&req).unwrap().len(), 128);
    }
}
