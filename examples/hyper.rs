//! The same relaying proxy as `examples/axum.rs`, served by plain hyper: the layers only need
//! `tower::Service`, so any tower-based server works.
//!
//! ```sh
//! UPSTREAM_URL=http://127.0.0.1:8000/v1 UPSTREAM_KEYS=sk-first,sk-second \
//!   cargo run --example hyper
//! ```

#[path = "support/resolver.rs"]
pub mod resolver;

use std::sync::Arc;

use context_relay::store::{DEFAULT_PURGE_INTERVAL, HandoffStore, MemoryStore, spawn_purger};
use context_relay::tower::{Background, ComboName, ContextRelay};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use resolver::Accounts;
use tower::ServiceBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt::init();
    let url = std::env::var("UPSTREAM_URL").map_err(|_| "set UPSTREAM_URL (…/v1)")?;
    let keys = std::env::var("UPSTREAM_KEYS").map_err(|_| "set UPSTREAM_KEYS (k1,k2)")?;
    let keys: Vec<String> = keys.split(',').map(|k| k.trim().to_owned()).collect();
    // In memory: handoffs do not survive a restart (see examples/axum.rs for redb).
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    // Expired handoffs are absent from every read; the purger reclaims their space.
    let _purger = spawn_purger(store.clone(), DEFAULT_PURGE_INTERVAL);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:4000").await?;
    let (server, _background) = serve(listener, store, Accounts::new("openai", &url, &keys)?);
    server.await?;
    Ok(())
}

/// The relaying proxy served by hyper on `listener` (the future accepts connections until it
/// fails), and the handle on its background work.
pub fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<dyn HandoffStore>,
    accounts: Accounts,
) -> (
    impl std::future::Future<Output = std::io::Result<()>> + Send,
    Background,
) {
    let relay = ContextRelay::builder(store).build();
    let (client, rotate) = (accounts.client(), accounts.clone());
    let proxy = ServiceBuilder::new()
        .map_request(|mut req: Request<Incoming>| {
            req.extensions_mut().insert(ComboName::new("default"));
            req
        })
        .layer(relay.generation_layer())
        .map_response(move |res: Response<_>| rotate.observe(res))
        .map_request(move |req: Request<_>| accounts.resolve(req))
        .layer(relay.injection_layer())
        .service(client);
    let server = async move {
        loop {
            let (stream, _) = listener.accept().await?;
            let service = TowerToHyperService::new(proxy.clone());
            tokio::spawn(async move {
                if let Err(e) = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    eprintln!("connection ended with an error: {e}");
                }
            });
        }
    };
    (server, relay.background())
}
