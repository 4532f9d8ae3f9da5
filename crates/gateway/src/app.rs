//! The gateway application: the proxy stack and the HTTP routes around it.
//!
//! ```text
//! client ─▶ axum router ─▶ ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ Upstream
//! ```
//!
//! Routes: `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages` (query kept),
//! `POST /v1/messages/count_tokens` through the proxy stack; `GET /v1/models`, `GET /healthz`,
//! `GET /readyz` (see [`ready`](crate::ready)), `GET /metrics`, and `GET`/`HEAD /` (Claude
//! Code's warm-up) answered by the gateway; the [`admin`](crate::admin) routes when
//! `admin_token` is configured.
//!
//! Around the routes, outermost first ([`Gateway::service`]): `CatchPanicLayer` (a panic is a
//! 500 in an error shape every client reads, and the process lives on),
//! `SetSensitiveRequestHeadersLayer` (`authorization`, `x-api-key`, `proxy-authorization`,
//! `cookie` are never logged), `SetRequestIdLayer` / `PropagateRequestIdLayer`
//! (`x-request-id`), `TraceLayer` as the access log (see [`telemetry`](crate::telemetry)), the
//! request metrics, and the client body timeout (`client_body_timeout_secs` between two chunks;
//! then a 408). The proxy stack starts with client authentication ([`auth`](crate::auth)).
//!
//! The relay (GenerationLayer and InjectionLayer) is on by default; `relay_enabled = false` in
//! the configuration or [`Gateway::relay`]`(false)` builds the same gateway without both
//! layers (a plain pooling proxy, for comparisons and benchmarks).

use std::any::Any;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post_service};
use bytes::Bytes;
use context_relay_store::{DEFAULT_PURGE_INTERVAL, HandoffStore, PurgerHandle, spawn_purger};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body::Body as _;
use hyper::body::Incoming;
use metrics_exporter_prometheus::PrometheusHandle;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutBody};
use tower_http::trace::TraceLayer;

use crate::auth::{Auth, AuthLayer, TENANT_SECRET, random_secret};
use crate::budget::ByteBudget;
use crate::combo::{ComboLayer, Routes};
use crate::config::Config;
use crate::error::{ErrorShape, any_shape_error_body, error_body};
use crate::pool::AccountPools;
use crate::ready::Readiness;
use crate::relay::{RelayBackground, RelayLayers};
use crate::resolver::AccountResolverLayer;
use crate::server::{HttpService, ServeOptions};
use crate::store::{StoreOpenError, open_local_store, open_store};
use crate::telemetry::{RequestMetricsLayer, access_log, access_span};
use crate::upstream::{Upstream, UpstreamError, UpstreamLimits};

/// The type-erased proxy stack, as the router mounts it.
pub type ProxyService = BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// Why the gateway could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The upstream client could not be built.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The handoff store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreOpenError),
    /// No random secret could be made or read for open-mode tenants.
    #[error("cannot set up the tenant secret: {0}")]
    Secret(String),
}

/// What the proxy stack needs besides routes, pools and the upstream client.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// Largest request body buffered (decoded), `max_request_bytes`.
    pub max_body_bytes: usize,
    /// Client authentication (keys, or open mode).
    pub auth: Auth,
    /// The shared budget of buffered request bytes.
    pub budget: ByteBudget,
}

/// Builds the proxy stack in DESIGN §3 order.
///
/// With `relay`, GenerationLayer sits between ComboService and AccountResolver, where it sees
/// `ComboName` on the request and `ResolvedAccount` plus the resolver's `QuotaSignal` on the
/// response, and InjectionLayer between AccountResolver and the upstream client, where every
/// attempt (the resolver's retries included) carries `ResolvedAccount`. Without it both
/// layers are absent.
pub fn proxy_stack(
    routes: Arc<Routes>,
    pools: Arc<AccountPools>,
    upstream: Upstream,
    options: StackOptions,
    relay: Option<&RelayLayers>,
) -> ProxyService {
    let max_body_bytes = options.max_body_bytes;
    let combo = ComboLayer::from_arc(routes.clone(), max_body_bytes).budget(options.budget);
    let resolver = AccountResolverLayer::new(pools)
        .routes(routes)
        .max_body_bytes(max_body_bytes);
    let auth = AuthLayer::new(options.auth);
    match relay {
        Some(relay) => BoxCloneSyncService::new(
            ServiceBuilder::new()
                .map_response(fix_content_length)
                .map_response(|res: Response<_>| res.map(Body::new))
                .layer(auth.clone())
                .map_response(|res: Response<_>| res.map(Body::new))
                // Buffers and decodes the body, sets ComboName, RouteTargets, Tenant and
                // SessionId, rewrites `model`. Request body from here on: `Full<Bytes>`.
                .layer(combo)
                .layer(relay.generation().clone())
                .layer(resolver)
                .layer(relay.injection().clone())
                .service(upstream),
        ),
        None => BoxCloneSyncService::new(
            ServiceBuilder::new()
                .map_response(fix_content_length)
                .map_response(|res: Response<_>| res.map(Body::new))
                .layer(auth.clone())
                .map_response(|res: Response<_>| res.map(Body::new))
                .layer(combo)
                .layer(resolver)
                .service(upstream),
        ),
    }
}

