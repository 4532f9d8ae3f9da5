//! Runs the pass-through path in a loop, for profilers that count instructions
//! (`valgrind --tool=callgrind`), which stay repeatable on a busy machine where timings do not.
//!
//! `cargo run --release -p context-relay-tower --example profile_passthrough -- [layered|bare] [N] [chat|responses]`

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_testkit::hyper_request;
use context_relay_tower::{ComboName, ContextRelay, ResolvedAccount};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceBuilder, ServiceExt};

const BODY: &str =
    r#"{"model":"gpt-5","messages":[{"role":"user","content":"add a --json flag"}]}"#;

/// A Responses turn carrying account-bound state: its pass-through keeps the frames for a
/// repair.
const RESPONSES_BODY: &str = r#"{"model":"gpt-5.5","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"add a --json flag"}]},{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAB-minted-by-acct-a"}]}"#;

fn request(responses: bool) -> Request<Full<Bytes>> {
    let (path, body) = if responses {
        ("/v1/responses", RESPONSES_BODY)
    } else {
        ("/v1/chat/completions", BODY)
    };
    let mut req = hyper_request::post(path, &hyper_request::HEADERS, body);
    req.extensions_mut().insert(ComboName::new("codex-relay"));
    req.extensions_mut()
        .insert(ResolvedAccount::new("codex", "acct-a"));
    req
}

async fn upstream<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let _ = req.into_body().collect().await.expect("body");
    Ok(Response::new(Full::new(Bytes::from_static(b"{}"))))
}

/// One request through `svc`, its response read whole.
async fn once<S, B>(mut svc: S, req: Request<Full<Bytes>>)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let res = svc.ready().await.expect("ready").call(req).await;
    res.expect("ok").into_body().collect().await.expect("body");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "layered".to_owned());
    let n: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let responses = args.next().is_some_and(|api| api == "responses");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let relay = ContextRelay::builder(store).build();
    let layered = ServiceBuilder::new()
        .layer(relay.generation_layer())
        .layer(relay.injection_layer())
        .service(tower::service_fn(upstream));
    let bare = tower::service_fn(upstream::<Full<Bytes>>);
    rt.block_on(async {
        // Warm the affinity cache: the steady state of a session on its account.
        let res = layered
            .clone()
            .oneshot(request(responses))
            .await
            .expect("ok");
        res.into_body().collect().await.expect("body");
        tokio::task::yield_now().await;
        for _ in 0..n {
            if mode == "bare" {
                once(bare, request(responses)).await;
            } else {
                once(layered.clone(), request(responses)).await;
            }
        }
    });
}
