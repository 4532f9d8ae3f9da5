//! The console: an operator's page at `/admin/`, served from the binary (HTML, CSS and
//! JavaScript embedded, nothing fetched from elsewhere), and the data it shows.
//!
//! Mounted with the admin routes, only when `admin_token` is configured. Without a login the
//! page is a login form and every data route answers 401:
//!
//! - `GET /admin/`: the console after a login, the login form otherwise;
//! - `POST /admin/login` (form field `token`): sets the login cookie (see [`session`]) and
//!   goes to `/admin/`; a wrong token gets the form again with a 401;
//! - `POST /admin/logout`: ends the login;
//! - `GET /admin/console.js`: the page's script (after a login); `GET /admin/console.css`,
//!   its stylesheet (also the login form's: it holds no data);
//! - `GET /admin/usage` → `{"usage":[{"client","provider","account","model","kind",
//!   "responses","input","cached_input","cache_write_input","output","reasoning_output"}]}`:
//!   the tokens counted from the providers' answers (see the gateway's usage accounting);
//! - `GET /admin/activity` → `{"activity":[…]}`: the last entries of the activity feed
//!   (see [`activity`]), oldest first;
//! - `GET /admin/events`: the same feed as server-sent events (`data:` one entry per event),
//!   the kept entries first, then live; a comment every 15 s keeps proxies from closing it,
//!   and it ends when the gateway shuts down or a reload changes or removes the admin token.
//!
//! The page polls `/admin/accounts`, `/admin/handoffs` and `/admin/usage` every few seconds
//! and listens to `/admin/events`; deleting a handoff is `DELETE /admin/handoffs/{session}`.
//! Every answer of the console carries a strict content security policy (same origin only,
//! no inline script), `cache-control: no-store` and no framing.

pub(crate) mod activity;
pub(crate) mod session;

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::routing::{get, post};
use bytes::Bytes;
use futures_util::stream;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::StreamBody;
use tokio::sync::broadcast::error::RecvError;

pub(crate) use activity::Activity;
pub(crate) use session::AdminAuth;

use crate::usage::UsageLedger;

/// `GET /admin/` (the console or the login form).
pub(crate) const PAGE: &str = "/admin/";
/// `GET /admin` (to `/admin/`).
pub(crate) const BARE: &str = "/admin";
/// `POST /admin/login`.
pub(crate) const LOGIN: &str = "/admin/login";
/// `POST /admin/logout`.
pub(crate) const LOGOUT: &str = "/admin/logout";
/// `GET /admin/console.js`.
pub(crate) const SCRIPT: &str = "/admin/console.js";
/// `GET /admin/console.css`.
pub(crate) const STYLE: &str = "/admin/console.css";
/// `GET /admin/usage`.
pub(crate) const USAGE: &str = "/admin/usage";
/// `GET /admin/activity`.
pub(crate) const ACTIVITY: &str = "/admin/activity";
/// `GET /admin/events`.
pub(crate) const EVENTS: &str = "/admin/events";

const INDEX_HTML: &str = include_str!("assets/index.html");
const LOGIN_HTML: &str = include_str!("assets/login.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");

/// Between two keep-alive comments of an idle event stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Clone)]
struct Console {
    auth: AdminAuth,
    usage: UsageLedger,
    activity: Activity,
    /// The admin token's generation this console was built for (see
    /// [`Activity::admin_generation`]): a stream it opens after a reload changed the token
    /// ends at once.
    generation: u64,
}

/// The console's routes, guarded by `token`.
pub(crate) fn routes(token: &str, usage: UsageLedger, activity: Activity) -> Router {
    let state = Console {
        auth: AdminAuth::new(token),
        usage,
        generation: activity.admin_generation(),
        activity,
    };
    Router::new()
        .route(BARE, get(|| async { redirect(PAGE) }))
        .route(PAGE, get(page))
        .route(LOGIN, post(login))
        .route(LOGOUT, post(logout))
        .route(SCRIPT, get(script))
        .route(STYLE, get(style))
        .route(USAGE, get(usage_rows))
        .route(ACTIVITY, get(recent))
        .route(EVENTS, get(events))
        .with_state(state)
}

async fn page(State(c): State<Console>, headers: HeaderMap) -> Response<Body> {
    if c.auth.has_session(&headers, SystemTime::now()) {
        html(StatusCode::OK, INDEX_HTML.to_owned())
    } else {
        html(StatusCode::OK, login_form(None))
    }
}

/// The login form, with a message when a login failed.
fn login_form(error: Option<&str>) -> String {
    LOGIN_HTML.replace(
        "<!--error-->",
        error
            .map_or(String::new(), |e| format!("<p class=\"error\">{e}</p>"))
            .as_str(),
    )
}

