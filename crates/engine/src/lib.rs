//! The orchestration of context-relay, transport-agnostic: what to do with each request and
//! response of a session that a gateway rotates between accounts of one provider.
//!
//! context-relay keeps long LLM coding sessions alive across account rotation. Before an
//! account runs out (its usage crosses the handoff threshold), the session is summarised in the
//! background into a *handoff*; when the session then lands on another account, the handoff is
//! injected into its request and the state only the first account can read is removed.
//!
//! This crate decides; adapters move the bytes. It knows `http` heads, [`Bytes`](bytes::Bytes)
//! and the [store](context_relay_store), nothing of tower, hyper or any server. The lifecycle
//! of a request is two phase objects, each called in the order a proxy sees the request:
//!
//! - a [`Turn`] per client request ([`Relay::turn`]), the generation side: a copy of the
//!   request, the quota gates on the response head, the reply watched, the summary job started
//!   on the relay's [`Background`] through a [`Summarizer`];
//! - an [`Attempt`] per upstream attempt ([`Relay::attempt`]), the injection side: the body
//!   plan, the switch decision (claim, scrub, inject), the claim given back on an error before
//!   the client sees it, the look ahead and resend when the provider rejects account-bound
//!   state, the handoff completed only when the response body completed.
//!
//! The ordering rules live in those two types (see [`attempt`] and [`turn`]); adapters (the
//! tower layers, the pingora example's `RelayPhases`) translate their framework's phases into
//! their calls.
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
//! use context_relay_engine::{BodyPlan, ComboName, Relay, RequestFacts, ResolvedAccount, ResponsePlan};
//! use context_relay_store::{HandoffStore, MemoryStore};
//! use http::{HeaderMap, StatusCode, Uri};
//!
//! let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
//! let relay = Relay::builder(store.clone()).build();
//! let uri: Uri = "/v1/responses".parse()?;
//! let mut headers = HeaderMap::new();
//! headers.insert("session-id", "s1".parse()?);
//! let combo = ComboName::new("codex");
//! let (a, b) = (ResolvedAccount::new("codex", "acct-a"), ResolvedAccount::new("codex", "acct-b"));
//! let on = |account| RequestFacts { combo: Some(&combo), account: Some(account), ..Default::default() };
//! let completed = b"event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n";
//!
//! // The session's first turn, on acct-a: read once, to record the session's conversation.
//! let mut first = relay.attempt(&uri, &headers, on(&a), 0);
//! assert!(matches!(first.body_plan(), BodyPlan::Hold { .. }));
//! let body = Bytes::from_static(br#"{"input":"add a --json flag"}"#);
//! assert_eq!(first.request_body(&mut headers.clone(), body.clone()).await, body, "as sent");
//! assert_eq!(first.response_head(StatusCode::OK, &HeaderMap::new()).await, ResponsePlan::Forward);
//! first.response_chunk(completed);
//! first.end(false);
//! relay.background().idle().await;
//! // The response completed: its next turns on acct-a stream through, the body not read.
//! let next = relay.attempt(&uri, &headers, on(&a), 0);
//! assert!(matches!(next.body_plan(), BodyPlan::Stream { .. }));
//!
//! // The next turn was sent to acct-b: a switch, decided on the body.
//! let mut switch = relay.attempt(&uri, &headers, on(&b), 0);
//! let raw = Bytes::from_static(br#"{"input":[{"type":"reasoning","encrypted_content":"gAAA-of-acct-a"}]}"#);
//! let sent = switch.request_body(&mut headers, raw).await;
//! assert_eq!(sent, Bytes::from_static(br#"{"input":[]}"#), "acct-a's state removed");
//! assert!(switch.action().scrubbed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod action;
pub mod attempt;
mod background;
mod configs;
mod events;
mod extensions;
pub mod facts;
pub mod generation;
pub mod injection;
mod join;
pub mod metrics;
mod quota;
mod relay;
pub mod summary;
mod tenant;
pub mod turn;

pub use action::{RELAY_HEADER, RelayAction};
pub use attempt::{Attempt, BodyPlan, Looked, ResponsePlan};
pub use background::Background;
pub use configs::RelayConfigs;
pub use events::{RelayEvent, RelayEvents};
pub use extensions::{
    ComboName, QuotaSignal, RequestFacts, ResolvedAccount, ServingModel, SessionId, SkipRelay,
    StoredAffinity, SummaryCall, Tenant, relay_skips,
};
pub use facts::{Fact, Facts, FactsExt};
pub use generation::Capture;
pub use injection::Tee;
pub use quota::{HeaderQuota, QuotaSource};
pub use relay::{
    DEFAULT_MAX_CONCURRENT_GENERATIONS, DEFAULT_MAX_QUEUED_GENERATIONS, Relay, RelayBuilder,
};
pub use summary::{
    BoxError, MAX_ERROR_BODY_BYTES, MAX_SUMMARY_REPLY_BYTES, Summarizer, SummaryError,
    SummaryFuture, SummaryRequest,
};
pub use turn::Turn;
