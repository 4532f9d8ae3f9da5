//! The gateway application: the proxy stack and the HTTP routes around it.
//!
//! ```text
//! client ─▶ axum router ─▶ ComboService ─▶ [GenerationLayer] ─▶ AccountResolver ─▶ [InjectionLayer] ─▶ Upstream
//! ```
//!
//! Routes: `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages` (query kept),
//! `POST /v1/messages/count_tokens` through the proxy stack; `GET /v1/models`, `GET /healthz`,
//! `GET /metrics`, and `GET`/`HEAD /` (Claude Code's warm-up) answered by the gateway.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post_service};
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use metrics_exporter_prometheus::PrometheusHandle;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

use crate::combo::{ComboLayer, Routes};
use crate::config::Config;
use crate::error::{ErrorShape, error_body};
use crate::pool::AccountPools;
use crate::resolver::AccountResolverLayer;
use crate::upstream::{Upstream, UpstreamError};

/// The type-erased proxy stack, as the router mounts it.
pub type ProxyService = BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// Why the gateway could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The upstream client could not be built.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

/// Builds the proxy stack in DESIGN §3 order.
///
/// The two relay layers of `context-relay-tower` go in the marked spots (e.g. with
/// `.option_layer(...)`): GenerationLayer between ComboService and AccountResolver, where it sees
/// `ComboName` on the request and `ResolvedAccount` plus the quota headers on the response;
/// InjectionLayer between AccountResolver and the upstream client, where every attempt (the
/// resolver's retries included) carries `ResolvedAccount`.
pub fn proxy_stack(
    routes: Arc<Routes>,
    pools: Arc<AccountPools>,
    upstream: Upstream,
    max_body_bytes: usize,
) -> ProxyService {
    let stack = ServiceBuilder::new()
        .map_response(|res: Response<_>| res.map(Body::new))
        // Buffers and decodes the body, sets ComboName + RouteTargets, rewrites `model`.
        // Request body from here on: `Full<Bytes>`.
        .layer(ComboLayer::from_arc(routes, max_body_bytes))
        // ── GenerationLayer goes here ──
        .layer(AccountResolverLayer::new(pools).max_body_bytes(max_body_bytes))
        // ── InjectionLayer goes here ──
        .service(upstream);
    BoxCloneSyncService::new(stack)
}

/// A configured gateway: routing table, account pools, upstream client, metrics.
#[derive(Clone)]
pub struct Gateway {
    config: Arc<Config>,
    routes: Arc<Routes>,
    pools: Arc<AccountPools>,
    upstream: Upstream,
    metrics: Option<PrometheusHandle>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("listen", &self.config.listen)
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Builds the gateway of a validated configuration. Relay values that fall back to their
    /// defaults are logged as warnings.
    pub fn new(config: Config) -> Result<Self, GatewayError> {
        for (combo, _, warnings) in config.relay_configs() {
            for w in warnings {
                tracing::warn!(combo = %combo, "relay setting replaced by its default: {w}");
            }
        }
        Ok(Self {
            routes: Arc::new(Routes::from_config(&config)),
            pools: Arc::new(AccountPools::from_config(&config)),
            upstream: Upstream::new()?,
            config: Arc::new(config),
            metrics: None,
        })
    }

    /// Serves `/metrics` from `handle` (without one, `/metrics` is an empty page). The binary
    /// installs a global Prometheus recorder and passes its handle here; tests and embedded
    /// gateways need not install anything.
    pub fn with_metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The account pools (shared with the running stack).
    pub fn pools(&self) -> &Arc<AccountPools> {
        &self.pools
    }

    /// The routing table.
    pub fn routes(&self) -> &Arc<Routes> {
        &self.routes
    }

    /// The proxy stack of this gateway.
    pub fn proxy(&self) -> ProxyService {
        proxy_stack(
            self.routes.clone(),
            self.pools.clone(),
            self.upstream.clone(),
            self.config.max_request_bytes,
        )
    }

    /// The HTTP routes, with [`Gateway::proxy`] mounted on the API paths.
    pub fn router(&self) -> Router {
        self.router_with(self.proxy())
    }

    /// The HTTP routes with a given proxy service (e.g. one with the relay layers inserted).
    pub fn router_with(&self, proxy: ProxyService) -> Router {
        let models = models_body(&self.routes);
        let metrics = self.metrics.clone();
        Router::new()
            .route(
                "/",
                get(|| async { text(StatusCode::OK, "context-relay-gateway\n") }),
            )
            .route(
                "/healthz",
                get(|| async { json(StatusCode::OK, Bytes::from_static(b"{\"status\":\"ok\"}")) }),
            )
            .route(
                "/metrics",
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
                "/v1/models",
                get(move || {
                    let models = models.clone();
                    async move { json(StatusCode::OK, models) }
                }),
            )
            .route("/v1/chat/completions", post_service(proxy.clone()))
            .route("/v1/responses", post_service(proxy.clone()))
            .route("/v1/messages", post_service(proxy.clone()))
            .route("/v1/messages/count_tokens", post_service(proxy))
            .fallback(|req: Request<Body>| async move {
                let path = req.uri().path().to_owned();
                json(
                    StatusCode::NOT_FOUND,
                    error_body(
                        ErrorShape::for_path(&path),
                        "not_found_error",
                        &format!("no route for {} {path}", req.method()),
                    ),
                )
            })
    }
}

/// `GET /v1/models` in the OpenAI list shape: combos first, then their provider/model targets.
fn models_body(routes: &Routes) -> Bytes {
    let data: Vec<serde_json::Value> = routes
        .model_ids()
        .into_iter()
        .map(|(id, owner)| {
            serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": owner})
        })
        .collect();
    Bytes::from(serde_json::json!({"object": "list", "data": data}).to_string())
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
