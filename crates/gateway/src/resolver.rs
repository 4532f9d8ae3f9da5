//! AccountResolver: picks the provider account of each attempt, moves a request that an
//! account cannot serve (quota, refused key, provider failure) to the next one, and tells the
//! services around it who served.
//!
//! It sits between GenerationLayer and InjectionLayer, so a retry on a new account
//! passes through InjectionLayer again, which is exactly where a handoff gets injected:
//!
//! ```text
//! ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ Upstream
//!                 reads ResolvedAccount  sets ResolvedAccount + UpstreamEndpoint on the
//!                 and QuotaSignal from   request, ResolvedAccount + QuotaSignal on the
//!                 the response           response
//! ```
//!
//! For each request:
//! 1. the routing targets are the request's [`RouteTargets`] (in its
//!    [`Routing`], set by [`ComboService`](crate::combo::ComboService)), else the targets of its [`ComboName`]
//!    (internal requests such as the relay's summary call carry only the combo);
//! 2. the session is `(tenant, session id)`: the [`Tenant`] and [`SessionId`] facts, which
//!    ComboService derives once per request (the relay's summary call carries those of the
//!    session it summarises), so that a session sticks to its account whatever the client
//!    sends; a request without them is not sticky;
//! 3. targets are tried in order; within a target's provider the [`ProviderPool`] picks the
//!    session's account or the first available one;
//! 4. the attempt carries [`ResolvedAccount`], [`ServingModel`](context_relay_tower::ServingModel) (the target as
//!    `provider/model`: the relay recognises a session that falls through to another target as
//!    a model switch) and an [`UpstreamEndpoint`] (base URL and the account's credential,
//!    applied by the upstream client after it strips the client's); the `model` is rewritten
//!    when a later target names another model;
//! 5. the quota signal of every response is read with the provider's `quota` kind
//!    (`context_relay_core::quota`) and put on the response as a
//!    [`QuotaSignal`](context_relay_core::QuotaSignal) extension, so GenerationLayer sees the
//!    same per-provider reading; a signal at or above `rotate_at`
//!    exhausts the account for the next requests;
//! 6. the body of every error answer is read ahead (at most 64 KiB, decoded, and replayed
//!    to the client whole) and judged by [`verdict`]: a 429 or a quota error body in
//!    any status (Codex `usage_limit_reached`, `rate_limit_exceeded`) exhausts the account
//!    until its announced reset; a 401/403 disables it for a back-off (logged at error level,
//!    counted in `context_relay_gateway_account_refused_total`); either way the same request
//!    goes on to the next available account. A 5xx (or the upstream client's 502 for a
//!    connection error) is retried once on the next account: nothing reached the client yet.
//!    Any other error answer goes to the client unretried;
//! 7. a session is bound to the account that served it only on a 2xx, so a failing account
//!    never captures a session; a 2xx stream that ends with a quota error event exhausts its
//!    account when it ends ([`InBandQuota`], told by the answer's usage reader);
//! 8. when no account is left the client gets the last such answer (a 429 with its reset, or
//!    a 5xx), a 502 of the gateway when every account's credential was refused (the
//!    provider's 401 would tell the client that *its* key is wrong), or a 429 of the gateway
//!    with `retry-after` when no account could be tried; always with `ResolvedAccount` of the
//!    last attempt.
//!
//! Requests marked [`SummaryCall`] (the summary call GenerationLayer sends through this stack)
//! go to the account and target that served the turn they summarise, as they name them
//! ([`ResolvedAccount`] and [`ServingModel`](context_relay_tower::ServingModel); see
//! [`pinned`]), whatever the pool thinks of that account now, and are not user traffic: one
//! attempt only, no re-binding of the session, and the account is only marked exhausted when
//! the summary call itself got a 429. One that names no account is routed like its session's
//! user requests.
//!
//! The body comes buffered and bounded by ComboService, as one frame (or the few chunks a
//! large body is kept in): it is taken without a copy and replayed from memory on each
//! attempt. A later target's `model` is written where
//! ComboService wrote the first one's ([`WrittenModel`]), without searching the body again.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use context_relay_core::quota;
use context_relay_tower::{ComboName, FactsExt, ResolvedAccount, SessionId, SummaryCall, Tenant};
use http::{Extensions, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Either;
use smallvec::SmallVec;
use tower::ServiceExt;
use tower_layer::Layer;
use tower_service::Service;

use crate::chunks::Chunks;
use crate::combo::{BoxError, Routes};
use crate::console::Activity;
use crate::error::{ErrorKind, ErrorShape, error_response_as};
use crate::peek::{Peeked, peek};
use crate::pool::{AccountPools, ProviderPool, SessionKey};
use crate::routing::Routing;
use crate::upstream::HeadTimedOut;

pub(crate) use rotate::InBandQuota;
use rotate::{Attempt, UnavailableRetry, record_usage};
use verdict::{Verdict, classify, decoded_error_body, error_type};

/// Largest error body read to learn what it says (they are a few hundred bytes; a longer one
/// is no quota or credential error and is passed on unread).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Layer building [`AccountResolver`].
#[derive(Debug, Clone)]
pub(crate) struct AccountResolverLayer {
    pools: Arc<AccountPools>,
    routes: Option<Arc<Routes>>,
    affinity: Option<AffinityStore>,
    activity: Activity,
}

impl AccountResolverLayer {
    /// A resolver over `pools`.
    pub(crate) fn new(pools: Arc<AccountPools>) -> Self {
        Self {
            pools,
            routes: None,
            affinity: None,
            activity: Activity::default(),
        }
    }

    /// Tells `activity` of every session that moves to another account, every request the
    /// relay acted on, and every account that leaves rotation.
    pub(crate) fn activity(mut self, activity: Activity) -> Self {
        self.activity = activity;
        self
    }

    /// Binds a session the pools do not know to the account of its affinity in `store` (see
    /// [`restore`]), so that a restart keeps sessions where they were.
    pub(crate) fn affinity_from(mut self, store: AffinityStore) -> Self {
        self.affinity = Some(store);
        self
    }

    /// Routes requests that carry a [`ComboName`] but no [`RouteTargets`] (the relay's summary
    /// call) to that combo's targets. Without it such requests get a 500.
    pub(crate) fn routes(mut self, routes: Arc<Routes>) -> Self {
        self.routes = Some(routes);
        self
    }
}

impl<S> Layer<S> for AccountResolverLayer {
    type Service = AccountResolver<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AccountResolver {
            inner,
            pools: self.pools.clone(),
            routes: self.routes.clone(),
            affinity: self.affinity.clone(),
            activity: self.activity.clone(),
        }
    }
}

