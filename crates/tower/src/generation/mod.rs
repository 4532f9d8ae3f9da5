//! Writing handoffs before an account runs out (DESIGN §4).
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
//! the handoff threshold (default 85 %) but below 95 %, when no recent handoff exists for the
//! `(tenant, session, combo)` key, when the key is not cooling down after unparseable replies
//! and no other generation for it is in flight, it summarises the conversation **in the
//! background** once the response body has ended (so the assistant's reply of this turn is
//! included), and stores the handoff. The response itself is returned at once and unchanged.
//!
//! The request body is forwarded frame by frame while a bounded copy is kept; only successful
//! (2xx) responses are summarised. Failures (store down, summary timeout, unparseable reply)
//! are logged and counted, never returned.
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
//! use context_relay_tower::{ComboName, GenerationLayer, ResolvedAccount};
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
//! let generation = GenerationLayer::new(store.clone());
//! let background = generation.background();
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

mod body;
mod call;
mod future;
mod headers;
mod layer;
mod service;
mod shared;
mod task;

pub use body::{RequestBody, ResponseBody};
pub use future::ResponseFuture;
pub use layer::{
    DEFAULT_MAX_CONCURRENT_GENERATIONS, DEFAULT_MAX_QUEUED_GENERATIONS, GenerationLayer,
};
pub use service::Generation;
