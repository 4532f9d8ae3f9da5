//! The same relaying proxy as `examples/axum.rs`, served by plain hyper: the layers only need
//! `tower::Service`, so any tower-based server works.
//!
//! ```sh
//! UPSTREAM_URL=https://api.openai.com/v1 UPSTREAM_KEYS=sk-first,sk-second \
//!   cargo run --example hyper
//! ```

#[path = "support/resolver.rs"]
pub mod resolver;

use std::sync::Arc;

use context_relay::store::{HandoffStore, MemoryStore};
use context_relay::tower::{Background, ComboName, GenerationLayer, InjectionLayer};
use context_relay_gateway::Upstream;
use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use resolver::{Accounts, ResolverLayer};
use tower::ServiceBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt::init();
    let base_url = std::env::var("UPSTREAM_URL").map_err(|_| "set UPSTREAM_URL (…/v1)")?;
    let keys: Vec<String> = std::env::var("UPSTREAM_KEYS")
        .map_err(|_| "set UPSTREAM_KEYS (comma-separated API keys)")?
        .split(',')
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
        .collect();
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:4000".to_owned());

    // In memory: handoffs do not survive a restart (see examples/axum.rs for redb).
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("relaying proxy on http://{listen} → {base_url}");
    let (server, _background) = serve(listener, store, Accounts::new("openai", &base_url, &keys)?)?;
    server.await?;
    Ok(())
}

/// The relaying proxy served by hyper on `listener` (the future accepts connections until it
/// fails), and the handle on its background summaries.
pub fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<dyn HandoffStore>,
    accounts: Accounts,
) -> Result<
    (
        impl std::future::Future<Output = std::io::Result<()>> + Send,
        Background,
    ),
    Box<dyn std::error::Error + Send + Sync>,
> {
    let generation = GenerationLayer::new(store.clone()).providers(["*"]);
    let background = generation.background();
    let proxy = ServiceBuilder::new()
        .map_request(|mut req: Request<Incoming>| {
            req.extensions_mut().insert(ComboName::new("default"));
            req
        })
        .layer(generation)
        .layer(ResolverLayer(accounts))
        .layer(InjectionLayer::new(store))
        .service(Upstream::new()?);
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
    Ok((server, background))
}
