//! Cost of the layers, measured side by side in one run:
//! - pass-through (no handoff, no switch): the bare service vs both layers around it
//!   (the budget: at most 1 µs added per request);
//! - the injection path: a switch with a handoff, claimed, injected and completed.
//!
//! `cargo bench -p context-relay-tower --bench layers`

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::{Handoff, HandoffRecord};
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_testkit::hyper_request;
use context_relay_tower::{ComboName, ContextRelay, ResolvedAccount};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceBuilder, ServiceExt};

const BODY: &str = r#"{"model":"gpt-5","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"add a --json flag to the CLI and cover it with a test"}]}"#;

const RESPONSES_BODY: &str = r#"{"model":"gpt-5.5","stream":false,"store":false,"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"add a --json flag"}]},{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAB-minted-by-acct-a"}]}"#;

fn request(account: &str) -> Request<Full<Bytes>> {
    request_to("/v1/chat/completions", BODY, account)
}

/// A Responses turn: an API with account-bound state, whose pass-through keeps the request
/// frames (by reference) for a repair.
fn responses_request(account: &str) -> Request<Full<Bytes>> {
    request_to("/v1/responses", RESPONSES_BODY, account)
}

fn request_to(path: &str, body: &'static str, account: &str) -> Request<Full<Bytes>> {
    let mut req = hyper_request::post(path, &hyper_request::HEADERS, body);
    req.extensions_mut().insert(ComboName::new("codex-relay"));
    req.extensions_mut()
        .insert(ResolvedAccount::new("codex", account.to_owned()));
    req
}

async fn upstream<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    // The upstream reads the body, as a real client would.
    let body = req.into_body().collect().await.expect("body").to_bytes();
    let mut res = Response::new(Full::new(Bytes::from_static(b"{\"choices\":[]}")));
    res.headers_mut().insert(
        "content-length",
        body.len().to_string().parse().expect("value"),
    );
    Ok(res)
}

async fn drain<B: http_body::Body>(res: Response<B>)
where
    B::Error: std::fmt::Debug,
{
    res.into_body().collect().await.expect("response body");
}

/// One request through `svc`, its response drained.
fn once<S, B>(rt: &tokio::runtime::Runtime, mut svc: S, req: Request<Full<Bytes>>)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    rt.block_on(async {
        let res = svc.ready().await.expect("ready").call(req).await;
        drain(res.expect("ok")).await;
    })
}

fn record() -> HandoffRecord {
    let mut h = http::HeaderMap::new();
    h.insert("authorization", "Bearer sk-bench".parse().expect("value"));
    let now = SystemTime::now();
    HandoffRecord {
        version: 1,
        kind: Default::default(),
        tenant: context_relay_core::session::tenant(&h).into(),
        session: "bench-session".into(),
        combo: "codex-relay".into(),
        from_provider: "codex".into(),
        from_account: "acct-a".into(),
        handoff: Handoff {
            summary: "Adding a --json flag to the CLI.".into(),
            key_decisions: vec!["serde for output".into()],
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

fn passthrough(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let bare = tower::service_fn(upstream::<Full<Bytes>>);
    let relay = ContextRelay::builder(store.clone()).build();
    let layered = ServiceBuilder::new()
        .layer(relay.generation_layer())
        .layer(relay.injection_layer())
        .service(tower::service_fn(upstream));
    // Warm the affinity cache: steady state of a session on its account.
    rt.block_on(async {
        let res = layered
            .clone()
            .oneshot(request("acct-a"))
            .await
            .expect("ok");
        drain(res).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    });

    let mut group = c.benchmark_group("passthrough");
    group.bench_function("bare", |b| b.iter(|| once(&rt, bare, request("acct-a"))));
    group.bench_function("generation+injection", |b| {
        b.iter(|| once(&rt, layered.clone(), request("acct-a")))
    });
    group.bench_function("responses/bare", |b| {
        b.iter(|| once(&rt, bare, responses_request("acct-a")))
    });
    group.bench_function("responses/generation+injection", |b| {
        b.iter(|| once(&rt, layered.clone(), responses_request("acct-a")))
    });
    group.finish();
}

fn injection(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let relay = ContextRelay::builder(store.clone()).build();
    let (injection, background) = (relay.injection_layer(), relay.background());
    let layered = ServiceBuilder::new()
        .layer(injection)
        .service(tower::service_fn(upstream));
    c.bench_function("injection/switch_with_handoff", |b| {
        b.iter(|| {
            rt.block_on(async {
                store.upsert(record()).await.expect("upsert");
                let res = layered
                    .clone()
                    .oneshot(request("acct-b"))
                    .await
                    .expect("ok");
                drain(res).await;
                background.idle().await;
            })
        })
    });
}

criterion_group!(benches, passthrough, injection);
criterion_main!(benches);
