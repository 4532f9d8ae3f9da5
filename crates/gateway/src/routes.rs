//! The HTTP routes of the gateway and the tower-http stack around them.
//!
//! Routes: `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/responses/compact`,
//! `POST /v1/messages` (query kept), `POST /v1/messages/count_tokens`, and Gemini's
//! `POST /{v1,v1beta}/models/{model}:generateContent` / `:streamGenerateContent` (see
//! [`gemini`](crate::gemini)) through the proxy stack; `GET /v1/models` (with `[[clients]]`, for
//! a client key only, listing what its `combos` allow), `GET /healthz`,
//! `GET /readyz` (see [`ready`](crate::ready)), `GET /metrics`, and `GET`/`HEAD /` (Claude
//! Code's warm-up) answered by the gateway; the [`admin`](crate::admin) routes when
//! `admin_token` is configured. Any other path is a 404 in the error shape of the API the path
//! belongs to.
//!
//! Around the routes, outermost first ([`Gateway::service`]):
//! `SetSensitiveRequestHeadersLayer` (`authorization`, `x-api-key`, `x-goog-api-key`,
//! `proxy-authorization`, `cookie` are never logged), the gateway's request id (a plain client
//! `x-request-id` or a new UUID, [`ensure_request_id`](crate::access_log::ensure_request_id)),
//! the request metrics, the access log and the id's echo on the response (see
//! [`telemetry`](crate::telemetry)), the panic catcher (a panic is a 500 in an error shape every
//! client reads, counted and logged like any response, and the process lives on; see
//! [`catch_panic`](crate::catch_panic)), and the
//! client body timeout (`client_body_timeout_secs` between two chunks; then a 408).

use std::any::Any;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post_service};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use tower::ServiceBuilder;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;

use crate::app::{Gateway, ProxyService, routed};
use crate::auth::{Auth, Refusal, unauthenticated};
use crate::catch_panic::CatchPanicLayer;
use crate::console;
use crate::error::{ErrorShape, any_shape_error_body, closing_if_body, error_body};
use crate::gemini;
use crate::http_service::HttpService;
use crate::live::Live;
use crate::ready::Ready;
use crate::telemetry::RequestMetricsLayer;

/// `GET`/`HEAD /`.
const ROOT: &str = "/";
const HEALTHZ: &str = "/healthz";
const READYZ: &str = "/readyz";
const METRICS: &str = "/metrics";
const MODELS: &str = "/v1/models";
const CHAT: &str = "/v1/chat/completions";
const RESPONSES: &str = "/v1/responses";
const MESSAGES: &str = "/v1/messages";
const COUNT_TOKENS: &str = "/v1/messages/count_tokens";
const COMPACT: &str = "/v1/responses/compact";
/// The API paths without parameters on which the proxy stack serves `POST`.
pub(crate) const PROXY_PATHS: [&str; 5] = [CHAT, RESPONSES, MESSAGES, COUNT_TOKENS, COMPACT];

/// Whether `path` is one of the proxy stack's paths without parameters (where the router
/// mounts it for `POST`).
pub(crate) fn is_proxy_path(path: &str) -> bool {
    proxy_path_index(path).is_some()
}

/// Where `path` stands in [`PROXY_PATHS`], if it is one of them.
pub(crate) fn proxy_path_index(path: &str) -> Option<usize> {
    PROXY_PATHS.iter().position(|p| *p == path)
}
/// Gemini `…/{model}:generateContent` and `:streamGenerateContent` (the model may hold a `/`).
const GEMINI: &str = "/v1/models/{*rest}";
const GEMINI_BETA: &str = "/v1beta/models/{*rest}";

/// Every route the gateway serves, as the router is given them (`{…}`: one path segment,
/// `{*…}`: the rest of the path); the `route` label of the request metrics is one of these or
/// `other`.
pub(crate) const ROUTES: [&str; 24] = [
    ROOT,
    HEALTHZ,
    READYZ,
    METRICS,
    MODELS,
    CHAT,
    RESPONSES,
    MESSAGES,
    COUNT_TOKENS,
    COMPACT,
    GEMINI,
    GEMINI_BETA,
    crate::admin::HANDOFFS,
    crate::admin::ACCOUNTS,
    crate::admin::HANDOFF,
    console::BARE,
    console::PAGE,
    console::LOGIN,
    console::LOGOUT,
    console::SCRIPT,
    console::STYLE,
    console::USAGE,
    console::ACTIVITY,
    console::EVENTS,
];

