//! The one-call builder: both layers share one configuration and one background tracker,
//! `disabled()` keeps the service type and passes everything through, and InjectionLayer puts
//! the request's account on every response.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::{Handoff, HandoffKey, HandoffRecord, session};
use context_relay_store::{Affinity, HandoffStore, MemoryStore};
use context_relay_tower::{ComboName, ContextRelay, RELAY_HEADER, RequestBody, ResolvedAccount};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceExt};

const BODY: &str =
    r#"{"model":"gpt-5","messages":[{"role":"user","content":"add a --json flag"}]}"#;

/// An upstream that answers with the body it received.
async fn echo<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let body = req.into_body().collect().await.expect("body").to_bytes();
    Ok(Response::new(Full::new(body)))
}

fn request(combo: Option<&str>, account: &str) -> Request<Full<Bytes>> {
    let mut req = Request::post("/v1/chat/completions")
        .header("x-session-id", "s1")
        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
        .expect("request");
    if let Some(c) = combo {
        req.extensions_mut().insert(ComboName::new(c));
    }
    req.extensions_mut()
        .insert(ResolvedAccount::new("codex", account));
    req
}

/// A handoff acct-a wrote, and the session's affinity to acct-a.
async fn handoff_from_a(store: &Arc<dyn HandoffStore>) {
    let key = HandoffKey::new(session::tenant(&HeaderMap::new()), "s1", "codex-relay");
    let now = SystemTime::now();
    let mut record = HandoffRecord {
        version: 1,
        kind: Default::default(),
        tenant: key.tenant.clone(),
        session: key.session.clone(),
        combo: key.combo.clone(),
        from_provider: String::new(),
        from_account: String::new(),
        handoff: Handoff {
            summary: "Adding a --json flag to the CLI.".into(),
            key_decisions: vec![],
            task_progress: "flag parsed".into(),
            active_entities: vec![],
        },
        message_count: 4,
        conversation: None,
        compaction: false,
        model: "gpt-5".into(),
        threshold: 0.85,
        generated_at: now,
        expires_at: now + Duration::from_secs(3600),
    };
    record.set_from(&ResolvedAccount::new("codex", "acct-a"));
    store.upsert(record).await.expect("upsert");
    store
        .set_affinity(&key, Affinity::new("codex", "acct-a"))
        .await
        .expect("affinity");
}

#[tokio::test]
async fn the_account_is_on_every_response() {
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    for layer in [
        ContextRelay::builder(store).build().injection_layer(),
        ContextRelay::disabled().injection_layer(),
    ] {
        let svc = tower::ServiceBuilder::new()
            .layer(layer)
            .service(tower::service_fn(echo::<RequestBody<Full<Bytes>>>));
        // Relayed or not (no combo): the resolver need not copy the account itself.
        for combo in [Some("codex-relay"), None] {
            let res = svc.clone().oneshot(request(combo, "acct-a")).await.unwrap();
            assert_eq!(
                res.extensions().get::<ResolvedAccount>(),
                Some(&ResolvedAccount::new("codex", "acct-a"))
            );
        }
    }
}

#[tokio::test]
async fn disabled_passes_a_switch_through_with_the_same_service_type() {
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    handoff_from_a(&store).await;
    let stack = |relay: &ContextRelay| {
        tower::ServiceBuilder::new()
            .layer(relay.generation_layer())
            .layer(relay.injection_layer())
            .service(tower::service_fn(
                echo::<RequestBody<RequestBody<Full<Bytes>>>>,
            ))
    };
    let on = ContextRelay::builder(store.clone()).build();
    let off = ContextRelay::disabled();
    // One type for both: an application switches the relay off by configuration.
    let mut services = [stack(&off), stack(&on)];

    let res = services[0]
        .ready()
        .await
        .unwrap()
        .call(request(Some("codex-relay"), "acct-b"))
        .await
        .unwrap();
    assert!(res.headers().get(RELAY_HEADER).is_none());
    let sent = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(sent, Bytes::from_static(BODY.as_bytes()), "untouched");

    let res = services[1]
        .ready()
        .await
        .unwrap()
        .call(request(Some("codex-relay"), "acct-b"))
        .await
        .unwrap();
    assert_eq!(res.headers()[RELAY_HEADER], "injected");
    let sent = res.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&sent).contains("<context_handoff>"));
    // Both layers report to the one tracker: the completion of the claim is waited for.
    on.background().idle().await;
    assert_eq!(on.background().in_flight(), 0);
    let key = HandoffKey::new(session::tenant(&HeaderMap::new()), "s1", "codex-relay");
    assert!(store.get(&key).await.unwrap().is_none(), "consumed");
}
