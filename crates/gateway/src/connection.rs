//! One client connection, from accept to close: its deadline until the first request head,
//! the connection slot it takes only then, and its idle deadline between requests.
//!
//! - **Pending**: an accepted connection has `client_header_timeout_secs` to send a complete
//!   request head, whatever the protocol (hyper's protocol sniffing, the HTTP/2 preface and
//!   SETTINGS, HTTP/1 headers); at the deadline it is closed. At most `max_connections`
//!   connections are pending at once: a new one beyond that closes the oldest pending one,
//!   so sockets that never send a request cannot keep a real client out.
//! - **Admitted**: the first request head takes one of the `max_connections` slots for the
//!   rest of the connection's life. When none is left, that request is answered 503 with
//!   `connection: close`.
//! - **Idle**: a connection with no request in flight for `client_header_timeout_secs` is shut
//!   down gracefully (HTTP/2 `GOAWAY`; HTTP/1 closes, also while a later request's head is
//!   still arriving: this is the header timeout of every request after the first). A request
//!   is in flight until its response body has been sent or dropped, so a long SSE stream is
//!   never idle.
//! - **Closing**: a connection shut down gracefully (idle, refused, or the server stopping)
//!   that is still open [`CLOSE_GRACE`] (at most the header timeout) after its last request
//!   ended is dropped. An HTTP/2 graceful shutdown waits for the client to acknowledge a
//!   `PING` before its final `GOAWAY`; a client that keeps reading but never answers would
//!   otherwise hold its slot for good.
//! - **Writing**: a write to the client that waits `client_write_timeout_secs` for the client
//!   to read resets the connection (`client_io`), and with it the provider's stream it was
//!   relaying: a client that stops reading holds neither a slot, nor an upstream connection,
//!   nor the kernel's buffer of what it did not read for longer.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use axum::body::Body;

use crate::error::{ErrorKind, ErrorShape, error_response_as};
use crate::in_flight::ResponseBody;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto::Builder;
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot, watch};
use tokio::time::Instant;
use tower::ServiceExt;
use tower::util::Oneshot;

use crate::http_service::HttpService;
use crate::server::ServeOptions;
use crate::stream_executor::StreamExecutor;

/// The slots and the pending connections of one listener, shared by its connection tasks.
#[derive(Debug)]
pub(crate) struct Admission {
    slots: Arc<Semaphore>,
    /// Pending connections by accept order; sending on (or dropping) the sender closes one.
    pending: Mutex<BTreeMap<u64, oneshot::Sender<()>>>,
    next: AtomicU64,
    max_pending: usize,
}

impl Admission {
    /// `max_connections` slots, and as many pending connections at most.
    pub(crate) fn new(max_connections: usize) -> Arc<Self> {
        let max = max_connections.max(1);
        Arc::new(Self {
            slots: Arc::new(Semaphore::new(max)),
            pending: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
            max_pending: max,
        })
    }

    /// Registers a new pending connection, closing the oldest one when too many are pending.
    fn enter(&self) -> (u64, oneshot::Receiver<()>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        while pending.len() >= self.max_pending {
            let Some((_, oldest)) = pending.pop_first() else {
                break;
            };
            metrics::counter!("context_relay_gateway_connections_rejected_total").increment(1);
            let _ = oldest.send(());
        }
        pending.insert(id, tx);
        (id, rx)
    }

    /// Ends the pending state of connection `id` (admitted or closed); its receiver then sees
    /// the sender dropped, which is not an eviction.
    fn leave(&self, id: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.remove(&id);
    }
}

/// What a connection's task and its requests share.
#[derive(Debug)]
struct ConnState {
    /// The connection's slot, taken with its first request head.
    slot: OnceLock<OwnedSemaphorePermit>,
    /// No slot was left for the first request: the connection closes after its answer.
    refused: AtomicBool,
    /// Requests whose response body is not finished yet.
    in_flight: AtomicUsize,
    /// When the last answer ended, in nanoseconds after `opened` (0: none yet).
    last_end: AtomicU64,
    /// When the connection was accepted.
    opened: Instant,
    /// Told when the first request head is admitted or refused. Later requests tell nothing:
    /// the idle deadline reads `in_flight` and `last_end` when it fires.
    activity: Notify,
    /// The extension map of the connection's last answer, emptied: the next request starts
    /// with it, so the values the layers insert fit in a table already allocated (the
    /// request's map is handed on to its answer, see `upstream.rs`).
    spare: Mutex<Option<http::Extensions>>,
    /// An answer said `connection: close` (given before its request's body was read): the
    /// socket drains what the client still sends before it closes ([`crate::linger`]).
    linger: Arc<AtomicBool>,
}

