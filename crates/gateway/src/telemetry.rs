//! What operators see: the Prometheus metrics of the HTTP server, the access log, and the
//! log format.
//!
//! Metrics (besides the relay's own `context_relay_*` counters):
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `context_relay_gateway_request_seconds` | histogram, time to the response head | `route`, `status` |
//! | `context_relay_gateway_upstream_first_byte_seconds` | histogram, time to the provider's response head | `provider` |
//! | `context_relay_gateway_requests_in_flight` | gauge, until the response body ends | |
//! | `context_relay_gateway_connections` | gauge, open client connections | |
//! | `context_relay_gateway_connections_rejected_total` | counter, closed at `max_connections` | |
//! | `context_relay_gateway_budget_exhausted_total` | counter, 503s of `max_buffered_bytes` | |
//! | `context_relay_gateway_unauthenticated_total` | counter, 401s | |
//! | `context_relay_gateway_admin_refused_total` | counter, admin 401s | `reason` (`token`, `login`) |
//! | `context_relay_gateway_upstream_timeouts_total` | counter | `provider`, `phase` |
//!
//! `route` is the route's path (`/v1/responses`, `/admin/handoffs/{session}`) or `other`, so
//! arbitrary client paths cannot blow up the label set.
//!
//! The access log (see [`access_log`](crate::access_log)) is written when the response head is
//! known. At the default level what is logged while a request runs carries its own fields, not
//! the request's; with the access target at `DEBUG`, what the routed service logs until the
//! response head nests in a `request` span with its `request_id`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, RwLock};
use std::task::{Context, Poll};
use std::time::Instant;

use foldhash::HashMap;
use http::{HeaderValue, Request, Response};
use metrics::{Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tower_layer::Layer;
use tower_service::Service;
use tracing::Instrument;
use tracing::instrument::Instrumented;

use crate::access_log::{self, AccessRequest};
use crate::in_flight::{InFlight, InFlightBody};
use crate::routes::ROUTES;

/// Buckets of `context_relay_gateway_request_seconds`: from a cached `/healthz` to a long
/// reasoning turn.
pub(crate) const REQUEST_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Buckets of `context_relay_gateway_upstream_first_byte_seconds`: providers take from tens of
/// milliseconds to minutes before the first token.
pub(crate) const FIRST_BYTE_BUCKETS: [f64; 13] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0, 300.0,
];

/// A Prometheus builder with the gateway's histogram buckets; install it with
/// `install_recorder()` and pass the handle to [`Gateway::with_metrics`](crate::Gateway::with_metrics).
pub fn prometheus_builder() -> PrometheusBuilder {
    // Only an empty bucket list is refused, and ours are constants.
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("context_relay_gateway_request_seconds".into()),
            &REQUEST_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("context_relay_gateway_upstream_first_byte_seconds".into()),
                &FIRST_BYTE_BUCKETS,
            )
        })
        .unwrap_or_else(|_| PrometheusBuilder::new())
}

/// The `route` label of `path`: the route of [`ROUTES`] it matches, or `other`.
pub(crate) fn route_label(path: &str) -> &'static str {
    // Most requests hit a route without parameters: a plain comparison finds it.
    if let Some(r) = ROUTES.iter().find(|r| **r == path) {
        return r;
    }
    ROUTES
        .iter()
        .find(|r| r.contains('{') && matches_route(r, path))
        .map_or("other", |r| r)
}

/// Whether `path` matches the route `template`, where a `{…}` segment is one non-empty path
/// segment and a final `{*…}` segment is the non-empty rest of the path.
fn matches_route(template: &str, path: &str) -> bool {
    let mut t = template.split('/');
    let mut p = path.split('/');
    loop {
        match (t.next(), p.next()) {
            (None, None) => return true,
            (Some(t), Some(p)) if t.starts_with("{*") => return !p.is_empty(),
            (Some(t), Some(p)) if t.starts_with('{') && t.ends_with('}') => {
                if p.is_empty() {
                    return false;
                }
            }
            (Some(t), Some(p)) if t == p => {}
            _ => return false,
        }
    }
}

/// Layer recording `context_relay_gateway_request_seconds` and the in-flight gauge, writing
/// the access log, and echoing the request's `x-request-id` on its response.
///
/// The echo is made here, where the access line reads the id, rather than by tower-http's
/// `PropagateRequestIdLayer`: that layer also boxes a `RequestId` into every response's
/// extensions (the fourth type there, which grows the map), two allocations per request that
/// nothing in the gateway reads.
///
/// The metric handles are registered once per label set (on first use, so after the
/// application installed its recorder) and shared by the services of the layer: a request
/// costs no label allocation and no registry look-up.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestMetricsLayer {
    handles: Arc<Handles>,
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            handles: self.handles.clone(),
        }
    }
}

