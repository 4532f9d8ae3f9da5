//! How the injection layer's request and response bodies end: a client body that fails, an
//! inner response body that never reports its end.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::{Handoff, HandoffRecord};
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_tower::{ComboName, InjectionLayer, ResolvedAccount};
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use tower::{Layer, ServiceExt, service_fn};

#[derive(Debug)]
struct Broken;

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("client body reset")
    }
}

impl std::error::Error for Broken {}

fn tenant_of(key: &str) -> String {
    let mut h = http::HeaderMap::new();
    h.insert(
        "authorization",
        format!("Bearer {key}").parse().expect("header"),
    );
    context_relay_core::session::tenant(&h)
}

/// A handoff of session `s1` (credential `k1`) written on acct-a.
fn record() -> HandoffRecord {
    let now = SystemTime::now();
    HandoffRecord {
        version: 1,
        kind: Default::default(),
        tenant: tenant_of("k1").into(),
        session: "s1".into(),
        combo: "codex-relay".into(),
        from_provider: "codex".into(),
        from_account: "acct-a".into(),
        handoff: Handoff {
            summary: "Adding a --json flag to the CLI".into(),
            key_decisions: vec!["use serde".into()],
            task_progress: "flag parsed; tests pending".into(),
            active_entities: vec!["src/cli.rs".into()],
        },
        message_count: 12,
        model: "gpt-5".into(),
        threshold: 0.85,
        generated_at: now,
        expires_at: now + Duration::from_secs(3600),
    }
}

fn request<B>(path: &str, body: B, account: &str) -> Request<B> {
    let mut req = Request::post(path)
        .header("x-session-id", "s1")
        .header("authorization", "Bearer k1")
        .header("content-type", "application/json")
        .body(body)
        .expect("request");
    req.extensions_mut().insert(ComboName::new("codex-relay"));
    req.extensions_mut()
        .insert(ResolvedAccount::new("codex", account));
    req
}

#[tokio::test]
async fn a_failed_client_body_reaches_the_inner_service_as_a_failure() {
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    store.upsert(record()).await.expect("upsert");
    // The first half of a chat request, then the client's connection fails.
    let frames: Vec<Result<Frame<Bytes>, Broken>> = vec![
        Ok(Frame::data(Bytes::from_static(
            br#"{"model":"gpt-5","messages":[{"role":"user","content":"#,
        ))),
        Err(Broken),
        Ok(Frame::data(Bytes::from_static(br#""hi"}]}"#))),
    ];
    let body = StreamBody::new(futures_util::stream::iter(frames));
    type Client =
        StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Broken>>>>;
    let seen: Arc<Mutex<Option<Result<Bytes, String>>>> = Arc::default();
    let inner_seen = seen.clone();
    let inner = service_fn(
        move |req: Request<context_relay_tower::injection::RequestBody<Client>>| {
            let seen = inner_seen.clone();
            async move {
                let read = req
                    .into_body()
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .map_err(|e| e.to_string());
                *seen.lock().expect("lock") = Some(read);
                Ok::<_, Infallible>(Response::new(http_body_util::Full::new(
                    Bytes::from_static(b"{}"),
                )))
            }
        },
    );
    let svc = InjectionLayer::new(store).layer(inner);
    let _ = svc
        .oneshot(request("/v1/chat/completions", body, "acct-b"))
        .await
        .expect("infallible");
    let seen = seen
        .lock()
        .expect("lock")
        .take()
        .expect("inner service called");
    assert_eq!(seen, Err("client body reset".to_owned()));
}