impl ConnState {
    fn new() -> Self {
        Self {
            slot: OnceLock::new(),
            refused: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            opened: Instant::now(),
            activity: Notify::new(),
            spare: Mutex::new(None),
            linger: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Notes that `res` ends the connection: what the client still sends is drained.
    fn closes_with<B>(&self, res: &Response<B>) {
        if res
            .headers()
            .get(http::header::CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"))
        {
            self.linger.store(true, Ordering::Release);
        }
    }

    fn admitted(&self) -> bool {
        self.slot.get().is_some() || self.refused.load(Ordering::Acquire)
    }

    /// When the connection will have been idle for `idle`: that long after its last answer
    /// ended, or from `now` while a request is in flight (its end moves the deadline on).
    fn idle_at(&self, idle: Duration, now: Instant) -> Instant {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return now + idle;
        }
        self.opened + Duration::from_nanos(self.last_end.load(Ordering::Acquire)) + idle
    }

    /// Records that a request's answer ended now: it is no longer in flight.
    fn ended(&self) {
        let after = u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // The latest end wins when two streams of an HTTP/2 connection end together.
        self.last_end.fetch_max(after, Ordering::AcqRel);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a connection shut down gracefully may stay open with no request in flight before it
/// is dropped (see the [module docs](self)); at most the header timeout.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Serves one accepted connection to its end, within the deadlines of the
/// [module docs](self). `shutdown` turning `true` shuts it down gracefully.
pub(crate) async fn serve(
    tcp: TcpStream,
    builder: Arc<Builder<StreamExecutor>>,
    service: HttpService,
    admission: Arc<Admission>,
    options: ServeOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let head_timeout = options.header_timeout;
    let grace = CLOSE_GRACE.min(head_timeout);
    let state = Arc::new(ConnState::new());
    let io = crate::client_io::ClientIo::new(tcp, options.write_timeout, state.linger.clone());
    let (id, mut evicted) = admission.enter();
    metrics::gauge!("context_relay_gateway_connections_pending").increment(1.0);
    let conn = builder.serve_connection_with_upgrades(
        // Pinned on the heap: the timeout holds a timer.
        TokioIo::new(Box::pin(io)),
        ConnService {
            inner: service,
            state: state.clone(),
            slots: admission.slots.clone(),
        },
    );
    let mut conn = std::pin::pin!(conn);
    let head_deadline = tokio::time::sleep(head_timeout);
    let mut head_deadline = std::pin::pin!(head_deadline);
    let idle = tokio::time::sleep(head_timeout);
    let mut idle = std::pin::pin!(idle);
    let mut pending = true;
    let mut closing = *shutdown.borrow();
    if closing {
        conn.as_mut().graceful_shutdown();
    }
    let side = Arc::new(SideWaker::default());
    let side_waker = Waker::from(side.clone());
    let mut evicted_gone = false;
    loop {
        if pending && state.admitted() {
            pending = false;
            admission.leave(id);
            // From here on the idle deadline bounds the time without a request in flight. It
            // is not reset as each request starts and ends (that woke this loop twice per
            // request); it reads when the last answer ended once it fires (`Event::Idle`).
            // Closing, it bounds the graceful shutdown the same way, by `grace`.
            if state.refused.load(Ordering::Acquire) && !closing {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            let wait = if closing { grace } else { head_timeout };
            idle.as_mut().reset(Instant::now() + wait);
        }
        let idle_armed = !pending;
        let event = {
            let activity = state.activity.notified();
            let mut activity = std::pin::pin!(activity);
            let changed = shutdown.changed();
            let mut changed = std::pin::pin!(changed);
            // The side futures are polled when this iteration begins (to register them) and
            // then only when one of them woke the task, not on every wake of the connection.
            let mut fresh = true;
            std::future::poll_fn(|cx| {
                if let Poll::Ready(result) = conn.as_mut().poll(cx) {
                    return Poll::Ready(Event::Ended(result.err()));
                }
                side.task.register(cx.waker());
                let fired = side.fired.swap(false, Ordering::AcqRel);
                if !std::mem::take(&mut fresh) && !fired {
                    return Poll::Pending;
                }
                let mut side_cx = Context::from_waker(&side_waker);
                if activity.as_mut().poll(&mut side_cx).is_ready() {
                    return Poll::Ready(Event::Activity);
                }
                if pending {
                    if head_deadline.as_mut().poll(&mut side_cx).is_ready() {
                        return Poll::Ready(Event::HeadDeadline);
                    }
                    if !evicted_gone {
                        match Pin::new(&mut evicted).poll(&mut side_cx) {
                            Poll::Ready(Ok(())) => return Poll::Ready(Event::Evicted),
                            // The sender dropped: no eviction.
                            Poll::Ready(Err(_)) => evicted_gone = true,
                            Poll::Pending => {}
                        }
                    }
                }
                if idle_armed && idle.as_mut().poll(&mut side_cx).is_ready() {
                    return Poll::Ready(Event::Idle);
                }
                if !closing && let Poll::Ready(changed) = changed.as_mut().poll(&mut side_cx) {
                    return Poll::Ready(Event::Shutdown {
                        server_gone: changed.is_err(),
                    });
                }
                Poll::Pending
            })
            .await
        };
        match event {
            Event::Ended(error) => {
                if let Some(e) = error {
                    tracing::debug!("connection ended with an error: {e}");
                }
                break;
            }
            // The first request was admitted or refused: read at the top of the loop.
            Event::Activity => {}
            Event::HeadDeadline => {
                metrics::counter!("context_relay_gateway_connections_timed_out_total").increment(1);
                tracing::debug!("no request head within {head_timeout:?}; connection closed");
                break;
            }
            Event::Evicted => {
                tracing::debug!("too many connections without a request; the oldest closed");
                break;
            }
            Event::Idle => {
                let now = Instant::now();
                let due = state.idle_at(if closing { grace } else { head_timeout }, now);
                if due > now {
                    idle.as_mut().reset(due);
                } else if closing {
                    tracing::debug!(
                        "connection still open {grace:?} after its graceful shutdown with no request in flight; dropped"
                    );
                    break;
                } else {
                    tracing::debug!("connection idle for {head_timeout:?}; closing it");
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                    idle.as_mut().reset(now + grace);
                }
            }
            Event::Shutdown { server_gone } => {
                // A dropped sender means the server is gone: shut down too.
                if server_gone || *shutdown.borrow() {
                    if pending {
                        break;
                    }
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                    idle.as_mut().reset(Instant::now() + grace);
                }
            }
        }
    }
    if pending {
        admission.leave(id);
    }
    // The gauges moved when the first request head came (`ConnService::call`).
    if state.slot.get().is_some() {
        metrics::gauge!("context_relay_gateway_connections").decrement(1.0);
    } else if !state.admitted() {
        metrics::gauge!("context_relay_gateway_connections_pending").decrement(1.0);
    }
}

/// What woke a connection's loop.
enum Event {
    /// The connection ended, with the error it ended with.
    Ended(Option<Box<dyn std::error::Error + Send + Sync>>),
    /// A request started or ended (or was refused).
    Activity,
    /// No request head came in time.
    HeadDeadline,
    /// Closed as the oldest pending connection.
    Evicted,
    /// No request for the idle time.
    Idle,
    /// The server's shutdown signal changed (or its sender is gone).
    Shutdown { server_gone: bool },
}

/// The waker a connection's side futures (the first request's admission, its deadlines, the
/// shutdown signal) are polled with: it records that one of them may be ready and wakes the
/// task. The connection's own future is polled on every wake; the side futures only after
/// this fired, so a stream's events do not each pay for polling them (a `Notify` takes a lock
/// per poll).
#[derive(Default)]
struct SideWaker {
    fired: AtomicBool,
    task: AtomicWaker,
}

impl Wake for SideWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// The hyper service of one connection: takes the slot on the first request, counts the
/// requests in flight until their response bodies end.
#[derive(Clone)]
struct ConnService {
    inner: HttpService,
    state: Arc<ConnState>,
    slots: Arc<Semaphore>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<ConnBody>;
    type Error = Infallible;
    type Future = ConnFuture;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let state = &self.state;
        if !state.admitted() {
            match self.slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let _ = state.slot.set(slot);
                    state.activity.notify_one();
                    // Moved here, not when the connection's loop next runs: the request
                    // itself (`GET /metrics`) sees its connection counted.
                    metrics::gauge!("context_relay_gateway_connections_pending").decrement(1.0);
                    metrics::gauge!("context_relay_gateway_connections").increment(1.0);
                }
                Err(_) => {
                    state.refused.store(true, Ordering::Release);
                    state.activity.notify_one();
                    metrics::gauge!("context_relay_gateway_connections_pending").decrement(1.0);
                    metrics::counter!("context_relay_gateway_connections_rejected_total")
                        .increment(1);
                    return ConnFuture::Refused {
                        state: Some(state.clone()),
                        answer: Some(refused(req)),
                    };
                }
            }
        }
        if state.refused.load(Ordering::Acquire) {
            return ConnFuture::Refused {
                state: Some(state.clone()),
                answer: Some(refused(req)),
            };
        }
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        let mut req = req;
        if let Some(mut spare) = state.spare.lock().ok().and_then(|mut s| s.take()) {
            // What hyper put on the request (an upgrade, say) is kept.
            spare.extend(std::mem::take(req.extensions_mut()));
            *req.extensions_mut() = spare;
        }
        ConnFuture::Serving {
            call: self.inner.clone().oneshot(req),
            guard: Some(InFlight(state.clone())),
        }
    }
}

/// Keeps the extension map of an answer, emptied, for the connection's next request; what
/// hyper's server reads of an answer (a reason phrase that is not the usual one) stays on it.
fn keep_spare(state: &ConnState, extensions: &mut http::Extensions) {
    let mut spare = std::mem::take(extensions);
    if let Some(reason) = spare.remove::<hyper::ext::ReasonPhrase>() {
        extensions.insert(reason);
    }
    spare.clear();
    if let Ok(mut slot) = state.spare.lock() {
        *slot = Some(spare);
    }
}

/// One request in flight on its connection, until dropped.
#[derive(Debug)]
struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.ended();
    }
}

