//! A minimal relaying proxy on axum, with both layers where DESIGN §3 puts them:
//!
//! ```text
//! axum ─▶ combo (sets ComboName) ─▶ GenerationLayer ─▶ resolver (sets ResolvedAccount) ─▶ InjectionLayer ─▶ upstream
//! ```
//!
//! Run it against any OpenAI-compatible upstream:
//!
//! ```sh
//! UPSTREAM_URL=https://api.openai.com/v1 UPSTREAM_KEYS=sk-first,sk-second \
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
use context_relay::store::{HandoffStore, RedbStore};
use context_relay::tower::{Background, ComboName, GenerationLayer, InjectionLayer};
use context_relay_gateway::Upstream;
use http::{Request, Response};
use resolver::{Accounts, ResolverLayer};
use tower::ServiceBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,context_relay_tower=debug".into()),
        )
        .init();
    let base_url = std::env::var("UPSTREAM_URL").map_err(|_| "set UPSTREAM_URL (…/v1)")?;
    let keys: Vec<String> = std::env::var("UPSTREAM_KEYS")
        .map_err(|_| "set UPSTREAM_KEYS (comma-separated API keys)")?
        .split(',')
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
        .collect();
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:4000".to_owned());

    let store: Arc<dyn HandoffStore> = Arc::new(RedbStore::open("context-relay-example.redb")?);
    let (app, _background) = router(store, Accounts::new("openai", &base_url, &keys)?)?;
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("relaying proxy on http://{listen} → {base_url}");
    axum::serve(listener, app).await?;
    Ok(())
}

/// The relaying proxy as an axum router, and the handle on its background summaries.
pub fn router(
    store: Arc<dyn HandoffStore>,
    accounts: Accounts,
) -> Result<(Router, Background), Box<dyn std::error::Error + Send + Sync>> {
    let generation = GenerationLayer::new(store.clone()).providers(["*"]);
    let background = generation.background();
    let proxy = ServiceBuilder::new()
        .map_response(|res: Response<_>| res.map(Body::new))
        // The combo service: every request of this example belongs to one combo.
        .map_request(|mut req: Request<Body>| {
            req.extensions_mut().insert(ComboName::new("default"));
            req
        })
        .layer(generation)
        .map_response(|res: Response<_>| res.map(Body::new))
        .layer(ResolverLayer(accounts))
        .layer(InjectionLayer::new(store))
        .service(Upstream::new()?);
    Ok((Router::new().fallback_service(proxy), background))
}
