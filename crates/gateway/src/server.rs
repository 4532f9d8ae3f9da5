//! Serving the gateway: the accept loop with its connection limit and header timeout, graceful
//! shutdown on SIGTERM / ctrl-c with a time bound, and an in-process handle for tests and
//! examples.
//!
//! - Every accepted connection has `client_header_timeout_secs` to send its first complete
//!   request head, whatever the protocol; only then does it take one of the `max_connections`
//!   slots. At most `max_connections` more wait for their first head: beyond that the oldest
//!   waiting one is closed (counted in `context_relay_gateway_connections_rejected_total`), so
//!   a flood of sockets that send nothing (or one byte) can neither exhaust file descriptors
//!   nor keep real clients out. A connection idle for as long is closed (see
//!   [`crate::connection`]).
//! - On shutdown the listener stops accepting, idle connections close, and in-flight requests
//!   (SSE streams included) get `shutdown_timeout_secs` to finish; what is still running then is
//!   cut. The relay's background work (summaries being stored, consumed handoffs being deleted)
//!   is then awaited for at most [`BACKGROUND_GRACE`], and the store is dropped last, which lets
//!   redb commit what is queued and release its file.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::conn::auto::Builder;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};

use context_relay_store::PurgerHandle;

use crate::app::Gateway;
use crate::connection::{self, Admission};
use crate::console::Activity;
use crate::http_service::HttpService;
use crate::ready::Readiness;
use crate::stream_executor::StreamExecutor;
use crate::tenant_keys::SyncHandle;
use context_relay_tower::Background;

/// How long shutdown waits for the relay's background work.
pub const BACKGROUND_GRACE: Duration = Duration::from_secs(10);

/// How long shutdown waits for the logins' refreshes in flight: the longest a call to a token
/// endpoint lasts, and a little more. An issuer that rotated a pair whose answer the gateway
/// never read has taken the login with it (its refresh token was single-use).
pub const LOGIN_GRACE: Duration = Duration::from_secs(crate::login::REFRESH_TIMEOUT.as_secs() + 5);

/// The largest read buffer of an HTTP/1 client connection, and so the largest request head.
const MAX_READ_BUFFER: usize = 128 << 10;

/// The connection-level bounds of [`serve_with`] (the `[limits]` values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServeOptions {
    /// Time for a client to send a request head, on a new connection and between requests
    /// (30 s).
    pub header_timeout: Duration,
    /// Client connections that have sent a request (10 000); as many more may wait for their
    /// first request head.
    pub max_connections: usize,
    /// Time in-flight requests get on shutdown before they are cut (30 s).
    pub shutdown_timeout: Duration,
    /// Longest a write to a client waits for the client to read (60 s); beyond it the
    /// connection is closed.
    pub write_timeout: Duration,
    /// Spawns each HTTP/2 stream's task, bounded by `request_timeout_secs` (1 h) as the
    /// gateway's configuration says it now.
    pub streams: StreamExecutor,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            shutdown_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            streams: StreamExecutor::new(Duration::from_secs(3600)),
        }
    }
}

/// Serves `service` on `listener` within `options` until `shutdown` completes, then drains
/// in-flight requests for at most `options.shutdown_timeout` and cuts the rest.
pub(crate) async fn serve_with(
    listener: TcpListener,
    service: HttpService,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut builder = Builder::new(options.streams.clone());
    builder
        .http1()
        // The time a request head may take is the connection's (`connection::serve`: the
        // first head's deadline, then its idle deadline between requests, which closes an
        // HTTP/1 connection that is reading a head). hyper's own header timer would cost
        // every request a boxed sleep registered and removed in the timer wheel.
        .header_read_timeout(None)
        // hyper's read buffer grows to 400 KiB on a large body, on every connection at once;
        // the body's bytes are copied out of it (and counted in the byte budget) as they come,
        // so a smaller buffer bounds what each connection holds beside the budget. Not below
        // 128 KiB: at 64 KiB a 1 MiB body cost 40 % more CPU (more reads, more wake-ups; see
        // docs/performance.md), at 128 KiB within 5 % of hyper's default. Request heads must
        // fit in it.
        .max_buf_size(MAX_READ_BUFFER);
    let builder = Arc::new(builder);
    let admission = Admission::new(options.max_connections);
    let (closing, closing_rx) = watch::channel(false);
    let mut connections: JoinSet<()> = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let tcp = match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        // Out of file descriptors and the like: wait instead of spinning.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Without TCP_NODELAY, Nagle's algorithm meets the client's delayed ACK and
                // holds small writes (SSE events) back by up to 40 ms.
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!("cannot set TCP_NODELAY: {e}");
                }
                connections.spawn(connection::serve(
                    tcp,
                    builder.clone(),
                    service.clone(),
                    admission.clone(),
                    options.clone(),
                    closing_rx.clone(),
                ));
            }
        }
    }
    drop(listener);
    let _ = closing.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(options.shutdown_timeout, drained)
        .await
        .is_err()
    {
        tracing::warn!(
            connections = connections.len(),
            "requests still running after shutdown_timeout ({:?}); cutting them",
            options.shutdown_timeout
        );
    }
    connections.shutdown().await;
    Ok(())
}

/// Waits (at most [`BACKGROUND_GRACE`]) for the relay's background work after the server
/// stopped; logs when some was cut short.
pub(crate) async fn drain_background(background: &Background) {
    drain(background, BACKGROUND_GRACE, "relay background work", "").await;
}