/// See the [module docs](self).
#[derive(Debug, Clone)]
pub(crate) struct AccountResolver<S> {
    inner: S,
    pools: Arc<AccountPools>,
    routes: Option<Arc<Routes>>,
    affinity: Option<AffinityStore>,
    activity: Activity,
}

/// The future of [`AccountResolver`].
pub(crate) type ResponseFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, ResBody> Service<Request<B>> for AccountResolver<S>
where
    S: Service<Request<Chunks>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Either<ResBody, Peeked<ResBody>>>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let pools = self.pools.clone();
        let routes = self.routes.clone();
        let shared = Shared {
            affinity: self.affinity.clone(),
            activity: self.activity.clone(),
        };
        Box::pin(resolve(inner, pools, routes, shared, req))
    }
}

/// What every request of a resolver shares besides the pools and routes.
struct Shared {
    affinity: Option<AffinityStore>,
    activity: Activity,
}

/// The pool key of a request's session: its tenant and session id, so that two tenants
/// sending the same session id never share an account binding. `None` without a session.
///
/// Both come from the [`Tenant`] and [`SessionId`] facts: the resolver derives no
/// identity of its own.
pub(crate) fn session_key(extensions: &Extensions) -> Option<SessionKey> {
    let session = extensions.fact::<SessionId>()?;
    let tenant = extensions.fact::<Tenant>()?;
    Some(SessionKey::new(tenant.0.clone(), session.0.clone()))
}

