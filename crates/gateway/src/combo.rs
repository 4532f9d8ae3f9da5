//! ComboService: buffers and decodes the request body, resolves its `model` to routing targets
//! and rewrites `model` to the first target's.
//!
//! It is the first service of the proxy stack, so that the relay layers and the account
//! resolver below it see the combo and the routing targets:
//!
//! ```text
//! client ─▶ ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ Upstream
//!           sets ComboName + RouteTargets
//! ```
//!
//! - `model` names a combo → [`ComboName`] and [`RouteTargets`] (the combo's targets, tried in
//!   order) are set; the relay settings of a `priority` combo keep only the model-switch path;
//! - `model` is `provider/model` → [`RouteTargets`] with that one target, and the route as
//!   its [`ComboName`] (the relay keys a direct route's sessions by the route);
//! - anything else → a 404 in the client's error shape;
//! - a client whose [`ClientAccess`] does not list the model gets a 403;
//! - the [`Tenant`] and `SessionId` facts are set for every routed request (see [`identify`]), and
//!   `Tenant` and [`ComboName`] are copied onto the response for the access log.
//!
//! The body is forwarded buffered, as [`Chunks`]: one chunk as a rule (a large body whose head
//! names the session in the chunks it came in, see [`chunks`](crate::chunks)), decoded (no
//! `content-encoding`), `content-length` fixed, every byte but the `model` literal as the
//! client sent it. Bodies that are not JSON or
//! have no `model` get a 400, bodies over the limit a 413; none of them reaches the inner service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_core::decode::DecodeError;
use context_relay_core::json::Found;
use context_relay_tower::{ComboName, FactsExt, Tenant};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{Either, Full};
use tower_layer::Layer;
use tower_service::Service;

use crate::access_log::Routed;
use crate::auth::{ClientAccess, forbidden};
use crate::budget::{BudgetHold, ByteBudget};
use crate::chunks::Chunks;
use crate::collect::{Buffered, Collect, Collected, collect_within, is_timeout, join_kept};
use crate::decoding::{OFF_WORKERS_BYTES, decode_off_workers, off_workers};
use crate::error::{ErrorKind, ErrorShape, error_response};
use crate::gemini;
use crate::model::{
    BODY_LITERALS, BODY_LITERALS_CAP, InChunks, MODEL_LITERALS, ModelField, Searched,
    find_model_and_literals, find_model_in_chunks, rewrite_model, rewrite_model_in_chunks,
};
use crate::routing::Routing;

mod identify;
mod routes;

/// Boxed error used for body errors.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(crate) use identify::identify;
use identify::{FEWER_LITERALS_FROM, session_in_head};
pub(crate) use routes::{RouteTargets, Routes, Target};

/// Layer building [`ComboService`].
#[derive(Debug, Clone)]
pub(crate) struct ComboLayer {
    routes: Arc<Routes>,
    max_body_bytes: usize,
    budget: ByteBudget,
}

impl ComboLayer {
    /// A layer routing with `routes`, buffering at most `max_body_bytes` (decoded).
    #[cfg(test)]
    pub(crate) fn new(routes: Routes, max_body_bytes: usize) -> Self {
        Self::from_arc(Arc::new(routes), max_body_bytes)
    }

    /// A layer sharing an existing routing table.
    pub(crate) fn from_arc(routes: Arc<Routes>, max_body_bytes: usize) -> Self {
        Self {
            routes,
            max_body_bytes,
            budget: ByteBudget::unlimited(),
        }
    }

    /// Takes buffered bytes from `budget` (unlimited by default): a request that finds it
    /// spent gets a 503 with `retry-after`.
    pub(crate) fn budget(mut self, budget: ByteBudget) -> Self {
        self.budget = budget;
        self
    }
}

impl<S> Layer<S> for ComboLayer {
    type Service = ComboService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ComboService {
            inner,
            routes: self.routes.clone(),
            max_body_bytes: self.max_body_bytes,
            budget: self.budget.clone(),
        }
    }
}

/// See the [module docs](self).
#[derive(Debug, Clone)]
pub(crate) struct ComboService<S> {
    inner: S,
    routes: Arc<Routes>,
    max_body_bytes: usize,
    budget: ByteBudget,
}