/// Waits (at most [`LOGIN_GRACE`]) for the logins' refreshes in flight after the server
/// stopped, so that a pair an issuer rotated is saved; logs when one was cut short.
pub(crate) async fn drain_logins(logins: &Background) {
    let lost = " (a login whose issuer rotated its pair needs a new sign-in)";
    drain(logins, LOGIN_GRACE, "login refreshes", lost).await;
}

/// Waits at most `grace` for the tasks of `tasks` (`what` they are), and logs when some were
/// cut short (with `then`, what that costs).
async fn drain(tasks: &Background, grace: Duration, what: &str, then: &str) {
    if tasks.in_flight() == 0 {
        return;
    }
    tracing::info!(tasks = tasks.in_flight(), "waiting for {what}");
    if !tasks.idle_within(grace).await {
        tracing::warn!(
            tasks = tasks.in_flight(),
            "{what} still running after {grace:?}; abandoning it{then}"
        );
    }
}

/// A gateway serving in the background of the current runtime.
#[derive(Debug)]
pub struct RunningGateway {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
    background: Background,
    login_tasks: Background,
    purger: Option<PurgerHandle>,
    tenant_sync: Option<SyncHandle>,
    readiness: Option<Readiness>,
    activity: Option<Activity>,
}

/// Connections the kernel queues for the gateway to accept (clamped to
/// `net.core.somaxconn`, 4096 on current Linux).
///
/// A burst of connections (clients reconnecting after a restart, a fleet of agents starting
/// at once) can outrun the accept loop for a moment. Beyond a full queue Linux answers with
/// SYN cookies, and a cookie that fails validation resets a connection the client believed
/// open: with tokio's default of 1024, 8 000 streams opened over a few seconds against one
/// busy core lost 700 to 1 400 connections that way (`cargo bench --bench gateway_load --
/// --scale`; `nstat` counted the same number of `TcpExtSyncookiesFailed`).
pub const LISTEN_BACKLOG: u32 = 8192;

/// A listener on `addr` (port 0 picks a free port) with the gateway's accept queue
/// ([`LISTEN_BACKLOG`]) and, as `TcpListener::bind` has, `SO_REUSEADDR` on Unix.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

impl RunningGateway {
    /// Binds `addr` (port 0 picks a free port) and serves `service` on it within `options`.
    pub(crate) async fn start_with(
        addr: SocketAddr,
        service: HttpService,
        options: ServeOptions,
    ) -> io::Result<Self> {
        let listener = listen(addr)?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_with(listener, service, options, async {
            // A dropped sender also shuts down.
            let _ = rx.await;
        }));
        Ok(Self {
            addr,
            shutdown: Some(tx),
            task,
            background: Background::default(),
            login_tasks: Background::default(),
            purger: None,
            tenant_sync: None,
            readiness: None,
            activity: None,
        })
    }

    /// The relay's background work (empty for a router started without a gateway).
    pub fn background(&self) -> &Background {
        &self.background
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://{addr}`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, waits for in-flight requests (within the shutdown timeout), then (at
    /// most [`BACKGROUND_GRACE`]) for the relay's background work, stops the purger (once this
    /// returns, only the [`Gateway`] holds the store), and returns the server's result.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(readiness) = self.readiness.take() {
            readiness.shutting_down();
        }
        // Open console streams end, so they do not hold the drain.
        if let Some(activity) = self.activity.take() {
            activity.close();
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let result = match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(io::Error::other(e)),
        };
        drain_background(&self.background).await;
        drain_logins(&self.login_tasks).await;
        self.tenant_sync = None;
        if let Some(purger) = self.purger.take() {
            purger.stop().await;
        }
        result
    }
}

impl Gateway {
    /// Serves this gateway's [`service`](Gateway::service) on `addr` in the background, within
    /// its `[limits]`, with the store's purger running (every 10 minutes).
    ///
    /// Fails when the gateway is open (no `[[clients]]`) and `addr` is not a loopback address,
    /// unless `allow_open = true`.
    pub async fn spawn(&self, addr: SocketAddr) -> io::Result<RunningGateway> {
        self.config()
            .check_open(addr)
            .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))?;
        let mut running =
            RunningGateway::start_with(addr, self.service(), self.serve_options()).await?;
        running.background = self.background();
        running.login_tasks = self.login_tasks.clone();
        running.purger = Some(self.spawn_purger());
        running.tenant_sync = Some(self.spawn_tenant_sync());
        running.readiness = Some(self.readiness().clone());
        running.activity = Some(self.activity.clone());
        Ok(running)
    }

    /// Serves this gateway on `listener` within its `[limits]`, with the store's purger
    /// running, until `shutdown` completes: `/readyz` then answers 503, in-flight requests get
    /// `shutdown_timeout_secs` to finish, the relay's background work at most
    /// [`BACKGROUND_GRACE`], then the logins' refreshes in flight at most [`LOGIN_GRACE`]. What the binary runs; [`spawn`](Self::spawn) is the in-process
    /// equivalent. Dropping the returned future cuts the drain short: the connections still
    /// open are aborted and the background work is left to end with the runtime (the binary
    /// does so on a second SIGTERM or ctrl-c).
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let purger = self.spawn_purger();
        let _tenant_sync = self.spawn_tenant_sync();
        let readiness = self.readiness().clone();
        let activity = self.activity.clone();
        let shutdown = async move {
            shutdown.await;
            readiness.shutting_down();
            activity.close();
        };
        serve_with(listener, self.service(), self.serve_options(), shutdown).await?;
        tracing::info!("in-flight requests finished");
        drain_background(&self.background()).await;
        drain_logins(&self.login_tasks).await;
        purger.stop().await;
        Ok(())
    }
}