async fn resolve<S, B, ResBody>(
    mut inner: S,
    pools: Arc<AccountPools>,
    routes: Option<Arc<Routes>>,
    shared: Shared,
    req: Request<B>,
) -> Result<Response<Either<ResBody, Peeked<ResBody>>>, S::Error>
where
    S: Service<Request<Chunks>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    // The relay's own summary call (an anonymous user request carries SkipRelay, and is user
    // traffic).
    let internal = req.extensions().get::<SummaryCall>().is_some();
    let (mut parts, body) = req.into_parts();
    let pinned = Pinned::of(&parts.extensions, internal);
    // Taken: no attempt below needs them. The emptied `Routing` stays in the map, for the
    // first attempt's endpoint (see `head`).
    let targets = Routing::take_targets(&mut parts.extensions).or_else(|| {
        let combo = parts.extensions.fact::<ComboName>()?;
        routes.as_ref()?.combo_targets(&combo.0)
    });
    let targets = match &pinned {
        Some(pin) => pin.targets(targets),
        None => targets,
    };
    let Some(targets) = targets else {
        return Ok(own_error(
            parts.uri.path(),
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::Internal,
            "the gateway could not route this request: no route targets and no known ComboName (ComboService must run before AccountResolver)",
        ));
    };
    // ComboService bounded and buffered the body (the summary call's is the relay's own): it
    // comes as one frame, or a few, taken here without a copy and without a limit of its own.
    let body = match crate::collect::chunks(body).await {
        Ok(body) => body,
        Err(e) => {
            return Ok(own_error(
                parts.uri.path(),
                StatusCode::BAD_REQUEST,
                ErrorKind::InvalidRequest,
                &format!("the request body could not be read: {}", e.into()),
            ));
        }
    };
    let session = session_key(&parts.extensions);
    let Shared { affinity, activity } = shared;
    if let (Some(store), Some(s), false) = (&affinity, &session, internal) {
        restore::rebind(&pools, store, &mut parts.extensions, s, &targets).await;
    }
    // Each attempt gets the client's head; the extensions are lent, not copied, when they can
    // be made again for a later attempt.
    let mut head = Head::new(parts);
    let first_model = targets.targets.first().map(|t| t.model.clone());

    // The last error answer of an account that was rotated away, and its verdict: what the
    // client gets when no account is left.
    let mut last: Option<(Response<Peeked<ResBody>>, ResolvedAccount, Verdict)> = None;
    // The last quota answer, kept apart: it wins over a later refusal or server error.
    let mut quota: Option<(Response<Peeked<ResBody>>, ResolvedAccount, Verdict)> = None;
    // A route names a few providers, a pool a few accounts: both lists stay on the stack.
    let mut providers_seen: SmallVec<[Arc<ProviderPool>; 4]> = SmallVec::new();
    let mut attempts = 0usize;
    let mut retry = UnavailableRetry::default();
    let mut skipped_shape = Vec::new();
    'targets: for target in targets.targets.iter() {
        let Some(pool) = pools.get(&target.provider).cloned() else {
            tracing::warn!(
                provider = &*target.provider,
                "route target names an unknown provider"
            );
            continue;
        };
        if !crate::translate::serves(pool.api(), head.uri().path()) {
            tracing::info!(
                provider = &*target.provider,
                api = pool.api().as_str(),
                path = head.uri().path(),
                "route target skipped: its provider cannot serve this API shape"
            );
            metrics::counter!("context_relay_gateway_targets_skipped_total", "provider" => pool.name().to_string(), "reason" => "api_shape").increment(1);
            skipped_shape.push(format!(
                "{} (provider `{}` has api = \"{}\")",
                target.serving.0,
                target.provider,
                pool.api().as_str()
            ));
            continue;
        }
        if !providers_seen.iter().any(|p| Arc::ptr_eq(p, &pool)) {
            providers_seen.push(pool.clone());
        }
        let body = body_for_target(
            &body,
            target,
            targets.written.as_ref(),
            first_model.as_deref(),
        );
        let mut tried: SmallVec<[usize; 8]> = SmallVec::new();
        loop {
            // The summary call gets one attempt: it is no user turn worth a retry, and a
            // retry would spend another account's quota on bookkeeping.
            if internal && attempts > 0 {
                break 'targets;
            }
            let now = SystemTime::now();
            let picked = match &pinned {
                Some(pin) => pin.pick(&pool, &tried, now),
                None => pool.pick(session.as_ref(), &tried, now),
            };
            let Some(idx) = picked else {
                break;
            };
            tried.push(idx);
            attempts += 1;
            let Some(account) = pool.accounts().get(idx) else {
                break;
            };
            let resolved = account.resolved.clone();
            // A login that cannot serve now is out of the pool (for good, or a back-off).
            let Some(mut issue) = login::credential(&pool, idx, account, now).await else {
                continue;
            };
            if attempts > 1 {
                metrics::counter!("context_relay_gateway_retries_total", "provider" => pool.name().to_string())
                    .increment(1);
                retry.attempt(pool.name(), &account.id);
            }
            let mut res = loop {
                let credential = issue.credential.clone();
                let in_band = InBandQuota::new(pool.clone(), idx, activity.clone());
                let mut attempt = attempt_request(
                    &mut head,
                    body.clone(),
                    &pool,
                    credential,
                    (resolved.clone(), in_band),
                );
                // The relay tells a move to another target by it (a model switch).
                attempt.extensions_mut().set_fact(target.serving.clone());
                // A Gemini request names the model in its path.
                if let Some(uri) = crate::gemini::with_model(head.uri(), &target.model) {
                    *attempt.uri_mut() = uri;
                }
                let res = inner.ready().await?.call(attempt).await?;
                // A login's 401: refreshed once and sent again to the same account.
                if !login::retry_after(&pool, idx, account, &mut issue, res.status()).await {
                    break res;
                }
            };
            let now = SystemTime::now();
            let status = res.status();
            account.metrics.count(status);
            if !status.is_client_error() && !status.is_server_error() {
                let signal =
                    quota::from_response(pool.quota_kind(), status, res.headers(), None, now);
                if let Some(signal) = signal {
                    record_usage(&pool, idx, account, &signal, (now, internal), &activity);
                    res.extensions_mut().set_fact(signal);
                }
                if status.is_success() {
                    pool.succeeded(idx);
                    if !internal && let Some(s) = &session {
                        let from = pool.bind(s, idx).and_then(|i| pool.accounts().get(i));
                        activity.served(
                            head.subject(),
                            res.extensions(),
                            pool.name(),
                            &account.id,
                            from.map(|a| &a.id),
                        );
                    }
                }
                label(res.extensions_mut(), resolved, &target.serving);
                return Ok(res.map(Either::Left));
            }

            // An error: its body says whether the account or the request is at fault. It is
            // read ahead (bounded) and replayed, so the client still gets every byte.
            let (mut res_parts, res_body) = res.into_parts();
            let (head, replay) = peek(res_body, MAX_ERROR_BODY).await;
            let decoded = head
                .bytes()
                .and_then(|b| decoded_error_body(&res_parts.headers, b));
            let verdict = classify(
                pool.quota_kind(),
                status,
                &res_parts.headers,
                decoded.as_deref(),
                now,
            );
            let attempt = Attempt {
                pool: &pool,
                activity: &activity,
                idx,
                account: &account.id,
                status,
                internal,
                now,
            };
            match verdict {
                Verdict::Refused => {}
                // Nothing learnt about the credential: the next request probes it again.
                Verdict::Unavailable => pool.probe_ended(idx),
                // The provider took the credential and judged the quota or the request.
                Verdict::Exhausted(_) | Verdict::Answer => pool.succeeded(idx),
            }
            let error = decoded.as_deref().and_then(error_type).unwrap_or_default();
            if res_parts.extensions.get::<HeadTimedOut>().is_some() {
                // The provider already had the whole head timeout: another account would make
                // the client wait as long again.
                retry.forgo();
            }
            // A login that could not be refreshed after the 401 took its account out and said
            // why: the 401 is not a key to check.
            let rotate = if issue.settled() && matches!(verdict, Verdict::Refused) {
                true
            } else {
                attempt.rotate(verdict, &error, &mut retry)
            };
            if let Verdict::Exhausted(signal) = verdict {
                // The client may still see this answer (when no other account is left): it
                // carries the usage reading like any other response.
                res_parts.extensions.set_fact(signal);
            }
            if !rotate {
                // The client's answer: it still carries the usage reading and who served. A 429
                // that the request caused says nothing about the account's quota: only its
                // headers are read.
                let reading = if status == StatusCode::TOO_MANY_REQUESTS {
                    StatusCode::OK
                } else {
                    status
                };
                if let Some(signal) =
                    quota::from_response(pool.quota_kind(), reading, &res_parts.headers, None, now)
                {
                    record_usage(&pool, idx, account, &signal, (now, internal), &activity);
                    res_parts.extensions.set_fact(signal);
                }
                label(&mut res_parts.extensions, resolved, &target.serving);
                return Ok(Response::from_parts(res_parts, Either::Right(replay)));
            }
            let answer = (Response::from_parts(res_parts, replay), resolved, verdict);
            // A quota answer is kept over every later refusal or server error: the client
            // learns that waiting helps (the 429 and its `retry-after`), whichever account
            // answered last.
            if matches!(verdict, Verdict::Exhausted(_)) {
                quota = Some(answer);
            } else {
                last = Some(answer);
            }
        }
    }

    retry.unanswered();
    match quota.or(last) {
        Some((_, resolved, Verdict::Refused)) => {
            let mut res = refused_everywhere(head.uri().path(), &skipped_shape);
            res.extensions_mut().set_fact(resolved);
            return Ok(res);
        }
        Some((mut res, resolved, _)) => {
            res.extensions_mut().set_fact(resolved);
            // The provider's body goes as it came; the header tells what was not tried.
            if let Some(value) = skipped_header(&skipped_shape) {
                res.headers_mut().insert(SKIPPED_HEADER, value);
            }
            return Ok(res.map(Either::Right));
        }
        None => {}
    }
    if providers_seen.is_empty() && !skipped_shape.is_empty() {
        return Ok(own_error(
            head.uri().path(),
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            &format!(
                "no target of this route can serve a request to {}: {} speak(s) another API and the gateway does not translate this pair",
                head.uri().path(),
                skipped_shape.join(", ")
            ),
        ));
    }
    // Accounts out for a refused credential (a back-off after a 401 or 403) are not coming
    // back by waiting: the same 502 as when the last one answered so, not a 429.
    if !providers_seen.is_empty() && providers_seen.iter().all(|p| p.all_refused()) {
        return Ok(refused_everywhere(head.uri().path(), &skipped_shape));
    }
    Ok(exhausted_everywhere(
        head.uri().path(),
        &providers_seen,
        &skipped_shape,
    ))
}

