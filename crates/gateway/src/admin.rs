//! Admin routes: inspect and delete stored handoffs.
//!
//! Mounted only when `admin_token` is configured (otherwise these paths are 404). Every call
//! needs `Authorization: Bearer <admin_token>` or the console's login cookie (see
//! [`console`](crate::console)); a missing or wrong token is a 401 (the token is compared in
//! constant time).
//!
//! - `GET /admin/handoffs[?tenant=…][&session=…][&settle=true]` →
//!   `{"handoffs":[{"tenant","session","combo","from_provider","from_account","summary",
//!   "key_decisions","task_progress","active_entities","message_count","model","generated_at",
//!   "expires_at","kind","size"}]}` (`size`: the bytes of text it carries; `kind`: `generated`,
//!   `extractive` for a handoff built without a
//!   model call, or `model-switch` for the handoff written on the model a session moved to; a
//!   session can have an account-switch and a model-switch handoff side by side), oldest
//!   first, times in RFC 3339 (UTC). With `settle=true` the gateway first waits (at most 10 s)
//!   for the summaries and claim completions in flight, so a script can list right after a
//!   turn and see its outcome.
//! - `DELETE /admin/handoffs/{session}[?tenant=…][&combo=…]` deletes every handoff of that
//!   session (of one tenant / combo when given) → `{"deleted": N}`.
//!
//! - `GET /admin/accounts` →
//!   `{"accounts":[{"provider","account","used_ratio","resets_at","state","sessions","login"}]}`
//!   in configuration order: `used_ratio` is the last usage fraction the provider reported
//!   (`null` before any), `resets_at` (RFC 3339, or `null`) when an exhausted or disabled
//!   account comes back (`null` for a login refused for good: it comes back when someone logs
//!   in again), `state` one of `available | exhausted | disabled` (disabled: the provider
//!   refused its key, or its login's refresh was refused for good), `sessions` the number of
//!   sessions bound to the account, and `login` `null` for an API key, else the subscription
//!   login's `{"auth", "expires_at", "state", "error"}`: `auth` `chatgpt | claude-oauth`,
//!   `expires_at` (RFC 3339, or `null`) when its access token expires, `state`
//!   `valid | expired | refused` (an expired token is refreshed on the account's next
//!   request), `error` the issuer's code of a refusal (`refresh_token_reused`,
//!   `invalid_grant`, …) or `null`. Never a token.
//!
//! Store errors are a 503 with the store's message.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::routing::get;
use bytes::Bytes;
use context_relay_core::HandoffRecord;
use context_relay_store::HandoffStore;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use serde::{Deserialize, Serialize};

use crate::console::AdminAuth;
use crate::error::{ErrorShape, error_body};
use crate::pool::AccountPools;
use context_relay_tower::Background;

/// Longest `settle=true` wait.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct Admin {
    store: Arc<dyn HandoffStore>,
    pools: Arc<AccountPools>,
    /// The token (as a Bearer token) or the console's login cookie.
    auth: AdminAuth,
    background: Option<Background>,
}

/// The admin routes over `store`, guarded by `token`. `background` (absent when the relay is
/// off) is what `settle=true` waits for.
/// `GET /admin/handoffs`.
pub(crate) const HANDOFFS: &str = "/admin/handoffs";
/// `DELETE /admin/handoffs/{session}`.
pub(crate) const HANDOFF: &str = "/admin/handoffs/{session}";
/// `GET /admin/accounts`.
pub(crate) const ACCOUNTS: &str = "/admin/accounts";

pub(crate) fn routes(
    store: Arc<dyn HandoffStore>,
    token: &str,
    background: Option<Background>,
    pools: Arc<AccountPools>,
) -> Router {
    let state = Admin {
        store,
        pools,
        auth: AdminAuth::new(token),
        background,
    };
    Router::new()
        .route(HANDOFFS, get(list))
        .route(HANDOFF, axum::routing::delete(remove))
        .route(ACCOUNTS, get(accounts))
        .with_state(state)
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    tenant: Option<String>,
    session: Option<String>,
    #[serde(default)]
    settle: bool,
}

