//! The orchestration of context-relay, transport-agnostic: what to do with each request and
//! response of a session that a gateway rotates between accounts of one provider.
//!
//! context-relay keeps long LLM coding sessions alive across account rotation. Before an
//! account runs out (its usage crosses the handoff threshold), the session is summarised in the
//! background into a *handoff*; when the session then lands on another account, the handoff is
//! injected into its request and the state only the first account can read is removed.
//!
//! This crate decides; adapters move the bytes. It knows `http` heads, [`Bytes`](bytes::Bytes)
//! and the [store](context_relay_store), nothing of tower, hyper or any server:
//!
//! - [`Relay::inject`] at header time on the way to the provider: pass, forward untouched with
//!   a [`Ticket`] (the fast path), or read the body and [`BodyDecision::decide`] (claim,
//!   scrub, inject). The ticket completes the handoff when the response completed and gives
//!   it back otherwise; a [`Repair`] sends the request again without account-bound state when
//!   the provider rejects it.
//! - [`Relay::generation`] at header time for a summary: push the request body into its
//!   [`Capture`], give the response head to [`GenerationTicket::response`] (the quota gates),
//!   push the reply into the [`ReplyWatch`]; the summary job runs on the relay's
//!   [`Background`] through a [`Summarizer`].
//!
//! - **Model switches**: with the [`ServingModel`] (`provider/model`) known, a session sent to
//!   another model than the one that last served it (a combo falling through to its next
//!   target) has all its account-bound state removed and gets a handoff naming both models,
//!   made from its freshest stored handoff or, without one, a note that no summary exists.
//!   After the first successful response on the new model, a handoff of kind `model-switch`
//!   is written on it (kept apart from the account-switch handoff: neither overwrites or
//!   consumes the other). `RelayConfig::model_switch` switches this per combo;
//!   `RelayConfig::account_handoff = false` keeps only this path (no quota-driven handoff).
//!
//! Nothing here fails or delays a request because of the relay: failures are logged with
//! `tracing`, counted with the `metrics` facade (names in [`metrics`]), and the request goes
//! through unchanged.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use context_relay_core::ending::Ending;
//! use context_relay_engine::{ComboName, Inject, Relay, RequestFacts, ResolvedAccount};
//! use context_relay_store::{HandoffStore, MemoryStore};
//! use http::{HeaderMap, Uri};
//!
//! let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
//! let relay = Relay::builder(store.clone()).build();
//! let uri: Uri = "/v1/responses".parse()?;
//! let mut headers = HeaderMap::new();
//! headers.insert("session-id", "s1".parse()?);
//! let combo = ComboName::new("codex");
//! let (a, b) = (ResolvedAccount::new("codex", "acct-a"), ResolvedAccount::new("codex", "acct-b"));
//! let on = |account| RequestFacts { combo: Some(&combo), account: Some(account), ..Default::default() };
//!
//! // The session's first turn, on acct-a: read once, to record the session's conversation.
//! let Inject::ReadBody(first) = relay.inject(&uri, &headers, on(&a), 0) else { panic!() };
//! let body = Bytes::from_static(br#"{"input":"add a --json flag"}"#);
//! let decided = first.decide(&mut headers.clone(), body.clone()).await;
//! assert_eq!(decided.body, body, "forwarded as sent");
//! // The response completed: the session's affinity is now acct-a.
//! decided.ticket.expect("a session").ended(Ending::Completed);
//! relay.background().idle().await;
//! // Its next turns on acct-a take the fast path: the body is not read.
//! assert!(matches!(relay.inject(&uri, &headers, on(&a), 0), Inject::Forward { .. }));
//!
//! // The next turn was sent to acct-b: a switch, decided on the body.
//! let Inject::ReadBody(decision) = relay.inject(&uri, &headers, on(&b), 0) else { panic!() };
//! let raw = Bytes::from_static(br#"{"input":[{"type":"reasoning","encrypted_content":"gAAA-of-acct-a"}]}"#);
//! let decided = decision.decide(&mut headers, raw).await;
//! assert_eq!(decided.body, Bytes::from_static(br#"{"input":[]}"#), "acct-a's state removed");
//! assert!(decided.ticket.expect("a session").action().scrubbed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod action;
mod background;
mod configs;
mod events;
mod extensions;
pub mod generation;
pub mod injection;
mod join;
pub mod metrics;
mod quota;
mod relay;
pub mod summary;
mod tenant;

pub use action::{RELAY_HEADER, RelayAction};
pub use background::Background;
pub use configs::RelayConfigs;
pub use events::{RelayEvent, RelayEvents};
pub use extensions::{
    ComboName, QuotaSignal, RequestFacts, ResolvedAccount, ServingModel, SessionId, SkipRelay,
    SummaryCall, Tenant, relay_skips,
};
pub use generation::{Capture, GenerationTicket, ReplyWatch};
pub use injection::{BodyDecision, Decided, EndWatch, Inject, Look, Repair, Ticket};
pub use quota::{HeaderQuota, QuotaSource};
pub use relay::{
    DEFAULT_MAX_CONCURRENT_GENERATIONS, DEFAULT_MAX_QUEUED_GENERATIONS, Relay, RelayBuilder,
};
pub use summary::{
    BoxError, MAX_ERROR_BODY_BYTES, MAX_SUMMARY_REPLY_BYTES, Summarizer, SummaryError,
    SummaryFuture, SummaryRequest,
};
