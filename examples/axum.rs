//! A minimal relaying proxy on axum, with both layers where they belong:
//!
//! ```text
//! axum ─▶ combo (sets ComboName) ─▶ GenerationLayer ─▶ resolver (sets ResolvedAccount) ─▶ InjectionLayer ─▶ upstream
//! ```
//!
//! Run it against any OpenAI-compatible upstream reachable over plain HTTP (a local model
//! server, or a TLS-terminating proxy):
//!
//! ```sh
//! UPSTREAM_URL=http://127.0.0.1:8000/v1 UPSTREAM_KEYS=sk-first,sk-second \
//!   cargo run --example axum
//! curl -s localhost:4000/v1/chat/completions -H 'x-session-id: demo' \
//!   -H 'content-type: application/json' \
//!   -d '{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}'
//! ```
//!
//! Handoffs are kept in `context-relay-example.redb` in the current folder.

#[path = "support/resolver.rs"]
pub mod resolver;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use context_relay::store::{DEFAULT_PURGE_INTERVAL, HandoffStore, RedbStore, spawn_purger};
use context_relay::tower::{Background, ComboName, ContextRelay};
use http::{Request, Response};
use resolver::Accounts;
use tower::ServiceBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt::init();
    let url = std::env::var("UPSTREAM_URL").map_err(|_| "set UPSTREAM_URL (…/v1)")?;
    let keys = std::env::var("UPSTREAM_KEYS").map_err(|_| "set UPSTREAM_KEYS (k1,k2)")?;
    let keys: Vec<String> = keys.split(',').map(|k| k.trim().to_owned()).collect();
    let store: Arc<dyn HandoffStore> = Arc::new(RedbStore::open("context-relay-example.redb")?);
    // Expired handoffs are absent from every read; the purger reclaims their space.
    let _purger = spawn_purger(store.clone(), DEFAULT_PURGE_INTERVAL);
    let (app, _background) = router(store, Accounts::new("openai", &url, &keys)?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:4000").await?;
    axum::serve(listener, app).await?;
    Ok(())
}

/// The relaying proxy as an axum router, and the handle on its background work.
pub fn router(store: Arc<dyn HandoffStore>, accounts: Accounts) -> (Router, Background) {
    let relay = ContextRelay::builder(store).build();
    let (client, rotate) = (accounts.client(), accounts.clone());
    let proxy = ServiceBuilder::new()
        // The combo service: every request of this example belongs to one combo.
        .map_request(|mut req: Request<Body>| {
            req.extensions_mut().insert(ComboName::new("default"));
            req
        })
        .layer(relay.generation_layer())
        // The account resolver: picks an account, skips one that answered 429.
        .map_response(move |res: Response<_>| rotate.observe(res))
        .map_request(move |req: Request<_>| accounts.resolve(req))
        .layer(relay.injection_layer())
        .service(client);
    (Router::new().fallback_service(proxy), relay.background())
}