#[derive(Debug, Deserialize)]
struct DeleteQuery {
    tenant: Option<String>,
    combo: Option<String>,
}

/// One handoff as the admin API shows it.
#[derive(Debug, Serialize)]
struct HandoffView<'a> {
    tenant: &'a str,
    session: &'a str,
    combo: &'a str,
    from_provider: &'a str,
    from_account: &'a str,
    summary: &'a str,
    key_decisions: &'a [String],
    task_progress: &'a str,
    active_entities: &'a [String],
    message_count: u32,
    model: &'a str,
    generated_at: String,
    expires_at: String,
    kind: &'static str,
    /// The handoff's size in bytes, as injected (its fields' text).
    size: usize,
}

impl<'a> From<&'a HandoffRecord> for HandoffView<'a> {
    fn from(r: &'a HandoffRecord) -> Self {
        Self {
            tenant: &r.tenant,
            session: &r.session,
            combo: &r.combo,
            from_provider: &r.from_provider,
            from_account: &r.from_account,
            summary: &r.handoff.summary,
            key_decisions: &r.handoff.key_decisions,
            task_progress: &r.handoff.task_progress,
            active_entities: &r.handoff.active_entities,
            message_count: r.message_count,
            model: &r.model,
            generated_at: rfc3339(r.generated_at),
            expires_at: rfc3339(r.expires_at),
            kind: r.kind.as_str(),
            size: handoff_size(r),
        }
    }
}

/// The bytes of text a handoff carries (summary, decisions, progress, entities).
fn handoff_size(r: &HandoffRecord) -> usize {
    let h = &r.handoff;
    h.summary.len()
        + h.task_progress.len()
        + h.key_decisions.iter().map(String::len).sum::<usize>()
        + h.active_entities.iter().map(String::len).sum::<usize>()
}

/// `t` in RFC 3339, UTC, millisecond precision (`2026-01-02T03:04:05.678Z`).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let ts =
        jiff::Timestamp::try_from(t).unwrap_or(match t.duration_since(SystemTime::UNIX_EPOCH) {
            // Beyond jiff's range (year 9999): clamp rather than fail an admin listing.
            Ok(_) => jiff::Timestamp::MAX,
            Err(_) => jiff::Timestamp::MIN,
        });
    format!("{ts:.3}")
}

async fn list(
    State(admin): State<Admin>,
    method: Method,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response<Body> {
    if !admin.auth.allows(&method, &headers) {
        return unauthorized();
    }
    let Query(q) = match query {
        Ok(q) => q,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &e.body_text(),
            );
        }
    };
    if q.settle
        && let Some(bg) = &admin.background
        && !bg.idle_within(SETTLE_LIMIT).await
    {
        tracing::warn!("admin list: relay background work still running after {SETTLE_LIMIT:?}");
    }
    match admin
        .store
        .list(q.tenant.as_deref(), q.session.as_deref())
        .await
    {
        Ok(mut records) => {
            records.sort_by(|a, b| {
                (a.generated_at, &a.tenant, &a.session, &a.combo).cmp(&(
                    b.generated_at,
                    &b.tenant,
                    &b.session,
                    &b.combo,
                ))
            });
            let views: Vec<HandoffView<'_>> = records.iter().map(HandoffView::from).collect();
            json(
                StatusCode::OK,
                serde_json::json!({ "handoffs": views }).to_string(),
            )
        }
        Err(e) => store_error(&e),
    }
}

