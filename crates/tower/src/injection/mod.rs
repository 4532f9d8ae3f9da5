//! Injecting handoffs after an account switch, and keeping the session working on the new
//! account.
//!
//! [`InjectionLayer`] sits after the account resolver, which sets [`ResolvedAccount`] on the
//! request, right before the upstream client:
//!
//! ```text
//! client ─▶ ComboService ─▶ Generation ─▶ AccountResolver ─▶ Injection ─▶ upstream
//! ```
//!
//! A request is a **switch** when the account it was resolved to is not the session's
//! affinity (the last account that served it successfully through this combo), or when a live
//! handoff exists that another account wrote. On a switch the layer claims the handoff, removes
//! all the account-bound state the new account would reject (`previous_response_id`, encrypted
//! reasoning, compaction and tool-output items, signed thinking blocks, the
//! `x-codex-turn-state` header) and injects the handoff as a `<context_handoff>` system
//! message, editing the raw JSON so every other byte stays as the client sent it.
//!
//! **The scrub lasts.** Clients resend their whole history on every turn. The digests of the
//! account-bound state a switch request carried are recorded with the new affinity; every
//! later request of the session to that account is stripped of exactly those pieces, while the
//! state the account minted itself is forwarded. The record lives for the handoff TTL.
//!
//! **Success means the response completed.** The handoff is deleted, and the affinity moves,
//! only when the response body ended with the API's terminal success event (or is a complete
//! JSON body). An error status, an in-band failure, a cut stream or an early drop releases the
//! handoff; on an error status before the response is handed back, so that a retry on another
//! account can claim it at once.
//!
//! **Repair.** A `400` that blames account-bound state (encrypted content that cannot be
//! verified, an unknown previous response, an invalid thinking signature), or a Responses
//! stream that fails that way before any output (when the request carries account-bound state,
//! its opening events are held back until the first output event, at most 10 s per event), is
//! answered by stripping all account-bound state and sending the
//! request once more to the same account. Any other error is passed on untouched. This also
//! works on the fast path: the request's frames are kept by reference as they go out.
//!
//! **Model switches.** With a [`ServingModel`](crate::ServingModel) (`provider/model`) on the
//! request, a session sent to another model than the one that last served it loses all its
//! account-bound state and gets a handoff naming both models (its freshest stored handoff, or a
//! note that none exists); GenerationLayer then writes a `model-switch` handoff on the new
//! model after its first successful response.
//!
//! Responses the layer acted on carry a [`RelayAction`] extension and the
//! [`RELAY_HEADER`] (`x-context-relay: model-switch, injected, scrubbed, repaired`). Every
//! response of a request with a [`ResolvedAccount`] carries that account as an extension
//! (unless the inner service set one), so that the resolver need not copy it.
//!
//! **Fast path.** When the session comes from a header (or a [`SessionId`] extension), the
//! store's in-memory index has no handoff for it and the affinity cache says the session stays
//! on its account with nothing foreign to remove, the request body is neither read nor parsed.
//! Clients that send no session header (the OpenAI SDKs) have their body read (up to
//! `max_body_bytes`) to derive the session fingerprint.
//!
//! Failures (store errors, bodies too large, undecodable or not JSON) never fail the request:
//! it is forwarded unchanged, and the failure is logged and counted.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use context_relay_store::{Affinity, HandoffStore, MemoryStore};
//! use context_relay_tower::injection::{RELAY_HEADER, RelayAction};
//! use context_relay_tower::{ComboName, ContextRelay, ResolvedAccount};
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! let store = Arc::new(MemoryStore::new());
//! let upstream = tower::service_fn(|req: Request<_>| async move {
//!     let body = BodyExt::collect(req.into_body()).await?.to_bytes();
//!     Ok::<_, std::convert::Infallible>(Response::new(Full::new(body)))
//! });
//! let svc = ServiceBuilder::new()
//!     .layer(ContextRelay::builder(store.clone()).build().injection_layer())
//!     .service(upstream);
//!
//! // The session was served by acct-a; this request was resolved to acct-b.
//! let session = context_relay_core::HandoffKey::new(
//!     context_relay_core::session::tenant(&http::HeaderMap::new()), "s1", "codex");
//! store.set_affinity(&session, Affinity::new("codex", "acct-a")).await?;
//! let mut req = Request::post("/v1/responses")
//!     .header("session-id", "s1")
//!     .body(Full::new(Bytes::from_static(
//!         br#"{"input":[{"type":"reasoning","encrypted_content":"gAAA-of-acct-a"}]}"#,
//!     )))?;
//! req.extensions_mut().insert(ComboName::new("codex"));
//! req.extensions_mut().insert(ResolvedAccount::new("codex", "acct-b"));
//! let res = svc.oneshot(req).await?;
//! assert_eq!(res.headers()[RELAY_HEADER], "scrubbed");
//! assert!(res.extensions().get::<RelayAction>().is_some_and(|a| a.scrubbed));
//! let forwarded = res.into_body().collect().await?.to_bytes();
//! assert_eq!(forwarded, Bytes::from_static(br#"{"input":[]}"#));
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! # }).unwrap();
//! ```
//!
//! [`ResolvedAccount`]: crate::ResolvedAccount
//! [`SessionId`]: crate::SessionId

mod future;
mod layer;
mod read;
mod respond;
mod retry;
mod service;

pub use crate::request_body::RequestBody;
pub use crate::response_body::ResponseBody;
pub use context_relay_engine::{RELAY_HEADER, RelayAction};
pub use future::ResponseFuture;
pub use layer::InjectionLayer;
pub use service::Injection;