/// The future of [`ComboService`].
pub(crate) type ResponseFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, ResBody> Service<Request<B>> for ComboService<S>
where
    S: Service<Request<Chunks>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Either<ResBody, Full<Bytes>>>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone may not be ready; the service that was polled ready is the one we call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let routes = self.routes.clone();
        let limit = self.max_body_bytes;
        let mut hold = self.budget.hold();
        // The access log names the tenant of a refused request too.
        let tenant = req.extensions().fact::<Tenant>().cloned();
        Box::pin(async move {
            match prepare(req, &routes, limit, &mut hold).await {
                Ok(req) => {
                    // Copied onto the response for the access log, which sits outside (one
                    // extension for both), unless the answer carries them already (a
                    // provider's answer keeps its request's, see `upstream`).
                    let routed = Routed {
                        tenant,
                        combo: req.extensions().fact::<ComboName>().cloned(),
                    };
                    let mut res = inner.call(req).await?;
                    // The body has been sent upstream (or dropped) once the response head is
                    // here: its bytes go back to the budget.
                    drop(hold);
                    if !routed.carried_by(res.extensions()) {
                        res.extensions_mut().insert(routed);
                    }
                    Ok(res.map(Either::Left))
                }
                Err(mut rejection) => {
                    if tenant.is_some() {
                        rejection.extensions_mut().insert(Routed {
                            tenant,
                            combo: None,
                        });
                    }
                    Ok(rejection.map(Either::Right))
                }
            }
        })
    }
}