pin_project_lite::pin_project! {
    /// The future of [`ConnService`].
    #[project = ConnFutureProj]
    enum ConnFuture {
        Serving {
            #[pin]
            call: Oneshot<HttpService, Request<Incoming>>,
            guard: Option<InFlight>,
        },
        Refused {
            state: Option<Arc<ConnState>>,
            answer: Option<Response<ResponseBody>>,
        },
    }
}

/// The 503 of a request no connection slot is left for: in the error shape of its API, with
/// its `x-request-id` (the client's when plain, else a new one), `retry-after` and
/// `connection: close`, and its access line, as every request has.
fn refused(req: Request<Incoming>) -> Response<ResponseBody> {
    let started = std::time::Instant::now();
    let req = crate::access_log::ensure_request_id(req);
    let mut res = refused_answer(req.uri().path());
    let id = req.headers().get(&crate::access_log::X_REQUEST_ID);
    if let Some(id) = id {
        res.headers_mut()
            .insert(crate::access_log::X_REQUEST_ID.clone(), id.clone());
    }
    if let Some(access) = crate::access_log::AccessRequest::of(&req) {
        access.log(&res, started.elapsed(), id);
    }
    res
}

/// [`refused`] for a request to `path`, without the id.
fn refused_answer(path: &str) -> Response<ResponseBody> {
    let shape = ErrorShape::for_path(path);
    let mut res = error_response_as(
        shape,
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Overloaded.name(shape),
        "the gateway has no connection slot left (max_connections); retry shortly",
        |bytes| ResponseBody::new(Body::from(bytes), None),
    );
    let headers = res.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    res
}