/// The registered handles of [`RequestMetricsLayer`].
#[derive(Default)]
struct Handles {
    in_flight: OnceLock<Gauge>,
    /// By route and status (0: the service failed).
    seconds: RwLock<HashMap<(&'static str, u16), Histogram>>,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles").finish_non_exhaustive()
    }
}

impl Handles {
    fn in_flight(&self) -> &Gauge {
        self.in_flight
            .get_or_init(|| metrics::gauge!("context_relay_gateway_requests_in_flight"))
    }

    fn seconds(&self, route: &'static str, status: Option<http::StatusCode>) -> Histogram {
        let key = (route, status.map_or(0, |s| s.as_u16()));
        if let Ok(map) = self.seconds.read()
            && let Some(h) = map.get(&key)
        {
            return h.clone();
        }
        let status = status.map_or_else(|| "error".to_owned(), |s| s.as_str().to_owned());
        let h = metrics::histogram!(
            "context_relay_gateway_request_seconds",
            "route" => route,
            "status" => status
        );
        if let Ok(mut map) = self.seconds.write() {
            // Routes are a closed set, statuses nearly so: the map stays small.
            map.insert(key, h.clone());
        }
        h
    }
}

/// See [`RequestMetricsLayer`].
#[derive(Debug, Clone)]
pub(crate) struct RequestMetrics<S> {
    inner: S,
    handles: Arc<Handles>,
}

impl<S, B, ResBody> Service<Request<B>> for RequestMetrics<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<InFlightBody<ResBody>>;
    type Error = S::Error;
    type Future = MetricsFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let guard = InFlight::begin(self.handles.in_flight().clone());
        // Events logged while the request runs nest in a `DEBUG` span with its id (none is made
        // at the default level).
        let request_id = req.headers().get(&access_log::X_REQUEST_ID).cloned();
        let span = tracing::debug_span!(
            target: access_log::TARGET,
            "request",
            request_id = request_id.as_ref().and_then(|v| v.to_str().ok())
        );
        MetricsFuture {
            route: route_label(req.uri().path()),
            access: AccessRequest::of(&req),
            request_id,
            started: Instant::now(),
            inner: span.in_scope(|| self.inner.call(req)).instrument(span),
            handles: self.handles.clone(),
            guard: Some(guard),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`RequestMetrics`].
    pub struct MetricsFuture<F> {
        #[pin]
        inner: Instrumented<F>,
        route: &'static str,
        access: Option<AccessRequest>,
        // The request's id (`ensure_request_id` gave it one), for the access line and the
        // response.
        request_id: Option<HeaderValue>,
        started: Instant,
        handles: Arc<Handles>,
        // Handed to the response body (the count lasts until it ends).
        guard: Option<InFlight>,
    }
}

impl<F, ResBody, E> Future for MetricsFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = Result<Response<InFlightBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = std::task::ready!(this.inner.poll(cx));
        let status = out.as_ref().ok().map(Response::status);
        let latency = this.started.elapsed();
        this.handles
            .seconds(this.route, status)
            .record(latency.as_secs_f64());
        if let (Some(access), Ok(res)) = (this.access.as_ref(), out.as_ref()) {
            access.log(res, latency, this.request_id.as_ref());
        }
        let guard = this.guard.take();
        let request_id = this.request_id.take();
        Poll::Ready(out.map(|mut res| {
            if let Some(id) = request_id {
                res.headers_mut().insert(&access_log::X_REQUEST_ID, id);
            }
            res.map(|body| InFlightBody::new(body, guard))
        }))
    }
}

/// The histograms of one metric by the value of one label, each registered once (on first
/// use) and shared: recording costs no label allocation and no registry look-up.
pub(crate) struct HistogramsBy {
    name: &'static str,
    label: &'static str,
    map: RwLock<HashMap<Arc<str>, Histogram>>,
}

impl std::fmt::Debug for HistogramsBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistogramsBy")
            .field("name", &self.name)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl HistogramsBy {
    /// Histograms of `name` by `label`.
    pub(crate) fn new(name: &'static str, label: &'static str) -> Self {
        Self {
            name,
            label,
            map: RwLock::default(),
        }
    }

    /// The histogram for `value` (a closed set, such as provider names).
    pub(crate) fn get(&self, value: &Arc<str>) -> Histogram {
        if let Ok(map) = self.map.read()
            && let Some(h) = map.get(value)
        {
            return h.clone();
        }
        let h = metrics::histogram!(self.name, self.label => value.to_string());
        if let Ok(mut map) = self.map.write() {
            map.insert(value.clone(), h.clone());
        }
        h
    }
}

/// The metrics of one account: `context_relay_gateway_upstream_responses_total` by status and
/// `context_relay_gateway_account_used_ratio`. Each handle is registered once (on first use),
/// so that recording costs no label allocation and no registry look-up.
pub(crate) struct AccountMetrics {
    provider: Arc<str>,
    account: Arc<str>,
    by_status: RwLock<HashMap<u16, Counter>>,
    used: OnceLock<Gauge>,
}