/// Turns the client request into the routed one, or into the error response to send back.
async fn prepare<B>(
    req: Request<B>,
    routes: &Routes,
    limit: usize,
    hold: &mut BudgetHold,
) -> Result<Request<Chunks>, Response<Full<Bytes>>>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (mut parts, body) = req.into_parts();
    let shape = ErrorShape::for_path(parts.uri.path());
    // An answer given before the body was read to its end ends the connection (its unread
    // rest cannot be told from a next request): an HTTP/1 client is told so.
    let version = parts.version;
    let unread = move |res| crate::error::closing(res, version);
    let too_large = || unread(too_large(shape, limit));
    let bad_request = |message: &str| bad_request(shape, message);

    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let busy = |hold: &BudgetHold| busy(shape, hold);
    // A body read in several chunks is searched for what the `model` check and the session
    // reading look for as it arrives, while each chunk is still cached (see `collect`); not a
    // compressed one, nor a Gemini one, which names its model in the path. With the session
    // named in the head the body's session ids are not read (the head wins), and the pass
    // looks only for what the `model` check needs. The head is asked only when the body may
    // be long enough for the shorter pass to save more than asking costs.
    let in_path = gemini::path_model(parts.uri.path()).map(|(_, model)| model);
    let in_head = declared
        .is_none_or(|n| n >= FEWER_LITERALS_FROM)
        .then(|| session_in_head(&parts));
    let literals = if in_head == Some(true) {
        &*MODEL_LITERALS
    } else {
        &*BODY_LITERALS
    };
    let search = (in_path.is_none() && !parts.headers.contains_key(header::CONTENT_ENCODING))
        .then(|| literals.find_all_in_pieces(BODY_LITERALS_CAP));
    // Such a body, when it comes in several chunks, is kept in them (see `chunks`): it is
    // routed without being copied when `model` stands whole in its first chunk and no second
    // one may follow; otherwise it is joined and read as any other, with the same answers.
    let keep = in_head == Some(true);
    let arrived = match collect_within(body, declared, limit, hold, search, keep).await {
        Ok(Collected::Whole { body, searched }) => {
            Arrived::Whole(body, searched.map_or(Searched::Not, Searched::Partly))
        }
        Ok(Collected::Kept { body, searched }) => match find_model_in_chunks(&body, searched) {
            InChunks::Read(field) => Arrived::Kept(body, field),
            InChunks::Join(searched) => {
                Arrived::Whole(join_kept(body, hold).map_err(|_| busy(hold))?, searched)
            }
        },
        Err(Collect::TooLarge) => return Err(too_large()),
        Err(Collect::Budget) => return Err(unread(busy(hold))),
        Err(Collect::Read(e)) if is_timeout(&*e) => {
            return Err(unread(error_response(
                shape,
                StatusCode::REQUEST_TIMEOUT,
                ErrorKind::RequestTimeout.name(shape),
                "the request body stalled longer than the gateway waits between chunks (client_body_timeout_secs)",
            )));
        }
        Err(Collect::Read(e)) => {
            return Err(unread(bad_request(&format!(
                "the request body could not be read: {e}"
            ))));
        }
    };

    let (read, field, in_path) = match arrived {
        Arrived::Kept(chunks, field) => (Read::Kept(chunks), Some((field, None)), String::new()),
        Arrived::Whole(raw, searched) => {
            let body = match take_encoding(&mut parts.headers) {
                None => raw,
                Some(encoding) => decoded(&encoding, raw, limit, hold, shape).await?,
            };

            // A Gemini request names its model in the path, not in the body.
            let (in_path, field) = match in_path {
                Some(model) => {
                    gemini::check_body(body.as_slice()).map_err(|e| bad_request(&e))?;
                    (model, None)
                }
                None => {
                    // One pass over the body finds what `model` and the session reading look for.
                    let (field, found) = find_model_and_literals(body.as_slice(), searched)
                        .map_err(|e| bad_request(&e.to_string()))?;
                    (String::new(), Some((field, found)))
                }
            };
            (Read::Whole(body), field, in_path)
        }
    };
    // The session is read from the body as the client sent it, before `model` is rewritten to
    // the target's: a fingerprint hashes the client's `model`, and a combo whose targets change
    // (a reload) keeps its sessions. The session of a large body is read on the blocking pool
    // (the fingerprint of a first message of megabytes takes milliseconds); a session named in
    // the head (as agent clients send it) is read without the body, and the hop to the pool
    // would cost more than it saves. A body kept in chunks names its session in the head: it
    // is identified without it.
    let off = matches!(&read, Read::Whole(body) if body.as_slice().len() >= OFF_WORKERS_BYTES)
        && !in_head.unwrap_or_else(|| session_in_head(&parts));
    let (mut parts, read, field) = if off {
        off_workers(move || {
            identify_sent(&mut parts, &read, &field);
            (parts, read, field)
        })
        .await
        .map_err(|e| bad_request(&format!("the request body could not be read: {e}")))?
    } else {
        identify_sent(&mut parts, &read, &field);
        (parts, read, field)
    };
    let body = route(&mut parts, read, field, &in_path, routes, shape).map_err(|e| *e)?;
    // The stack below may hold one rewritten copy of the body beside it (a handoff injected,
    // account-bound state scrubbed, a translated body): it is counted up front, so that the
    // budget bounds what the process really holds.
    if !hold.take(body.len()) {
        return Err(busy(hold));
    }
    Ok(Request::from_parts(parts, body))
}

/// The request's `content-encoding`, taken out of `headers`: every field line of it, in order,
/// as one comma-separated list (several lines are one list, RFC 9110 §5.3); a value that is not
/// ASCII reads as `<non-ASCII>`, which no decoder takes.
fn take_encoding(headers: &mut HeaderMap) -> Option<String> {
    let mut lines = headers.get_all(header::CONTENT_ENCODING).iter();
    let mut list = lines.next()?.to_str().unwrap_or("<non-ASCII>").to_owned();
    for line in lines {
        list.push_str(", ");
        list.push_str(line.to_str().unwrap_or("<non-ASCII>"));
    }
    headers.remove(header::CONTENT_ENCODING);
    Some(list)
}