/// The gateway's own error answer to a request to `client_path`, in that API's error shape.
fn own_error<B>(
    client_path: &str,
    status: StatusCode,
    kind: ErrorKind,
    message: &str,
) -> Response<Either<B, Peeked<B>>> {
    let shape = ErrorShape::for_path(client_path);
    error_response_as(shape, status, kind.name(shape), message, |body| {
        Either::Right(Peeked::full(body))
    })
}

mod attempt;
use attempt::{attempt_request, body_for_target, label};
mod head;
use head::Head;
mod restore;
pub(crate) use restore::AffinityStore;
mod skipped;
use skipped::{SKIPPED_HEADER, skipped_header};
mod login;
mod no_account;
use no_account::{exhausted_everywhere, refused_everywhere};
mod pinned;
use pinned::Pinned;
mod rotate;
#[cfg(test)]
mod tests;
mod verdict;

#[cfg(test)]
mod examples {
    #[test]
    fn session_key_example() {
        use crate::pool::SessionKey;
        use crate::resolver::session_key;
        use context_relay_tower::{SessionId, Tenant};
        let mut req = http::Request::post("/v1/responses").body(()).unwrap();
        assert_eq!(session_key(req.extensions()), None);
        req.extensions_mut().insert(SessionId::new("s1"));
        req.extensions_mut().insert(Tenant::new("anonymous"));
        assert_eq!(
            session_key(req.extensions()),
            Some(SessionKey::new("anonymous".into(), "s1".into()))
        );
    }
}