impl std::fmt::Debug for AccountMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountMetrics")
            .field("provider", &self.provider)
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl AccountMetrics {
    /// The metrics of `account` of `provider`.
    pub(crate) fn new(provider: &str, account: &str) -> Self {
        Self {
            provider: Arc::from(provider),
            account: Arc::from(account),
            by_status: RwLock::default(),
            used: OnceLock::new(),
        }
    }

    /// Sets the account's last usage reading (0..1, above 1 past its limit).
    pub(crate) fn set_used(&self, ratio: f64) {
        self.used
            .get_or_init(|| {
                metrics::gauge!(
                    "context_relay_gateway_account_used_ratio",
                    "provider" => self.provider.to_string(),
                    "account" => self.account.to_string()
                )
            })
            .set(ratio);
    }

    /// Marks the account's usage reading as gone (`NaN`, which no threshold matches): a reload
    /// removed the account, and a last reading exported for ever would keep an alert firing.
    pub(crate) fn forget_used(&self) {
        metrics::gauge!(
            "context_relay_gateway_account_used_ratio",
            "provider" => self.provider.to_string(),
            "account" => self.account.to_string()
        )
        .set(f64::NAN);
    }

    /// Counts one response with `status`.
    pub(crate) fn count(&self, status: http::StatusCode) {
        let key = status.as_u16();
        if let Ok(map) = self.by_status.read()
            && let Some(c) = map.get(&key)
        {
            c.increment(1);
            return;
        }
        let c = metrics::counter!(
            "context_relay_gateway_upstream_responses_total",
            "provider" => self.provider.to_string(),
            "account" => self.account.to_string(),
            "status" => status.as_str().to_owned()
        );
        c.increment(1);
        if let Ok(mut map) = self.by_status.write() {
            // Statuses are nearly a closed set: the map stays small.
            map.insert(key, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_counters_count_by_status_with_handles_made_once() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let counters = AccountMetrics::new("codex", "acct-a");
        metrics::with_local_recorder(&recorder, || {
            counters.count(http::StatusCode::OK);
            counters.count(http::StatusCode::OK);
            counters.count(http::StatusCode::TOO_MANY_REQUESTS);
        });
        // The handle registered with the recorder keeps counting without it.
        counters.count(http::StatusCode::OK);
        let page = handle.render();
        let line = |status: &str| {
            page.lines()
                .find(|l| {
                    l.starts_with("context_relay_gateway_upstream_responses_total{")
                        && l.contains(&format!("status=\"{status}\""))
                })
                .map(str::to_owned)
        };
        let ok = line("200").expect("200 counted");
        assert!(
            ok.contains("provider=\"codex\"") && ok.contains("account=\"acct-a\""),
            "{ok}"
        );
        assert!(ok.ends_with(" 3"), "{page}");
        assert!(line("429").expect("429 counted").ends_with(" 1"), "{page}");
    }

    #[test]
    fn the_used_ratio_gauge_is_registered_once_and_keeps_the_last_reading() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let account = AccountMetrics::new("codex", "acct-b");
        metrics::with_local_recorder(&recorder, || account.set_used(0.5));
        // Later readings go through the handle made the first time.
        account.set_used(0.87);
        let page = handle.render();
        let line = page
            .lines()
            .find(|l| l.starts_with("context_relay_gateway_account_used_ratio{"))
            .unwrap_or_else(|| panic!("no gauge in {page}"));
        assert!(
            line.contains("provider=\"codex\"") && line.contains("account=\"acct-b\""),
            "{line}"
        );
        assert!(line.ends_with(" 0.87"), "{line}");
    }

    #[test]
    fn routes_have_bounded_labels() {
        for r in ROUTES {
            assert_eq!(route_label(r), r);
        }
        assert_eq!(route_label("/admin/handoffs/a/b"), "other");
        assert_eq!(route_label("/admin/handoffs/"), "other");
        assert_eq!(route_label("/v1/chat/completions/x"), "other");
        let gemini = "/v1beta/models/{*rest}";
        assert_eq!(route_label("/v1beta/models/g-2:generateContent"), gemini);
        assert_eq!(
            route_label("/v1beta/models/google/g-2:generateContent"),
            gemini
        );
        assert_eq!(route_label("/v1beta/models/"), "other");
        assert_eq!(route_label("/v1/models"), "/v1/models");
        assert_eq!(
            route_label("/v1/responses/compact"),
            "/v1/responses/compact"
        );
    }
}

#[cfg(test)]
mod examples {
    #[test]
    fn route_label_example() {
        use crate::telemetry::route_label;
        assert_eq!(route_label("/v1/responses"), "/v1/responses");
        assert_eq!(
            route_label("/admin/handoffs/s-1"),
            "/admin/handoffs/{session}"
        );
        assert_eq!(route_label("/wp-login.php"), "other");
    }
}