/// `raw` decoded from the `content-encoding` `encoding`, at most `limit` bytes, the decoded
/// buffer taken from `hold`; or the answer refusing it.
async fn decoded(
    encoding: &str,
    raw: Buffered,
    limit: usize,
    hold: &mut BudgetHold,
    shape: ErrorShape,
) -> Result<Buffered, Response<Full<Bytes>>> {
    let unsupported = |message: &str| {
        error_response(
            shape,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::InvalidRequest.name(shape),
            message,
        )
    };
    let layers = encoding.split(',').filter(|t| !t.trim().is_empty()).count();
    if layers > MAX_CODINGS {
        // Each layer may expand to the size limit: stacked layers would multiply the work
        // without any client needing them.
        return Err(unsupported(&format!(
            "expected at most {MAX_CODINGS} content codings, found {layers}"
        )));
    }
    match decode_off_workers(encoding.to_owned(), raw, limit).await {
        // The decoded buffer is held whole, spare capacity included (the compressed bytes
        // stay counted until the request ends).
        Ok(b) if !hold.take_within(b.capacity(), b.len()) => Err(busy(shape, hold)),
        Ok(b) => Ok(Buffered::Chunk(Bytes::from(b))),
        Err(DecodeError::TooLarge { .. }) => Err(too_large(shape, limit)),
        Err(e @ DecodeError::Unsupported(_)) => Err(unsupported(&e.to_string())),
        Err(e) => Err(bad_request(shape, &e.to_string())),
    }
}

/// A body as ComboService received it: in one piece, with what was searched of it as it
/// arrived, or kept in the chunks it came in with `model` read from the first.
enum Arrived {
    Whole(Buffered, Searched),
    Kept(Chunks, ModelField),
}

/// A body as ComboService read it: in one piece, or kept in the chunks it came in (see
/// [`chunks`](crate::chunks)), `model` in the first of them.
enum Read {
    Whole(Buffered),
    Kept(Chunks),
}

impl Read {
    /// Where `model` was read: the whole body, or its first chunk.
    fn head(&self) -> &[u8] {
        match self {
            Read::Whole(body) => body.as_slice(),
            Read::Kept(chunks) => chunks.iter().next().map_or(&[][..], |c| &c[..]),
        }
    }

    fn into_chunks(self) -> Chunks {
        match self {
            Read::Whole(body) => Chunks::from(body.into_bytes()),
            Read::Kept(chunks) => chunks,
        }
    }
}