impl Future for ConnFuture {
    type Output = Result<Response<ConnBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ConnFutureProj::Serving { call, guard } => {
                let Poll::Ready(Ok(res)) = call.poll(cx) else {
                    return Poll::Pending;
                };
                let guard = guard.take();
                let mut res = res;
                if let Some(InFlight(state)) = &guard {
                    keep_spare(state, res.extensions_mut());
                    state.closes_with(&res);
                }
                Poll::Ready(Ok(res.map(|inner| ConnBody { inner, guard })))
            }
            ConnFutureProj::Refused { state, answer } => {
                let res = answer.take().unwrap_or_else(|| refused_answer("/"));
                if let Some(state) = state.take() {
                    state.closes_with(&res);
                }
                Poll::Ready(Ok(res.map(|inner| ConnBody { inner, guard: None })))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request counted in flight until it ends or drops.
    struct ConnBody {
        #[pin]
        inner: ResponseBody,
        guard: Option<InFlight>,
    }
}

impl http_body::Body for ConnBody {
    type Data = Bytes;
    type Error = axum::Error;

    // Inlined into its caller, as every wrapper of an answer's body is: hyper polls a stream's
    // body about three times per event (docs/performance.md, "The answer's wrappers inlined").
    #[inline(always)]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.project();
        let frame = this.inner.poll_frame(cx);
        if let Poll::Ready(None) = frame {
            drop(this.guard.take());
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
