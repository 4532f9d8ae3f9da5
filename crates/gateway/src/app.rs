//! The gateway application: its configuration, state and proxy stack.
//!
//! ```text
//! client ─▶ axum router ─▶ ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ Upstream
//! ```
//!
//! The HTTP routes around the stack are in [`routes`](crate::routes). The proxy stack starts
//! with client authentication ([`auth`](crate::auth)).
//!
//! The relay (GenerationLayer and InjectionLayer) is on by default; `relay_enabled = false` in
//! the configuration or [`Gateway::relay`]`(false)` builds the same gateway without both
//! layers (a plain pooling proxy, for comparisons and benchmarks).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use context_relay_store::{DEFAULT_PURGE_INTERVAL, HandoffStore, PurgerHandle, spawn_purger};
use context_relay_tower::{Background, ContextRelay};
use http::{Request, Response};
use http_body::Body as _;
use metrics_exporter_prometheus::PrometheusHandle;
use tower::ServiceBuilder;

use crate::auth::{Auth, AuthLayer};
use crate::budget::ByteBudget;
use crate::client_body::ClientBody;
use crate::combo::{ComboLayer, Routes};
use crate::config::Config;
use crate::console::Activity;
use crate::deadline::DeadlineLayer;
use crate::live::Live;
use crate::pool::{AccountPools, LoginServices};
use crate::ready::Readiness;
use crate::resolver::{AccountResolverLayer, AffinityStore};
use crate::server::ServeOptions;
use crate::shared_service::SharedService;
use crate::store::{StoreOpenError, make_private, open_local_store, open_store};
use crate::stream_executor::StreamExecutor;
use crate::tenant_keys::{
    SYNC_INTERVAL, SyncHandle, TENANT_SECRET, TenantKeys, random_secret, spawn_sync,
};
use crate::upstream::{Upstream, UpstreamError};
use crate::usage::UsageLedger;

/// The type-erased proxy stack (see [`ClientBody`] for its request body).
pub(crate) type ProxyService = SharedService<Request<ClientBody>, Response<Body>, Infallible>;

/// The proxy stack as the router mounts it: the router's body, taken as a [`ClientBody`].
pub(crate) type RoutedProxy =
    tower::util::MapRequest<ProxyService, fn(Request<Body>) -> Request<ClientBody>>;

/// `proxy` taking the router's requests.
pub(crate) fn routed(proxy: ProxyService) -> RoutedProxy {
    tower::ServiceExt::map_request(proxy, |req: Request<Body>| {
        req.map(http_body_util::Either::Right)
    })
}

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
    /// A configuration to reload is refused (the running one stays).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

/// What the proxy stack needs besides routes, pools and the upstream client.
#[derive(Debug, Clone)]
pub(crate) struct StackOptions {
    /// Largest request body buffered (decoded), `max_request_bytes`.
    pub max_body_bytes: usize,
    /// Client authentication (keys, or open mode).
    pub auth: Auth,
    /// The shared budget of buffered request bytes.
    pub budget: ByteBudget,
    /// Where sessions the pools do not know find their account again (the relay's affinity).
    pub affinity: Option<AffinityStore>,
    /// Where switches and rotations are told.
    pub activity: Activity,
    /// The longest a request may take, head to end of body (`request_timeout_secs`).
    pub request_timeout: std::time::Duration,
}

/// Builds the proxy stack: client authentication, the combo service, then the relay layers
/// around the account resolver.
///
/// With `relay`, GenerationLayer sits between ComboService and AccountResolver, where it sees
/// `ComboName` on the request and `ResolvedAccount` plus the resolver's `QuotaSignal` on the
/// response, and InjectionLayer between AccountResolver and the upstream client, where every
/// attempt (the resolver's retries included) carries `ResolvedAccount`. Without it both
/// layers are there switched off (they pass every request through): one stack, of one type,
/// whether the relay is on or off.
pub(crate) fn proxy_stack(
    routes: Arc<Routes>,
    pools: Arc<AccountPools>,
    upstream: Upstream,
    options: StackOptions,
    relay: &ContextRelay,
) -> ProxyService {
    let max_body_bytes = options.max_body_bytes;
    let combo = ComboLayer::from_arc(routes.clone(), max_body_bytes).budget(options.budget);
    let mut resolver = AccountResolverLayer::new(pools).routes(routes);
    if let Some(store) = options.affinity {
        resolver = resolver.affinity_from(store);
    }
    let resolver = resolver.activity(options.activity);
    let auth = AuthLayer::new(options.auth);
    let deadline = DeadlineLayer::new(options.request_timeout);
    SharedService::new(
        ServiceBuilder::new()
            .map_response(fix_content_length)
            .layer(deadline)
            // The deadline's body boxes what auth and the combo answer, once.
            .layer(auth)
            // Buffers and decodes the body, sets the request's facts (combo, tenant, session)
            // and its route targets, rewrites `model`. Request body from here on: `Chunks`.
            .layer(combo)
            // One stack whether the relay is on or off: off, its layers pass every request
            // through.
            .layer(relay.generation_layer())
            .layer(resolver)
            .layer(relay.injection_layer())
            .service(upstream),
    )
}

