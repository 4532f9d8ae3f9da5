//! An application whose account resolver sets no `ResolvedAccount` gets no handoff: the relay
//! says so in a warning, once per process, rather than doing nothing in silence. Its own test
//! binary (its own process): it installs the global `tracing` subscriber.

mod support;

use std::convert::Infallible;
use std::sync::Arc;

use context_relay_store::MemoryStore;
use context_relay_testkit::captured::Captured;
use context_relay_tower::{ComboName, ContextRelay};
use http::{Request, Response};
use support::{Body, chat, full};
use tower::{ServiceBuilder, ServiceExt};

#[tokio::test]
async fn a_response_without_its_account_is_warned_about_once() {
    let captured = Captured::install();
    let relay = ContextRelay::builder(Arc::new(MemoryStore::new())).build();
    let svc = ServiceBuilder::new()
        .map_request(|mut req: Request<Body>| {
            req.extensions_mut().insert(ComboName::new("codex-relay"));
            req
        })
        .layer(relay.generation_layer())
        // No resolver: the upstream's answer names no account, at 88 % of its quota.
        .service_fn(|_req: Request<_>| async {
            Ok::<_, Infallible>(
                Response::builder()
                    .header("x-codex-primary-used-percent", "88")
                    .header("content-type", "application/json")
                    .body(full(r#"{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"done"}}]}"#))
                    .unwrap(),
            )
        });
    for _ in 0..3 {
        let res = svc.clone().oneshot(chat("s1", "k1", 3)).await.unwrap();
        assert_eq!(res.status(), 200);
        http_body_util::BodyExt::collect(res.into_body())
            .await
            .unwrap();
    }
    relay.background().idle().await;
    let logs = captured.text();
    assert_eq!(
        logs.matches("without the account that served it").count(),
        1,
        "{logs}"
    );
    assert!(logs.contains("WARN"), "{logs}");
}
