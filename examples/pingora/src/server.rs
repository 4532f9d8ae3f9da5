//! Running the proxy: as a process ([`serve`], stopped by signals) or on a thread of the
//! current process ([`spawn`], stopped by [`RunningProxy::stop`]), which tests and embedders
//! use.
//!
//! pingora's `Server` owns its runtimes and threads, and its `run` returns once its shutdown
//! signal fires. [`spawn`] runs it on a thread of its own with a shutdown signal that is a
//! channel instead of `SIGINT`/`SIGTERM`, so stopping one proxy never touches the process.
//!
//! ```
//! use std::sync::Arc;
//! use context_relay_engine::Relay;
//! use context_relay_pingora_example::{Account, Pool, PoolSummarizer, RelayProxy, spawn};
//! use context_relay_store::MemoryStore;
//!
//! let upstream = "127.0.0.1:9".parse()?;
//! let pool = Arc::new(Pool::new("codex", vec![Account::new("acct-a", "sk-a")]));
//! let relay = Relay::builder(Arc::new(MemoryStore::new()))
//!     .summarizer(PoolSummarizer::new(upstream, pool.clone()))
//!     .build();
//! let proxy = RelayProxy::new(upstream, pool, relay);
//! let running = spawn(proxy, "127.0.0.1:0".parse()?, 1)?;
//! assert!(std::net::TcpStream::connect(running.addr()).is_ok());
//! running.stop();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use context_relay_store::{DEFAULT_PURGE_INTERVAL, HandoffStore, spawn_purger};
use pingora::proxy::http_proxy_service;
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch, ShutdownWatch};
use pingora::services::background::{BackgroundService, background_service};
use tokio::sync::oneshot;

use crate::proxy::RelayProxy;

/// How long [`spawn`] waits for the listener to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

fn server(proxy: RelayProxy, addr: SocketAddr, threads: usize) -> Server {
    let conf = ServerConf {
        threads,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let purger = Purger(proxy.relay().store().clone());
    server.add_service(background_service("handoff purger", purger));
    let mut service = http_proxy_service(&server.configuration, proxy);
    service.add_tcp(&addr.to_string());
    server.add_service(service);
    server
}

/// Serves `proxy` on `addr` with `threads` worker threads until the process receives
/// `SIGINT` (fast) or `SIGTERM` (graceful).
pub fn serve(proxy: RelayProxy, addr: SocketAddr, threads: usize) {
    server(proxy, addr, threads).run(RunArgs::default());
}

/// A proxy running on a thread of this process.
#[derive(Debug)]
pub struct RunningProxy {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RunningProxy {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://{addr}`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops it (requests in flight are cut) and waits for its threads to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Deletes expired handoffs from the store now and then, on pingora's runtime (an expired
/// handoff is never served, this only frees its space).
struct Purger(Arc<dyn HandoffStore>);

#[async_trait]
impl BackgroundService for Purger {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let _purger = spawn_purger(self.0.clone(), DEFAULT_PURGE_INTERVAL);
        let _ = shutdown.changed().await;
    }
}

/// A shutdown signal that fires when its sender is used or dropped.
struct Stop(Mutex<Option<oneshot::Receiver<()>>>);

#[async_trait]
impl ShutdownSignalWatch for Stop {
    async fn recv(&self) -> ShutdownSignal {
        let rx = self.0.lock().ok().and_then(|mut rx| rx.take());
        if let Some(rx) = rx {
            let _ = rx.await;
        }
        ShutdownSignal::FastShutdown
    }
}

/// Starts `proxy` on `addr` (port 0 picks a free port) on a thread of its own, and returns
/// once it accepts connections.
pub fn spawn(proxy: RelayProxy, addr: SocketAddr, threads: usize) -> io::Result<RunningProxy> {
    let addr = if addr.port() == 0 {
        // pingora binds the address itself: find a free port and let it go just before.
        TcpListener::bind(addr)?.local_addr()?
    } else {
        addr
    };
    let (stop, stopped) = oneshot::channel();
    let (started, start) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("pingora-relay".into())
        .spawn(move || {
            let server = server(proxy, addr, threads);
            let _ = started.send(());
            server.run(RunArgs {
                shutdown_signal: Box::new(Stop(Mutex::new(Some(stopped)))),
            });
        })?;
    let mut running = RunningProxy {
        addr,
        stop: Some(stop),
        thread: Some(thread),
    };
    start
        .recv()
        .map_err(|_| io::Error::other("the proxy thread ended before it started"))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    while TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline || running.thread.as_ref().is_some_and(|t| t.is_finished()) {
            running.shutdown();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the proxy does not accept connections on {addr}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(running)
}
