//! Serving the gateway: graceful shutdown on SIGTERM / ctrl-c, and an in-process handle for
//! tests and examples.
//!
//! On shutdown the listener stops accepting, idle connections close, and in-flight requests
//! (SSE streams included) run to completion before [`serve`] returns. The relay's background
//! work (summaries being stored, consumed handoffs being deleted) is then awaited for at most
//! [`BACKGROUND_GRACE`], and the store is dropped last, which lets redb commit what is queued
//! and release its file.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use context_relay_store::PurgerHandle;

use crate::app::Gateway;
use crate::relay::RelayBackground;

/// How long shutdown waits for the relay's background work.
pub const BACKGROUND_GRACE: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` completes, then drains in-flight requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    use axum::serve::ListenerExt;
    // Without TCP_NODELAY, Nagle's algorithm meets the client's delayed ACK and holds small
    // writes (SSE events) back by up to 40 ms.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Completes on ctrl-c or (on Unix) SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!("cannot listen for ctrl-c: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("ctrl-c received, shutting down"),
        () = term => tracing::info!("SIGTERM received, shutting down"),
    }
}

/// Waits (at most [`BACKGROUND_GRACE`]) for the relay's background work after the server
/// stopped; logs when some was cut short.
pub async fn drain_background(background: &RelayBackground) {
    if background.in_flight() == 0 {
        return;
    }
    tracing::info!(
        tasks = background.in_flight(),
        "waiting for relay background work"
    );
    if !background.idle_within(BACKGROUND_GRACE).await {
        tracing::warn!(
            tasks = background.in_flight(),
            "relay background work still running after {BACKGROUND_GRACE:?}; abandoning it"
        );
    }
}

/// A gateway serving in the background of the current runtime.
#[derive(Debug)]
pub struct RunningGateway {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
    background: RelayBackground,
    purger: Option<PurgerHandle>,
}

impl RunningGateway {
    /// Binds `addr` (port 0 picks a free port) and serves `router` on it.
    pub async fn start(addr: SocketAddr, router: Router) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, router, async {
            // A dropped sender also shuts down.
            let _ = rx.await;
        }));
        Ok(Self {
            addr,
            shutdown: Some(tx),
            task,
            background: RelayBackground::default(),
            purger: None,
        })
    }

    /// The relay's background work (empty for a router started without a gateway).
    pub fn background(&self) -> &RelayBackground {
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

    /// Stops accepting, waits for in-flight requests, then (at most [`BACKGROUND_GRACE`]) for
    /// the relay's background work, stops the purger, and returns the server's result.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let result = match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(io::Error::other(e)),
        };
        drain_background(&self.background).await;
        drop(self.purger.take());
        result
    }
}

impl Gateway {
    /// Serves this gateway's [`router`](Gateway::router) on `addr` in the background, with the
    /// store's purger running (every 10 minutes).
    pub async fn spawn(&self, addr: SocketAddr) -> io::Result<RunningGateway> {
        let mut running = RunningGateway::start(addr, self.router()).await?;
        running.background = self.background();
        running.purger = Some(self.spawn_purger());
        Ok(running)
    }
}