/// A configured gateway: routing table, account pools, upstream client, handoff store, relay
/// layers and metrics.
///
/// Cloning shares everything (pools, store, relay state).
#[derive(Clone)]
pub struct Gateway {
    config: Arc<Config>,
    routes: Arc<Routes>,
    pools: Arc<AccountPools>,
    upstream: Upstream,
    store: Arc<dyn HandoffStore>,
    relay: Option<RelayLayers>,
    metrics: Option<PrometheusHandle>,
    auth: Auth,
    budget: ByteBudget,
    readiness: Readiness,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("listen", &self.config.listen)
            .field("routes", &self.routes)
            .field("store", &self.store.backend())
            .field("relay", &self.relay.is_some())
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Builds the gateway of a validated configuration, opening its redb or memory store.
    ///
    /// A `redis` store connects asynchronously: use [`Gateway::connect`] for it (this returns
    /// [`StoreOpenError::NeedsAsync`]). Relay values that fall back to their defaults are
    /// logged as warnings.
    ///
    /// An open gateway (no `[[clients]]`) built this way keys tenants with a secret of this
    /// process; [`Gateway::connect`] (or [`load_tenant_secret`](Self::load_tenant_secret))
    /// uses the one kept in the store, so tenants survive restarts and agree across replicas.
    pub fn new(config: Config) -> Result<Self, GatewayError> {
        let store = open_local_store(&config.store)?.ok_or(StoreOpenError::NeedsAsync)?;
        Self::with_store(config, store)
    }

    /// Builds the gateway of a validated configuration, opening or connecting to any store
    /// backend (what the binary uses).
    pub async fn connect(config: Config) -> Result<Self, GatewayError> {
        let store = open_store(&config.store).await?;
        Self::with_store(config, store)?.load_tenant_secret().await
    }

    /// Replaces the open-mode tenant secret by the one kept in the store (stored now when there
    /// is none). A no-op with `[[clients]]`.
    pub async fn load_tenant_secret(mut self) -> Result<Self, GatewayError> {
        if !self.auth.is_open() {
            return Ok(self);
        }
        let candidate = random_secret().map_err(|e| GatewayError::Secret(e.to_string()))?;
        let secret = self
            .store
            .secret(TENANT_SECRET, candidate)
            .await
            .map_err(|e| GatewayError::Secret(e.to_string()))?;
        self.auth = Auth::from_config(&self.config, secret);
        Ok(self)
    }

    /// Builds the gateway over an already opened `store` (its `[store]` section is ignored).
    pub fn with_store(config: Config, store: Arc<dyn HandoffStore>) -> Result<Self, GatewayError> {
        let (configs, warnings) = config.relay_settings();
        for (field, w) in warnings {
            tracing::warn!("{field}: {w} (the default is used)");
        }
        for w in config.warnings() {
            tracing::warn!("{w}");
        }
        let relay = config
            .relay_enabled
            .then(|| RelayLayers::new(store.clone(), configs, config.stream_summary_providers()))
            .map(|r| r.summary_settings(crate::summary::summary_settings(&config)));
        let limits = &config.limits;
        let upstream = Upstream::with_limits(UpstreamLimits {
            connect: limits.upstream_connect_timeout_secs.duration(),
            head: limits.upstream_head_timeout_secs.duration(),
            idle: limits.upstream_idle_timeout_secs.duration(),
        })?;
        let secret = random_secret().map_err(|e| GatewayError::Secret(e.to_string()))?;
        Ok(Self {
            routes: Arc::new(Routes::from_config(&config)),
            pools: Arc::new(AccountPools::from_config(&config)),
            upstream,
            readiness: Readiness::new(store.clone()),
            store,
            relay,
            auth: Auth::from_config(&config, secret),
            budget: ByteBudget::new(config.limits.max_buffered_bytes),
            config: Arc::new(config),
            metrics: None,
        })
    }

    /// Switches the relay on or off (overriding `relay_enabled`). Off, the proxy stack has
    /// neither GenerationLayer nor InjectionLayer: the gateway is a plain pooling proxy.
    ///
    /// Call it before [`proxy`](Self::proxy) / [`router`](Self::router) / [`spawn`](Self::spawn):
    /// stacks already built keep the layers they were built with.
    pub fn relay(mut self, on: bool) -> Self {
        match (on, self.relay.is_some()) {
            (false, _) => self.relay = None,
            (true, false) => {
                let (configs, _) = self.config.relay_settings();
                self.relay = Some(
                    RelayLayers::new(
                        self.store.clone(),
                        configs,
                        self.config.stream_summary_providers(),
                    )
                    .summary_settings(crate::summary::summary_settings(&self.config)),
                );
            }
            (true, true) => {}
        }
        self
    }