async fn login(State(c): State<Console>, headers: HeaderMap, body: Bytes) -> Response<Body> {
    let token = url::form_urlencoded::parse(&body)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    if !c.auth.is_token(&token) {
        tracing::warn!("console login refused: wrong admin token");
        metrics::counter!(crate::admin::ADMIN_REFUSED, "reason" => "login").increment(1);
        return html(
            StatusCode::UNAUTHORIZED,
            login_form(Some("That is not the admin token.")),
        );
    }
    let mut res = redirect(PAGE);
    if let Some(cookie) = c.auth.login_cookie(SystemTime::now(), https(&headers)) {
        res.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    res
}

async fn logout(State(c): State<Console>, method: Method, headers: HeaderMap) -> Response<Body> {
    if !c.auth.allows(&method, &headers) {
        return crate::admin::unauthorized();
    }
    let mut res = redirect(PAGE);
    if let Some(cookie) = AdminAuth::logout_cookie(https(&headers)) {
        res.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    res
}

/// Whether the client reached the gateway over HTTPS (through a proxy that says so): the
/// cookie is then marked `Secure`.
fn https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
}

async fn script(State(c): State<Console>, method: Method, headers: HeaderMap) -> Response<Body> {
    asset(
        &c,
        &method,
        &headers,
        CONSOLE_JS,
        "text/javascript; charset=utf-8",
    )
}

/// The stylesheet holds no data and styles the login form too: served to anyone.
async fn style() -> Response<Body> {
    respond(
        StatusCode::OK,
        Body::from(CONSOLE_CSS),
        "text/css; charset=utf-8",
    )
}

fn asset(
    c: &Console,
    method: &Method,
    headers: &HeaderMap,
    body: &'static str,
    content_type: &'static str,
) -> Response<Body> {
    if !c.auth.allows(method, headers) {
        return crate::admin::unauthorized();
    }
    respond(StatusCode::OK, Body::from(body), content_type)
}

async fn usage_rows(
    State(c): State<Console>,
    method: Method,
    headers: HeaderMap,
) -> Response<Body> {
    if !c.auth.allows(&method, &headers) {
        return crate::admin::unauthorized();
    }
    let body = serde_json::json!({ "usage": c.usage.rows() }).to_string();
    respond(StatusCode::OK, Body::from(body), "application/json")
}

async fn recent(State(c): State<Console>, method: Method, headers: HeaderMap) -> Response<Body> {
    if !c.auth.allows(&method, &headers) {
        return crate::admin::unauthorized();
    }
    // The entries are JSON already: joined, not parsed again.
    let entries = c.activity.recent();
    let mut body = String::from("{\"activity\":[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(e);
    }
    body.push_str("]}");
    respond(StatusCode::OK, Body::from(body), "application/json")
}

async fn events(State(c): State<Console>, method: Method, headers: HeaderMap) -> Response<Body> {
    if !c.auth.allows(&method, &headers) {
        return crate::admin::unauthorized();
    }
    let mut subscription = c.activity.subscribe();
    // Opened by the routes of a token a reload has replaced since (a request that reached them
    // just before the swap): ended at once.
    if *subscription.admin.borrow_and_update() != c.generation {
        return respond(StatusCode::OK, Body::empty(), "text/event-stream");
    }
    let backlog: std::collections::VecDeque<_> = c.activity.recent().into();
    let frames = stream::unfold((backlog, subscription), |(mut backlog, mut s)| async move {
        if let Some(entry) = backlog.pop_front() {
            return Some((frame(&entry), (backlog, s)));
        }
        if *s.closed.borrow() || s.admin.has_changed().unwrap_or(true) {
            return None;
        }
        let next = tokio::select! {
            _ = s.closed.changed() => return None,
            // The admin token changed or was removed: this reader's login is over.
            _ = s.admin.changed() => return None,
            received = s.live.recv() => match received {
                Ok(entry) => frame(&entry),
                // Too slow a reader: the console reloads the list.
                Err(RecvError::Lagged(_)) => Ok(http_body::Frame::data(Bytes::from_static(
                    b"event: lagged\ndata: {}\n\n",
                ))),
                Err(RecvError::Closed) => return None,
            },
            () = tokio::time::sleep(KEEP_ALIVE) => {
                Ok(http_body::Frame::data(Bytes::from_static(b": keep-alive\n\n")))
            }
        };
        Some((next, (backlog, s)))
    });
    let mut res = respond(
        StatusCode::OK,
        Body::new(StreamBody::new(frames)),
        "text/event-stream",
    );
    res.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    res
}

fn frame(entry: &str) -> Result<http_body::Frame<Bytes>, Infallible> {
    Ok(http_body::Frame::data(Bytes::from(format!(
        "data: {entry}\n\n"
    ))))
}

fn redirect(to: &'static str) -> Response<Body> {
    let mut res = respond(StatusCode::SEE_OTHER, Body::empty(), "text/plain");
    res.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    res
}

fn html(status: StatusCode, body: String) -> Response<Body> {
    respond(status, Body::from(body), "text/html; charset=utf-8")
}

/// A console answer, with the headers every one of them carries.
pub(crate) fn respond(
    status: StatusCode,
    body: Body,
    content_type: &'static str,
) -> Response<Body> {
    let mut res = Response::new(body);
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    /// A stream opened on the routes of a token a reload has replaced (a request that reached
    /// them just before the swap) ends at once; one opened on the current routes stays open.
    #[tokio::test]
    async fn a_stream_opened_on_replaced_routes_ends_at_once() {
        let activity = Activity::default();
        let old = routes("one", UsageLedger::default(), activity.clone());
        activity.admin_changed();
        let current = routes("two", UsageLedger::default(), activity.clone());
        let events = |token: &str| {
            Request::get(EVENTS)
                .header("authorization", format!("Bearer {token}"))
                .body(Body::empty())
                .unwrap()
        };
        let res = old.oneshot(events("one")).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let ended = tokio::time::timeout(Duration::from_secs(5), res.into_body().collect());
        assert!(ended.await.is_ok(), "the old token's stream ended");
        let res = current.oneshot(events("two")).await.unwrap();
        let mut body = res.into_body();
        let open = tokio::time::timeout(Duration::from_millis(200), body.frame());
        assert!(open.await.is_err(), "the current token's stream stays open");
    }
}
