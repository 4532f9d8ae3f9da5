//! Writing handoffs before an account runs out.
//!
//! [`GenerationLayer`] sits after the combo/routing service, which sets [`ComboName`] on the
//! request, and before the account resolver, which sets [`ResolvedAccount`] on the response:
//!
//! ```text
//! client ─▶ ComboService ─▶ Generation ─▶ AccountResolver ─▶ Injection ─▶ upstream
//! ```
//!
//! On each response it reads the quota signal of the serving account (a [`QuotaSignal`]
//! response extension, else the configured [`QuotaSource`]). When the account is at or above
//! the handoff threshold (default 85 %) but below 95 %, when no recent model handoff exists for
//! the `(tenant, session, combo)` key, when the key is not cooling down after a rejected or
//! unparseable summary and no other generation for it is in flight, it summarises the
//! conversation **in the background** once the reply is complete (so the assistant's reply of
//! this turn is included), and stores the handoff. The response itself is returned at once and
//! unchanged.
//!
//! - **Capture.** The request body is forwarded frame by frame while a bounded copy is kept;
//!   the copy is complete as soon as the inner body reports its end (`is_end_stream`, which is
//!   where hyper's client stops polling) or yields its last frame. The reply is complete when
//!   its body ends, or, for a stream, once its terminal event (`[DONE]` after a finish reason,
//!   `response.completed`, `message_stop`) was seen, even if the client drops the body right
//!   after it. A compressed reply is decoded per its `content-encoding`; one that cannot be
//!   decoded counts as no reply (never lossy text). Only successful (2xx) turns are summarised.
//! - **The summary request** is derived from the triggering request in its API shape (see
//!   `context_relay_core::prompt`): the client's `instructions` / `system`, `store` and
//!   `stream` as sent, an output cap, no sampling parameters unless
//!   [`ContextRelayBuilder::summary_settings`](crate::ContextRelayBuilder::summary_settings)
//!   adds some. A 400 naming an unsupported parameter
//!   is retried once without it, and the refusal is remembered for that provider and model.
//! - **Outcomes** (`context_relay_generations_total{outcome}`): `generated`; `rejected` (a
//!   non-2xx other than 408/429/5xx: the key cools down), `unparseable` (cools down),
//!   `unavailable` (timeout, transport, 408/429/5xx: no cool-down); and `extractive` when one
//!   of those left the key without a handoff and one was built from the conversation itself
//!   (task, latest ask, last assistant text, touched files), which a later model handoff
//!   replaces.
//! - **Bounds.** A job reads the request body once and keeps only its selection, then checks
//!   the refresh gate, and only then joins the queue: at most `max_queued_generations` jobs
//!   wait or run (beyond, the turn is skipped and counted as `queue_full`), at most
//!   `max_concurrent_generations` run. Failures (store down, timeouts) are logged and counted,
//!   never returned.
//!
//! [`ComboName`]: crate::ComboName
//! [`ResolvedAccount`]: crate::ResolvedAccount
//! [`QuotaSignal`]: crate::QuotaSignal
//! [`QuotaSource`]: crate::QuotaSource
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use context_relay_store::{HandoffStore, MemoryStore};
//! use context_relay_tower::{ComboName, ContextRelay, ResolvedAccount};
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
//! let relay = ContextRelay::builder(store.clone()).build();
//! let (generation, background) = (relay.generation_layer(), relay.background());
//!
//! // An upstream that answers both the turn and the summary request.
//! let upstream = service_fn(|req: Request<_>| async move {
//!     let body = BodyExt::collect(req.into_body()).await?.to_bytes();
//!     let reply = if body.windows(12).any(|w| w == b"keyDecisions") {
//!         r#"{"choices":[{"message":{"content":"{\"summary\":\"Adding a --json flag\"}"}}]}"#
//!     } else {
//!         r#"{"choices":[{"message":{"content":"ok"}}]}"#
//!     };
//!     let mut res = Response::new(Full::new(Bytes::from(reply)));
//!     res.headers_mut().insert("x-codex-primary-used-percent", "88".parse().unwrap());
//!     res.extensions_mut().insert(ResolvedAccount::new("codex", "acct-a"));
//!     Ok::<_, std::convert::Infallible>(res)
//! });
//! let svc = ServiceBuilder::new().layer(generation).service(upstream);
//!
//! let mut req = Request::post("/v1/chat/completions")
//!     .header("x-session-id", "s1")
//!     .body(Full::new(Bytes::from(r#"{"model":"gpt-5","messages":[{"role":"user","content":"add --json"}]}"#)))
//!     .unwrap();
//! req.extensions_mut().insert(ComboName::new("codex-relay"));
//! let res = svc.oneshot(req).await.unwrap();
//! res.into_body().collect().await.unwrap(); // the turn ends: the summary starts
//! background.idle().await;
//!
//! let stored = store.list(None, Some("s1")).await.unwrap();
//! assert_eq!(stored[0].handoff.summary, "Adding a --json flag");
//! assert_eq!(stored[0].from_account, "acct-a");
//! # }
//! ```

mod future;
mod layer;
mod service;

pub use crate::request_body::RequestBody;
pub use crate::response_body::ResponseBody;
pub use context_relay_engine::{
    DEFAULT_MAX_CONCURRENT_GENERATIONS, DEFAULT_MAX_QUEUED_GENERATIONS,
};
pub use future::ResponseFuture;
pub use layer::GenerationLayer;
pub use service::Generation;
