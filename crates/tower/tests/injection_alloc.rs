//! The fast path keeps a passed-through Responses body by reference: a successful turn never
//! joins it into one buffer.
//!
//! A counting allocator (test-only, its own test binary) counts large allocations made on the
//! thread that asked for counting.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use context_relay_core::HandoffKey;
use context_relay_store::{Affinity, HandoffStore, MemoryStore};
use context_relay_tower::{ComboName, ContextRelay, ResolvedAccount};
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use tower::{Layer, ServiceExt, service_fn};

struct Counting;

/// Allocations at least this large are counted (the request body is larger).
const LARGE: usize = 100_000;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= LARGE && COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

type Client =
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

#[tokio::test(flavor = "current_thread")]
async fn a_successful_stream_does_not_join_the_request_body() {
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let inner = service_fn(
        |req: Request<context_relay_tower::injection::RequestBody<Client>>| async move {
            // Read frame by frame, as hyper's client sends them.
            let mut body = req.into_body();
            while let Some(frame) = body.frame().await {
                drop(frame);
            }
            let events = Bytes::from_static(
                b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"ok\"}\n\n\
                  event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\"}}\n\n",
            );
            let mut res = Response::new(Full::new(events));
            res.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("text/event-stream"),
            );
            Ok::<_, Infallible>(res)
        },
    );
    let svc = ContextRelay::builder(store.clone())
        .build()
        .injection_layer()
        .layer(inner);

    // A long history with no account-bound state, in four frames of 40 KB.
    let filler = "x".repeat(40_000);
    let mut frames = vec![format!(
        r#"{{"model":"gpt-5","stream":true,"input":[{{"role":"user","content":"{filler}"#
    )];
    frames.push(filler.clone());
    frames.push(filler.clone());
    frames.push(format!(r#"{filler}"}}]}}"#));
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = frames
        .into_iter()
        .map(|f| Ok(Frame::data(Bytes::from(f))))
        .collect();
    let mut req = Request::post("/v1/responses")
        .header("x-session-id", "s1")
        .header("authorization", "Bearer k1")
        .header("content-type", "application/json")
        .body(StreamBody::new(futures_util::stream::iter(frames)))
        .expect("request");
    req.extensions_mut().insert(ComboName::new("codex-relay"));
    req.extensions_mut()
        .insert(ResolvedAccount::new("codex", "acct-a"));
    // A session the relay knows (its first request is read, to tell its conversation).
    let key = HandoffKey::new(
        context_relay_core::session::tenant(req.headers()),
        "s1",
        "codex-relay",
    );
    store
        .set_affinity(&key, Affinity::new("codex", "acct-a"))
        .await
        .expect("memory store");

    COUNT.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
    let res = svc.oneshot(req).await.expect("infallible");
    let body = res.into_body().collect().await.expect("body").to_bytes();
    COUNTING.with(|c| c.set(false));
    assert!(body.ends_with(b"\"resp_1\"}}\n\n"));
    assert_eq!(
        COUNT.with(Cell::get),
        0,
        "large allocations during the turn"
    );
}
