//! How the injection layer's request and response bodies end: a client body that fails, an
//! inner response body that never reports its end.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::{Handoff, HandoffRecord};
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_tower::{ComboName, ContextRelay, ResolvedAccount};
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
        conversation: None,
        compaction: false,
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
    let svc = ContextRelay::builder(store)
        .build()
        .injection_layer()
        .layer(inner);
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

/// An SSE body that gives its frames, then `None`, and never reports `is_end_stream()` (as
/// many streaming bodies do); it counts polls after its `None`.
struct NeverSaysEnd {
    frames: std::collections::VecDeque<Bytes>,
    done: bool,
    polls_after_end: Arc<std::sync::atomic::AtomicUsize>,
}

impl http_body::Body for NeverSaysEnd {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.done {
            self.polls_after_end
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return std::task::Poll::Ready(None);
        }
        match self.frames.pop_front() {
            Some(f) => std::task::Poll::Ready(Some(Ok(Frame::data(f)))),
            None => {
                self.done = true;
                std::task::Poll::Ready(None)
            }
        }
    }
}

#[tokio::test]
async fn a_stream_read_to_its_end_ahead_is_not_polled_again() {
    use http_body::Body as _;
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let polls_after_end = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = polls_after_end.clone();
    let inner = service_fn(move |_req: Request<_>| {
        let counter = counter.clone();
        async move {
            // A stream cut before any output: the layer reads it to its end while holding it.
            let body = NeverSaysEnd {
                frames: [Bytes::from_static(
                    b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n\n",
                )]
                .into(),
                done: false,
                polls_after_end: counter,
            };
            let mut res = Response::new(body);
            res.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("text/event-stream"),
            );
            Ok::<_, Infallible>(res)
        }
    });
    let svc = ContextRelay::builder(store)
        .build()
        .injection_layer()
        .layer(inner);
    let mut req = request(
        "/v1/responses",
        http_body_util::Full::new(Bytes::from_static(
            br#"{"model":"gpt-5","input":[{"role":"user","content":"hi"}],"stream":true}"#,
        )),
        "acct-a",
    );
    // Account-bound state went out: the layer holds the stream's opening back.
    req.headers_mut().insert(
        context_relay_core::portable::TURN_STATE_HEADER,
        http::HeaderValue::from_static("ts-1"),
    );
    let res = svc.oneshot(req).await.expect("infallible");
    let mut body = res.into_body();
    let first = body.frame().await.expect("held frame").expect("ok");
    assert!(
        first
            .data_ref()
            .is_some_and(|d| d.starts_with(b"event: response.created"))
    );
    // Drained: like hyper, a consumer stops here.
    assert!(body.is_end_stream());
    assert!(body.frame().await.is_none());
    assert_eq!(
        polls_after_end.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the inner body was polled after its end"
    );
}