/// The body's `model` where it was read, and where [`BODY_LITERALS`] occur in the body when
/// it was searched for them; no field for a Gemini request (its model is in the path).
type ReadModel = Option<(ModelField, Option<Found<'static>>)>;

/// [`identify`] on the body as the client sent it: a body kept in chunks (whose head names the
/// session) is not read.
fn identify_sent(parts: &mut http::request::Parts, read: &Read, field: &ReadModel) {
    match read {
        Read::Kept(_) => identify(parts, None, None),
        Read::Whole(body) => {
            let found = field.as_ref().and_then(|(_, found)| found.as_ref());
            identify(parts, Some(body.as_slice()), found);
        }
    }
}

/// The answer refusing a request, boxed where it is the rare way out of a function.
type Refusal = Box<Response<Full<Bytes>>>;

/// Routes the request whose body was read: its model (from the body, or `in_path`) checked
/// against the client's access and resolved to the targets, the first target's model written
/// into the body. Returns the body, or the answer refusing the request (boxed: it is the rare
/// way out).
fn route(
    parts: &mut http::request::Parts,
    body: Read,
    field: ReadModel,
    in_path: &str,
    routes: &Routes,
    shape: ErrorShape,
) -> Result<Chunks, Refusal> {
    // Borrowed from where it was read, not copied.
    let model = field
        .as_ref()
        .map_or(in_path, |(f, _)| f.value(body.head()));
    // No model is named with a line break or an escape character; refused before the name
    // reaches a log line.
    if model.chars().any(char::is_control) {
        return Err(Box::new(bad_request(
            shape,
            "the model name holds a control character",
        )));
    }
    if let Some(access) = parts.extensions.get::<ClientAccess>()
        && !access.allows(model)
    {
        return Err(Box::new(forbidden(shape, &access.name, model)));
    }
    let (combo, targets) = routes.resolve(model).map_err(|e| {
        Box::new(error_response(
            shape,
            StatusCode::NOT_FOUND,
            ErrorKind::ModelNotFound.name(shape),
            &e.to_string(),
        ))
    })?;
    let (body, written) = match (targets.targets.first(), field, body) {
        (Some(first), Some((field, _)), Read::Whole(body)) => {
            let (body, written) = rewrite_model(body, &field, &first.model);
            (Chunks::from(body), Some(written))
        }
        (Some(first), Some((field, _)), Read::Kept(body)) => {
            let (body, written) = rewrite_model_in_chunks(body, &field, &first.model);
            (body, Some(written))
        }
        (_, _, body) => (body.into_chunks(), None),
    };
    if let Some(first) = targets.targets.first()
        && written.is_none()
        && let Some(uri) = gemini::with_model(&parts.uri, &first.model)
    {
        parts.uri = uri;
    }
    crate::content_length::fix(&mut parts.headers, body.len() as u64);
    if let Some(combo) = combo {
        parts.extensions.set_fact(combo);
    }
    let mut targets = targets;
    targets.written = written;
    Routing::set_targets(&mut parts.extensions, targets);
    Ok(body)
}

/// The 413 of a body over `limit`, in `shape`.
fn too_large(shape: ErrorShape, limit: usize) -> Response<Full<Bytes>> {
    error_response(
        shape,
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::RequestTooLarge.name(shape),
        &format!("the request body is larger than the gateway's limit of {limit} bytes"),
    )
}

/// A 400 in `shape`.
fn bad_request(shape: ErrorShape, message: &str) -> Response<Full<Bytes>> {
    error_response(
        shape,
        StatusCode::BAD_REQUEST,
        ErrorKind::InvalidRequest.name(shape),
        message,
    )
}

/// The 503 of a spent byte budget, in `shape`.
/// The answer to a request the byte budget refused: a 503 to retry shortly, or, when the
/// request alone would hold more than the whole budget (a compressed body holds its compressed
/// and decoded bytes), a 413 that no retry would change.
fn busy(shape: ErrorShape, hold: &BudgetHold) -> Response<Full<Bytes>> {
    if hold.never_fits() {
        return error_response(
            shape,
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::RequestTooLarge.name(shape),
            "the request needs more buffer than the gateway's whole max_buffered_bytes: its body, a decoded copy when it is compressed, and room for one rewritten copy",
        );
    }
    let mut res = error_response(
        shape,
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Overloaded.name(shape),
        "the gateway is buffering as many request bytes as it may (max_buffered_bytes); retry shortly",
    );
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    res
}

/// Most stacked `content-encoding` layers decoded (clients send one).
const MAX_CODINGS: usize = 2;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod examples {
    #[tokio::test(flavor = "current_thread")]
    async fn module_example() {
        use crate::combo::{ComboLayer, Routes};
        use crate::config::Config;
        use crate::routing::Routing;
        use bytes::Bytes;
        use http::{Request, Response};
        use http_body_util::{BodyExt, Full};
        use std::convert::Infallible;
        use tower::{ServiceBuilder, ServiceExt, service_fn};
        let config = Config::from_toml_str(
            r#"
        [[providers]]
        name = "codex"
        base_url = "http://127.0.0.1:9/v1"
        [[providers.accounts]]
        id = "a"
        api_key = "k"
        [[combos]]
        name = "codex-relay"
        targets = ["codex/gpt-5.5"]
        "#,
            |_| None,
        )
        .unwrap();
        let svc = ServiceBuilder::new()
            .layer(ComboLayer::new(Routes::from_config(&config), 8 << 20))
            .service(service_fn(
                |req: Request<crate::chunks::Chunks>| async move {
                    let targets = Routing::targets(req.extensions()).unwrap().clone();
                    assert_eq!(&*targets.targets[0].provider, "codex");
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    Ok::<_, Infallible>(Response::new(Full::new(body)))
                },
            ));
        let req = Request::post("/v1/responses")
            .body(Full::new(Bytes::from_static(
                br#"{"model":"codex-relay","input":"hi"}"#,
            )))
            .unwrap();
        let res = svc.oneshot(req).await.unwrap();
        let echoed = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&echoed[..], br#"{"model":"gpt-5.5","input":"hi"}"#);
    }
}