    /// Whether the relay layers are in the stack.
    pub fn relay_enabled(&self) -> bool {
        self.relay.is_some()
    }

    /// The relay layers (`None` when the relay is off).
    pub fn relay_layers(&self) -> Option<&RelayLayers> {
        self.relay.as_ref()
    }

    /// The handle on the relay's background work (summaries, claim completions): tests and
    /// examples `idle().await` on it instead of sleeping. With the relay off it never has work.
    pub fn background(&self) -> RelayBackground {
        self.relay
            .as_ref()
            .map(RelayLayers::background)
            .unwrap_or_default()
    }

    /// The handoff store.
    pub fn store(&self) -> &Arc<dyn HandoffStore> {
        &self.store
    }

    /// Starts purging expired handoffs every 10 minutes on the current runtime; purging stops
    /// when the handle drops. [`spawn`](Self::spawn) does this itself.
    pub fn spawn_purger(&self) -> PurgerHandle {
        spawn_purger(self.store.clone(), DEFAULT_PURGE_INTERVAL)
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

    /// The client authentication of this gateway.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// What `/readyz` answers from.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The connection bounds of `[limits]`.
    pub fn serve_options(&self) -> ServeOptions {
        let l = &self.config.limits;
        ServeOptions {
            header_timeout: l.client_header_timeout_secs.duration(),
            max_connections: l.max_connections,
            shutdown_timeout: l.shutdown_timeout_secs.duration(),
        }
    }

    /// The proxy stack of this gateway.
    pub fn proxy(&self) -> ProxyService {
        proxy_stack(
            self.routes.clone(),
            self.pools.clone(),
            self.upstream.clone(),
            StackOptions {
                max_body_bytes: self.config.max_request_bytes,
                auth: self.auth.clone(),
                budget: self.budget.clone(),
            },
            self.relay.as_ref(),
        )
    }

    /// The HTTP routes, with [`Gateway::proxy`] mounted on the API paths.
    pub fn router(&self) -> Router {
        self.router_with(self.proxy())
    }

    /// The whole HTTP service: [`router`](Self::router) inside the tower-http stack.
    pub fn service(&self) -> HttpService {
        self.service_for(self.router())
    }

    /// `router` inside this gateway's tower-http stack (see the [module docs](self)).
    pub fn service_for(&self, router: Router) -> HttpService {
        let sensitive: Arc<[HeaderName]> = Arc::new([
            header::AUTHORIZATION,
            HeaderName::from_static("x-api-key"),
            header::PROXY_AUTHORIZATION,
            header::COOKIE,
        ]);
        let body_timeout = self.config.limits.client_body_timeout_secs.duration();
        BoxCloneSyncService::new(
            ServiceBuilder::new()
                .map_response(|res: Response<_>| res.map(Body::new))
                .layer(CatchPanicLayer::custom(panic_response))
                .layer(SetSensitiveRequestHeadersLayer::from_shared(sensitive))
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(access_span)
                        .on_request(())
                        .on_response(access_log)
                        .on_body_chunk(())
                        .on_eos(())
                        .on_failure(()),
                )
                .layer(RequestMetricsLayer)
                .layer(RequestBodyTimeoutLayer::new(body_timeout))
                .map_request(|req: Request<TimeoutBody<Incoming>>| req.map(Body::new))
                .service(router),
        )
    }

    /// The HTTP routes with a given proxy service.
    pub fn router_with(&self, proxy: ProxyService) -> Router {
        let models = models_body(&self.routes);
        let metrics = self.metrics.clone();
        let readiness = self.readiness.clone();
        let router = Router::new()
            .route(
                "/",
                get(|| async { text(StatusCode::OK, "context-relay-gateway\n") }),
            )
            .route(
                "/healthz",
                get(|| async { json(StatusCode::OK, Bytes::from_static(b"{\"status\":\"ok\"}")) }),
            )
            .route(
                "/readyz",
                get(move || {
                    let readiness = readiness.clone();
                    async move {
                        match readiness.check().await {
                            Ok(()) => json(
                                StatusCode::OK,
                                Bytes::from_static(b"{\"status\":\"ready\"}"),
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
            .route("/v1/messages/count_tokens", post_service(proxy));
        let router = match &self.config.admin_token {
            Some(token) => router.merge(crate::admin::routes(
                self.store.clone(),
                token,
                self.relay.as_ref().map(RelayLayers::background),
                self.pools.clone(),
            )),
            None => router,
        };
        router.fallback(|req: Request<Body>| async move {
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

/// Sets `content-length` to the body's exact size when it has one that disagrees: a response
/// whose body was replaced (a buffered 429, an error) must not keep the provider's length.
fn fix_content_length(mut res: Response<Body>) -> Response<Body> {
    if let Some(exact) = res.body().size_hint().exact()
        && let Some(declared) = res.headers().get(header::CONTENT_LENGTH)
        && declared.to_str().ok().and_then(|v| v.parse::<u64>().ok()) != Some(exact)
    {
        res.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(exact));
    }
    res
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