impl Gateway {
    /// The HTTP routes, with the proxy stack mounted on the API paths.
    pub fn router(&self) -> Router {
        self.router_with(self.proxy())
    }

    /// The whole HTTP service: [`router`](Self::router) inside the tower-http stack. A
    /// [`reload`](Self::reload) of this gateway replaces the router it serves.
    pub fn service(&self) -> HttpService {
        let proxy = self.proxy();
        self.live.set(
            self.router_with(proxy.clone()),
            Some(proxy),
            self.body_timeout(),
        );
        self.stack(self.live.clone())
    }

    /// `router` inside this gateway's tower-http stack (see the [module docs](self)).
    #[cfg(test)]
    pub(crate) fn service_for(&self, router: Router) -> HttpService {
        let live = Live::default();
        live.set(router, None, self.body_timeout());
        self.stack(live)
    }

    /// `client_body_timeout_secs`.
    pub(crate) fn body_timeout(&self) -> std::time::Duration {
        self.config.limits.client_body_timeout_secs.duration()
    }

    /// The tower-http stack around the router `live` serves.
    fn stack(&self, live: Live) -> HttpService {
        let sensitive: Arc<[HeaderName]> = Arc::new([
            header::AUTHORIZATION,
            HeaderName::from_static("x-api-key"),
            HeaderName::from_static("x-goog-api-key"),
            header::PROXY_AUTHORIZATION,
            header::COOKIE,
        ]);
        let ensure_request_id: fn(Request<Incoming>) -> Request<Incoming> =
            crate::access_log::ensure_request_id;
        HttpService::new(
            ServiceBuilder::new()
                .layer(SetSensitiveRequestHeadersLayer::from_shared(sensitive))
                .map_request(ensure_request_id)
                // Outside the panic catcher: a panic's 500 is counted, logged and carries its
                // request id like any other response (this layer echoes the id).
                .layer(RequestMetricsLayer::default())
                .layer(CatchPanicLayer::new(panic_response))
                // The router of the current configuration, with the client body timeout.
                .service(live),
        )
    }

    /// The HTTP routes with a given proxy service.
    pub(crate) fn router_with(&self, proxy: ProxyService) -> Router {
        let models: Arc<[(String, String)]> = self.routes.model_ids().into();
        let auth = self.auth.clone();
        let metrics = self.metrics.clone();
        let readiness = self.readiness.clone();
        let router = Router::new()
            .route(
                ROOT,
                get(|| async { text(StatusCode::OK, "context-relay-gateway\n") }),
            )
            .route(
                HEALTHZ,
                get(|| async { json(StatusCode::OK, Bytes::from_static(b"{\"status\":\"ok\"}")) }),
            )
            .route(
                READYZ,
                get(move || {
                    let readiness = readiness.clone();
                    async move {
                        match readiness.check().await {
                            Ok(Ready::Ready) => json(
                                StatusCode::OK,
                                Bytes::from_static(b"{\"status\":\"ready\"}"),
                            ),
                            Ok(degraded @ Ready::StoreDegraded) => json(
                                StatusCode::OK,
                                Bytes::from(
                                    serde_json::json!({
                                        "status": degraded.as_str(),
                                        "store": "unreachable",
                                        "detail": "the redis store does not answer: requests pass through without the relay until it does",
                                    })
                                    .to_string(),
                                ),
                            ),
                            Err(why) => json(
                                StatusCode::SERVICE_UNAVAILABLE,
                                Bytes::from(
                                    serde_json::json!({"status": why.as_str()}).to_string(),
                                ),
                            ),
                        }
                    }
                }),
            )
            .route(
                METRICS,
                get(move || {
                    let metrics = metrics.clone();
                    async move {
                        let page = metrics.map(|h| {
                            h.run_upkeep();
                            h.render()
                        });
                        let mut res = text(StatusCode::OK, page.unwrap_or_default());
                        res.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("text/plain; version=0.0.4"),
                        );
                        res
                    }
                }),
            )
            .route(
                MODELS,
                get(move |headers: HeaderMap| {
                    let answer = models_response(&auth, &models, &headers);
                    async move { answer }
                }),
            )
            // `Live` calls the proxy directly for these (`is_proxy_path`); the routes stay for
            // the other methods' 405 and for a router served without `Live`.
            .route(CHAT, post_service(routed(proxy.clone())))
            .route(RESPONSES, post_service(routed(proxy.clone())))
            .route(MESSAGES, post_service(routed(proxy.clone())))
            .route(COUNT_TOKENS, post_service(routed(proxy.clone())))
            .route(COMPACT, post_service(routed(proxy.clone())))
            .route(GEMINI, post_service(gemini::service(proxy.clone())))
            .route(GEMINI_BETA, post_service(gemini::service(proxy)));
        // The router's refusals read no body (an unknown path, a method a route does not
        // take, a missing or wrong admin token): hyper may end such a connection, and the
        // answer says so. The proxy routes are left alone: a provider's 401 or 404 relayed
        // comes after the body was sent.
        let router = match &self.config.admin_token {
            Some(token) => router
                .merge(refusals_say_close(crate::admin::routes(
                    self.store.clone(),
                    token,
                    self.relay.is_enabled().then(|| self.relay.background()),
                    self.pools.clone(),
                )))
                .merge(refusals_say_close(console::routes(
                    token,
                    self.usage.clone(),
                    self.activity.clone(),
                ))),
            None => router,
        };
        router
            .method_not_allowed_fallback(|req: Request<Body>| async move {
                let res =
                    axum::response::IntoResponse::into_response(StatusCode::METHOD_NOT_ALLOWED);
                closing_if_body(res, req.headers(), req.version())
            })
            .fallback(|req: Request<Body>| async move {
                let path = req.uri().path().to_owned();
                let res = json(
                    StatusCode::NOT_FOUND,
                    error_body(
                        ErrorShape::for_path(&path),
                        "not_found_error",
                        &format!(
                            "no route for {} {path}{}",
                            req.method(),
                            base_url_hint(&path)
                        ),
                    ),
                );
                closing_if_body(res, req.headers(), req.version())
            })
    }
}

