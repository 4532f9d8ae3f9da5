//! Serving the simulated provider on loopback in the background of the current runtime.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long [`Server::shutdown`] lets in-flight requests finish before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A router served in the background until [`shutdown`](Self::shutdown) or drop.
pub(crate) struct Server {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) and serves `router` on it.
    pub(crate) async fn start(addr: SocketAddr, router: Router) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        // Small SSE writes go out at once (no Nagle delay against the client's delayed ACK).
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    // A dropped sender also shuts down.
                    let _ = rx.await;
                })
                .await
        });
        Ok(Self {
            addr,
            shutdown: Some(tx),
            task,
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://{addr}`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting and lets in-flight requests finish (within [`SHUTDOWN_GRACE`]).
    pub(crate) async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
