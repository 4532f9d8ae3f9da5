//! A measuring instrument, not a product: the least per-request work a pooling gateway with a
//! relay does, hand-written on hyper with no tower stack, to measure against the bare proxy
//! of `../shared/perf` (issue 12: what the ≤ 1.3× budget leaves room for).
//!
//! Per request it does what the gateway cannot skip on the pass-through path, with the same
//! core functions the gateway calls, and nothing else:
//! - the client credential (read by `session::credential`, as the gateway reads it) mapped
//!   to its tenant, memoised per credential as the open gateway does;
//! - the body buffered (bounded), its top-level `model` found and spliced to the first
//!   target's model;
//! - the session id of a session header when the client sent one (as agent clients do), else
//!   the fingerprint of the body, and the session's account binding looked up (made on first
//!   sight);
//! - the account key set, the request sent upstream, the quota headers read;
//! - one access line per request, written to stderr in 64 KiB batches.
//!
//! No request id, metrics, panic catching, timeouts, error shapes, retries or relay layers:
//! each of those is a contract of the gateway, so this is a floor, not an alternative. Lines
//! still waiting in a batch when the process is killed are not written.
//!
//! `--without fingerprint` (every request then goes to the first account) and `--without log`
//! leave a step out, to tell what each costs.
//!
//! It reads the gateway's own configuration file, so the perf harness runs it in the
//! gateway's place (the first provider and combo are used, over plain `http://`; the request
//! path is sent to the provider's origin unchanged, as the harness's upstream serves it):
//!
//! ```sh
//! cargo build --release --example floor_proxy
//! GATEWAY_CMD="$PWD/target/release/examples/floor_proxy --config @CONFIG@" \
//!   MIXES="small large stream" ROUNDS=5 ../shared/perf/run.sh
//! ```

use std::cell::RefCell;
use std::convert::Infallible;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use context_relay::core::{json, quota, session};
use context_relay_gateway::config::Config;
use foldhash::HashMap;
use http::header::{AUTHORIZATION, CONTENT_LENGTH, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type Error = Box<dyn std::error::Error + Send + Sync>;
type ResBody = Either<Incoming, Full<Bytes>>;

/// Access lines are written to stderr once this many bytes are waiting.
const LOG_BATCH: usize = 64 * 1024;

struct Floor {
    client: Client<HttpConnector, Full<Bytes>>,
    origin: Authority,
    model: String,
    max_body: usize,
    quota: quota::QuotaKind,
    /// Account id and its `authorization` value.
    accounts: Vec<(String, HeaderValue)>,
    tenants: RwLock<HashMap<Bytes, Arc<str>>>,
    bindings: RwLock<HashMap<String, usize>>,
    /// The session headers the gateway reads by default.
    sources: session::SessionSources,
    fingerprint: bool,
    log: bool,
}

thread_local! {
    static LOG: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(LOG_BATCH + 1024));
}

fn status(code: StatusCode) -> Response<ResBody> {
    let mut res = Response::new(Either::Right(Full::new(Bytes::new())));
    *res.status_mut() = code;
    res
}

impl Floor {
    fn tenant(&self, credential: &[u8]) -> Arc<str> {
        let known = self.tenants.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(tenant) = known.get(credential) {
            return tenant.clone();
        }
        drop(known);
        let tenant: Arc<str> = Arc::from(session::tenant_of(Some(credential)));
        self.tenants
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(Bytes::copy_from_slice(credential), tenant.clone());
        tenant
    }