/// `router` (the admin routes, the console's), its 401s and 404s to a request with a body
/// saying `connection: close` on HTTP/1: they are answered without reading it.
fn refusals_say_close(router: Router) -> Router {
    router.layer(axum::middleware::from_fn(
        |req: Request<Body>, next: axum::middleware::Next| async move {
            let unread = crate::error::carries_body(req.headers());
            let version = req.version();
            let res = next.run(req).await;
            match res.status() {
                StatusCode::UNAUTHORIZED | StatusCode::NOT_FOUND if unread => {
                    crate::error::closing(res, version)
                }
                _ => res,
            }
        },
    ))
}

/// What a path the gateway has no route for says of the client's base URL: a doubled `/v1`
/// is a base URL that ends in `/v1` where the client adds it itself (Anthropic's SDKs and
/// Claude Code do; their users then see a "model may not exist" error, not the 404).
fn base_url_hint(path: &str) -> &'static str {
    if path.starts_with("/v1/v1/") {
        "; the client's base URL ends in /v1 and the client adds /v1 itself: give it the gateway's address without /v1 (Anthropic clients, Claude Code)"
    } else {
        ""
    }
}

/// The 500 of a caught panic. The request path (and so the client's API) is unknown here, so
/// the body is one that OpenAI and Anthropic clients both read.
fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response<Body> {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    tracing::error!(panic = %what, "request handler panicked; answered 500");
    metrics::counter!("context_relay_gateway_panics_total").increment(1);
    json(
        StatusCode::INTERNAL_SERVER_ERROR,
        any_shape_error_body(
            "api_error",
            "the gateway failed on this request (internal error)",
        ),
    )
}

/// `GET /v1/models` in the OpenAI list shape: combos first, then their provider/model targets
/// (`models`, as [`Routes::model_ids`](crate::combo::Routes::model_ids) lists them). With
/// `[[clients]]` the request needs a client key, as the API routes do (a 401 otherwise), and
/// the list holds only the names the client's `combos` allow-list lets it ask for.
fn models_response(
    auth: &Auth,
    models: &[(String, String)],
    headers: &HeaderMap,
) -> Response<Body> {
    let access = match auth.authenticate(headers) {
        Ok(client) => client.access,
        Err(Refusal::Unauthenticated) => {
            return unauthenticated(ErrorShape::for_path(MODELS)).map(Body::new);
        }
    };
    let data: Vec<serde_json::Value> = models
        .iter()
        .filter(|(id, _)| access.as_ref().is_none_or(|a| a.allows(id)))
        .map(|(id, owner)| {
            serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": owner})
        })
        .collect();
    json(
        StatusCode::OK,
        Bytes::from(serde_json::json!({"object": "list", "data": data}).to_string()),
    )
}

fn json(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut res = Response::new(Body::from(body));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

fn text(status: StatusCode, body: impl Into<Body>) -> Response<Body> {
    let mut res = Response::new(body.into());
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

#[cfg(test)]
pub(crate) mod tests;