/// A configured gateway: routing table, account pools, upstream client, handoff store, relay
/// layers and metrics.
///
/// Cloning shares everything (pools, store, relay state).
#[derive(Clone)]
pub struct Gateway {
    pub(crate) config: Arc<Config>,
    pub(crate) routes: Arc<Routes>,
    pub(crate) pools: Arc<AccountPools>,
    pub(crate) upstream: Upstream,
    pub(crate) store: Arc<dyn HandoffStore>,
    pub(crate) relay: ContextRelay,
    pub(crate) metrics: Option<PrometheusHandle>,
    pub(crate) auth: Auth,
    /// The open-mode tenant secret, shared with the gateways reloads build.
    pub(crate) tenant_keys: TenantKeys,
    pub(crate) budget: ByteBudget,
    pub(crate) readiness: Readiness,
    /// The router the running server serves; a reload swaps it.
    pub(crate) live: Live,
    /// The executor of HTTP/2 stream tasks, bounded by `request_timeout_secs`; a reload sets
    /// the new bound.
    pub(crate) streams: StreamExecutor,
    /// The tokens counted from the providers' answers.
    pub(crate) usage: UsageLedger,
    /// What the gateway and the relay did lately, for the console.
    pub(crate) activity: Activity,
    /// The logins' refreshes, shared with the gateways reloads build: a shutdown waits for
    /// them apart from the relay's work ([`LOGIN_GRACE`](crate::server::LOGIN_GRACE)), so
    /// that a pair an issuer rotated is saved.
    pub(crate) login_tasks: Background,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("listen", &self.config.listen)
            .field("routes", &self.routes)
            .field("store", &self.store.backend())
            .field("relay", &self.relay.is_enabled())
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
        if config.logins() > 0 {
            make_private(&config.store);
        }
        Self::with_store(config, store)
    }

    /// Builds the gateway of a validated configuration, opening or connecting to any store
    /// backend (what the binary uses).
    pub async fn connect(config: Config) -> Result<Self, GatewayError> {
        let store = open_store(&config.store).await?;
        if config.logins() > 0 {
            make_private(&config.store);
        }
        Self::with_store(config, store)?.load_tenant_secret().await
    }

    /// Replaces the open-mode tenant secret by the one kept in the store (stored now when there
    /// is none). With `[[clients]]` the secret keys nothing yet, and a store that cannot give
    /// it is no error; it is still read, so that the comparison with the store every second
    /// (and a reload that opens the gateway) starts from the store's secret instead of taking
    /// it for another replica's.
    pub async fn load_tenant_secret(self) -> Result<Self, GatewayError> {
        if !self.auth.is_open() {
            match self
                .store
                .secret(TENANT_SECRET, self.tenant_keys.secret())
                .await
            {
                Ok(secret) => {
                    self.tenant_keys.adopt(secret);
                }
                Err(e) => tracing::debug!("tenant secret not read from the store: {e}"),
            }
            return Ok(self);
        }
        let secret = self
            .store
            .secret(TENANT_SECRET, self.tenant_keys.secret())
            .await
            .map_err(|e| GatewayError::Secret(e.to_string()))?;
        self.tenant_keys.adopt(secret);
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
        let activity = Activity::default();
        let relay = if config.relay_enabled {
            crate::relay::relay(&config, configs, store.clone(), activity.clone())
        } else {
            ContextRelay::disabled()
        };
        let usage = UsageLedger::default();
        usage.set_open(config.is_open());
        usage.know_models(&config);
        let upstream =
            Upstream::with_limits(crate::reload::upstream_limits(&config))?.usage(usage.clone());
        let secret = random_secret().map_err(|e| GatewayError::Secret(e.to_string()))?;
        let tenant_keys = TenantKeys::new(secret);
        let login_tasks = Background::new();
        let logins = LoginServices {
            store: store.clone(),
            client: upstream.client(),
            carried: Vec::new(),
            tasks: login_tasks.clone(),
        };
        Ok(Self {
            routes: Arc::new(Routes::from_config(&config)),
            pools: Arc::new(AccountPools::new(&config, Some(&logins))),
            upstream,
            readiness: Readiness::new(store.clone()),
            store,
            relay,
            auth: Auth::from_config(&config, tenant_keys.clone()),
            tenant_keys,
            budget: ByteBudget::new(config.limits.max_buffered_bytes),
            streams: StreamExecutor::new(config.limits.request_timeout_secs.duration()),
            config: Arc::new(config),
            metrics: None,
            live: Live::default(),
            usage,
            activity,
            login_tasks,
        })
    }

    /// Switches the relay on or off (overriding `relay_enabled`). Off, both relay layers pass
    /// every request through: the gateway is a plain pooling proxy.
    ///
    /// Call it before [`router`](Self::router) / [`service`](Self::service) / [`spawn`](Self::spawn):
    /// stacks already built keep the layers they were built with.
    pub fn relay(mut self, on: bool) -> Self {
        match (on, self.relay.is_enabled()) {
            (false, _) => self.relay = ContextRelay::disabled(),
            (true, false) => {
                let (configs, _) = self.config.relay_settings();
                let (store, activity) = (self.store.clone(), self.activity.clone());
                self.relay = crate::relay::relay(&self.config, configs, store, activity);
            }
            (true, true) => {}
        }
        self
    }

    /// Whether the relay layers are in the stack.
    pub fn relay_enabled(&self) -> bool {
        self.relay.is_enabled()
    }

    /// The handle on the relay's background work (summaries, claim completions): tests and
    /// examples `idle().await` on it instead of sleeping. With the relay off it never has work.
    pub fn background(&self) -> Background {
        self.relay.background()
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

    /// Compares the open-mode tenant secret with the store's every second on the current
    /// runtime, until the handle drops (see [`tenant_keys`](crate::tenant_keys)).
    /// [`spawn`](Self::spawn) and [`serve`](Self::serve) do this themselves.
    pub(crate) fn spawn_tenant_sync(&self) -> SyncHandle {
        spawn_sync(self.tenant_keys.clone(), self.store.clone(), SYNC_INTERVAL)
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

    /// What `/readyz` answers from.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The connection bounds of `[limits]`.
    pub(crate) fn serve_options(&self) -> ServeOptions {
        let l = &self.config.limits;
        ServeOptions {
            header_timeout: l.client_header_timeout_secs.duration(),
            max_connections: l.max_connections,
            shutdown_timeout: l.shutdown_timeout_secs.duration(),
            write_timeout: l.client_write_timeout_secs.duration(),
            streams: self.streams.clone(),
        }
    }

    /// The proxy stack of this gateway.
    pub(crate) fn proxy(&self) -> ProxyService {
        proxy_stack(
            self.routes.clone(),
            self.pools.clone(),
            self.upstream.clone(),
            StackOptions {
                max_body_bytes: self.config.max_request_bytes,
                auth: self.auth.clone(),
                budget: self.budget.clone(),
                // Only the relay writes affinities.
                affinity: self
                    .relay
                    .is_enabled()
                    .then(|| AffinityStore::new(self.store.clone())),
                activity: self.activity.clone(),
                request_timeout: self.config.limits.request_timeout_secs.duration(),
            },
            &self.relay,
        )
    }
}

/// Makes a `content-length` say the body's exact size when it has one: a response whose body
/// was replaced (a buffered 429, an error, a translated answer) must not keep the provider's
/// length.
fn fix_content_length(mut res: Response<Body>) -> Response<Body> {
    if let Some(exact) = res.body().size_hint().exact() {
        crate::content_length::fix(res.headers_mut(), exact);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gateway with `[[clients]]` restarted on its store: the store's secret is its own from
    /// the start, so the comparison every second finds nothing to adopt (it warned and
    /// counted an adoption on every restart).
    #[tokio::test]
    async fn a_closed_gateway_starts_from_the_stores_tenant_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.redb");
        let text = format!(
            "[[clients]]\nname = \"a\"\nkey = \"key-a-0123456789\"\n[store]\nbackend = \"redb\"\npath = {:?}\n",
            path.display().to_string()
        );
        let config = || Config::from_toml_str(&text, |_| None).unwrap();
        let first = Gateway::connect(config()).await.unwrap();
        let secret = first.tenant_keys.secret();
        assert!(!first.tenant_keys.sync(&**first.store()).await);
        drop(first);
        let second = Gateway::connect(config()).await.unwrap();
        assert_eq!(second.tenant_keys.secret(), secret);
        assert!(
            !second.tenant_keys.sync(&**second.store()).await,
            "nothing to adopt"
        );
    }
}