    fn account(&self, session: &str) -> usize {
        let bound = self.bindings.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(idx) = bound.get(session) {
            return *idx;
        }
        drop(bound);
        let mut bound = self
            .bindings
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *bound.entry(session.to_owned()).or_insert(0)
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<ResBody> {
        let start = Instant::now();
        if req.method() != Method::POST {
            return status(StatusCode::NOT_FOUND);
        }
        let (mut parts, body) = req.into_parts();
        let Some(tenant) = session::credential(&parts.headers).map(|c| self.tenant(c)) else {
            return status(StatusCode::UNAUTHORIZED);
        };
        let Ok(body) = Limited::new(body, self.max_body).collect().await else {
            return status(StatusCode::BAD_REQUEST);
        };
        let body = body.to_bytes();
        let Ok(Some(model)) = json::find_member(&body, "model") else {
            return status(StatusCode::BAD_REQUEST);
        };
        let Ok(body) = json::splice_str(&body, model.value.clone(), &self.model) else {
            return status(StatusCode::BAD_REQUEST);
        };
        let header = session::header_session(&parts.headers, &self.sources);
        let session = match header {
            Some((id, _)) => Some(id.into_owned()),
            None if self.fingerprint => session::fingerprint(&body),
            None => None,
        };
        let idx = session
            .as_deref()
            .map_or(0, |s| self.account(&format!("{tenant}\n{s}")));
        let Some((account, key)) = self.accounts.get(idx) else {
            return status(StatusCode::INTERNAL_SERVER_ERROR);
        };
        let path = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let Ok(uri) = Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.origin.clone())
            .path_and_query(path)
            .build()
        else {
            return status(StatusCode::BAD_REQUEST);
        };
        parts.uri = uri;
        parts.headers.remove("x-api-key");
        parts.headers.insert(AUTHORIZATION, key.clone());
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        let res = match self
            .client
            .request(Request::from_parts(parts, Full::new(body)))
            .await
        {
            Ok(res) => res,
            Err(e) => {
                eprintln!("upstream error: {e}");
                return status(StatusCode::BAD_GATEWAY);
            }
        };
        let now = SystemTime::now();
        let used = quota::from_response(self.quota, res.status(), res.headers(), None, now)
            .map_or(f64::NAN, |q| q.percent_used);
        if !self.log {
            return res.map(Either::Left);
        }
        let since_epoch = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        LOG.with(|log| {
            let mut log = log.borrow_mut();
            // The gateway's fields, in a plain format (the timestamp as seconds since the epoch).
            let _ = writeln!(
                log,
                "{}.{:06} INFO access: status={} latency_ms={:.3} tenant={tenant} account={account} model={} session={} used={used:.2}",
                since_epoch.as_secs(),
                since_epoch.subsec_micros(),
                res.status().as_u16(),
                start.elapsed().as_secs_f64() * 1000.0,
                self.model,
                session.as_deref().unwrap_or("-"),
            );
            if log.len() >= LOG_BATCH {
                let _ = std::io::stderr().write_all(&log);
                log.clear();
            }
        });
        res.map(Either::Left)
    }
}

fn floor_from(config: &Config, without: &[String]) -> Result<Floor, Error> {
    if let Some(step) = without
        .iter()
        .find(|s| !matches!(s.as_str(), "fingerprint" | "log"))
    {
        return Err(format!(
            "--without {step}: the steps that can be left out are fingerprint and log"
        )
        .into());
    }
    let combo = config
        .combos
        .first()
        .ok_or("the config has no [[combos]]")?;
    let target = combo
        .targets
        .first()
        .ok_or("the first combo has no target")?;
    let provider = config
        .provider(&target.provider)
        .ok_or("the first target names no configured provider")?;
    let base: Uri = provider.base_url.parse()?;
    if base.scheme() != Some(&Scheme::HTTP) {
        return Err("the floor proxy speaks plain http:// only".into());
    }
    let origin = base.authority().cloned().ok_or("base_url has no host")?;
    let mut accounts = Vec::new();
    for account in &provider.accounts {
        let key = account.api_key.as_deref().ok_or("an account has no key")?;
        accounts.push((account.id.clone(), format!("Bearer {key}").parse()?));
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Ok(Floor {
        client: Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .build(connector),
        origin,
        model: target.model.clone(),
        max_body: config.max_request_bytes,
        quota: provider.quota.kind(),
        accounts,
        tenants: RwLock::default(),
        bindings: RwLock::default(),
        sources: session::SessionSources::default(),
        fingerprint: !without.iter().any(|s| s == "fingerprint"),
        log: !without.iter().any(|s| s == "log"),
    })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    const USAGE: &str =
        "usage: floor_proxy --config GATEWAY_CONFIG.toml [--without fingerprint|log]...";
    let mut args = std::env::args().skip(1);
    let mut path = None;
    let mut without = Vec::new();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(USAGE)?;
        match flag.as_str() {
            "--config" => path = Some(PathBuf::from(value)),
            "--without" => without.push(value),
            _ => return Err(USAGE.into()),
        }
    }
    let config = Config::load(&path.ok_or(USAGE)?)?;
    let floor = Arc::new(floor_from(&config, &without)?);
    let listener = TcpListener::bind(config.listen).await?;
    println!("LISTENING {}", listener.local_addr()?.port());
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("accept failed: {e}");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let floor = floor.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let floor = floor.clone();
                async move { Ok::<_, Infallible>(floor.handle(req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}