async fn accounts(
    State(admin): State<Admin>,
    method: Method,
    headers: HeaderMap,
) -> Response<Body> {
    if !admin.auth.allows(&method, &headers) {
        return unauthorized();
    }
    let now = SystemTime::now();
    let mut out = Vec::new();
    for pool in admin.pools.iter() {
        let sessions = pool.sessions_per_account();
        for (i, status) in pool.snapshot(now).into_iter().enumerate() {
            // When the account is usable again: the later of its exhaustion and its refusal
            // (never by itself for a login refused for good).
            let resets_at = (!status.refused)
                .then(|| status.exhausted_until.max(status.disabled_until))
                .flatten();
            let login = pool.accounts().get(i).and_then(|a| a.login()).map(|l| {
                let st = l.status(now);
                serde_json::json!({
                    "auth": l.auth(),
                    "expires_at": st.expires_at.map(rfc3339),
                    "state": st.state,
                    "error": st.error,
                })
            });
            out.push(serde_json::json!({
                "provider": &**pool.name(),
                "account": &*status.id,
                "used_ratio": status.used,
                "resets_at": resets_at.map(rfc3339),
                "state": status.state(),
                "sessions": sessions.get(i).copied().unwrap_or(0),
                "login": login,
            }));
        }
    }
    json(
        StatusCode::OK,
        serde_json::json!({ "accounts": out }).to_string(),
    )
}

async fn remove(
    State(admin): State<Admin>,
    method: Method,
    headers: HeaderMap,
    Path(session): Path<String>,
    query: Result<Query<DeleteQuery>, QueryRejection>,
) -> Response<Body> {
    if !admin.auth.allows(&method, &headers) {
        return unauthorized();
    }
    let Query(q) = match query {
        Ok(q) => q,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &e.body_text(),
            );
        }
    };
    let records = match admin.store.list(q.tenant.as_deref(), Some(&session)).await {
        Ok(r) => r,
        Err(e) => return store_error(&e),
    };
    let mut deleted = 0u64;
    for record in records
        .iter()
        .filter(|r| q.combo.as_deref().is_none_or(|c| *r.combo == *c))
    {
        match admin.store.delete_in(&record.key(), record.slot()).await {
            Ok(true) => deleted += 1,
            Ok(false) => {}
            Err(e) => return store_error(&e),
        }
    }
    tracing::info!(session = &*session, deleted, "admin: handoffs deleted");
    json(
        StatusCode::OK,
        serde_json::json!({ "deleted": deleted }).to_string(),
    )
}

/// The 401 of a missing or wrong admin token (and of the console without its login), counted
/// in `context_relay_gateway_admin_refused_total{reason="token"}`.
pub(crate) fn unauthorized() -> Response<Body> {
    metrics::counter!(ADMIN_REFUSED, "reason" => "token").increment(1);
    let mut res = error(
        StatusCode::UNAUTHORIZED,
        "authentication_error",
        "expected `Authorization: Bearer <admin_token>`, found a missing or wrong token",
    );
    res.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    res
}

/// Admin requests refused, by `reason`: `token` (an admin route without the admin token or
/// the console's login) or `login` (a console login with a wrong token).
pub(crate) const ADMIN_REFUSED: &str = "context_relay_gateway_admin_refused_total";

fn store_error(e: &dyn std::fmt::Display) -> Response<Body> {
    tracing::warn!(error = %e, "admin: handoff store error");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_error",
        &format!("the handoff store failed: {e}"),
    )
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let mut res = json(status, error_body(ErrorShape::OpenAi, kind, message));
    *res.status_mut() = status;
    res
}

/// An admin answer: JSON, with the console's headers (`cache-control: no-store`, the content
/// security policy, no framing): the console reads these routes, and handoffs hold summaries
/// of tenants' work.
fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    crate::console::respond(status, Body::from(body.into()), "application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_is_utc_with_millis() {
        use std::time::UNIX_EPOCH;
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_001);
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.001Z");
        // Out of range values are clamped, not a panic.
        let far = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert!(rfc3339(far).starts_with("9999-12-"), "{}", rfc3339(far));
    }
}

#[cfg(test)]
mod examples {
    #[test]
    fn rfc3339_example() {
        use crate::admin::rfc3339;
        use std::time::{Duration, UNIX_EPOCH};
        let t = UNIX_EPOCH + Duration::from_millis(1_767_323_045_678);
        assert_eq!(rfc3339(t), "2026-01-02T03:04:05.678Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }
}
