//! Injecting handoffs after an account switch (DESIGN §5.4, §5.5, §9).
//!
//! [`InjectionLayer`] sits after the account resolver, which sets [`ResolvedAccount`] on the
//! request, right before the upstream client:
//!
//! ```text
//! client ─▶ ComboService ─▶ Generation ─▶ AccountResolver ─▶ Injection ─▶ upstream
//! ```
//!
//! A request is a **switch** when the account it was resolved to is not the session's
//! affinity (the last account that served it successfully), or when a live handoff exists
//! that another account wrote. On a switch the layer claims the handoff, removes the
//! account-bound state the new account would reject (`previous_response_id`, encrypted
//! reasoning items, signed thinking blocks, the `x-codex-turn-state` header) and injects the
//! handoff as a `<context_handoff>` system message, editing the raw JSON so every other byte
//! stays as the client sent it. The handoff is deleted once a response carrying it completed
//! successfully, and released for the next attempt on an error status, a failed stream or an
//! early drop.
//!
//! **Fast path.** When the session comes from a header (or a [`SessionId`] extension), the
//! store's in-memory index has no handoff for it and the affinity cache says no switch, the
//! request body is not touched at all. Clients that send no session header (the OpenAI SDKs)
//! have their body read (up to `max_body_bytes`) to derive the session fingerprint.
//!
//! Failures (store errors, bodies too large, undecodable or not JSON) never fail the request:
//! it is forwarded unchanged, and the failure is logged and counted.
//!
//! [`ResolvedAccount`]: crate::ResolvedAccount
//! [`SessionId`]: crate::SessionId

mod action;
mod after;
mod body;
mod future;
mod layer;
mod prepare;
mod respond;
mod retry;
mod service;
mod shared;

pub use action::{RELAY_HEADER, RelayAction};
pub use body::{RequestBody, ResponseBody};
pub use future::ResponseFuture;
pub use layer::InjectionLayer;
pub use service::Injection;
