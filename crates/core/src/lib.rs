//! The context-relay protocol as pure functions: no I/O, no async, no tower.
//!
//! Everything the relay decides and rewrites lives here, so that the tower layers, the gateway
//! and a pingora-style proxy (which has no tower adapter) can all call it, and so that it can be
//! tested exhaustively:
//!
//! - generation side: [`conversation`] (a read-only view over a request's conversation),
//!   [`select`] (what is summarised), [`prompt`] (the summary request), [`reply`] (the summary
//!   text out of a reply), [`parse`] (the structured handoff out of that text);
//! - injection side: [`render`] (the `<context_handoff>` message), [`inject`] (placing it in the
//!   raw JSON body), [`portable`] (removing account-bound state, all of it or only another
//!   account's), [`repair`] (whether a provider's rejection blames account-bound state);
//! - responses: [`ending`] (whether a response body ended with the API's success event);
//! - signals and identity: [`quota`], [`session`] (session id and tenant of a request),
//!   [`account`] (the one provider-account reference), [`decode`];
//! - raw JSON: [`json`] (the `context-relay-json` crate, re-exported), which [`inject`],
//!   [`portable`] and [`session`] read and edit bodies with;
//! - shared types: [`handoff`], [`config`], [`api`], [`time`].
//!
//! Functions that need a clock take `now` as an argument.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod account;
pub mod api;
pub mod boilerplate;
pub mod config;
pub mod conversation;
pub mod decode;
pub mod digits;
pub mod ending;
pub mod extractive;
pub mod handoff;
pub mod inject;
pub mod parse;
pub mod portable;
pub mod prompt;
pub mod quota;
pub mod reasoning;
pub mod render;
pub mod repair;
pub mod reply;
pub mod select;
pub mod session;
mod sse;
pub mod time;
pub mod touched;
pub mod translate;
pub mod unsupported;
pub mod usage;

/// The raw JSON scanner (the `context-relay-json` crate) that [`inject`], [`portable`] and
/// [`session`] read and edit request bodies with: spans instead of values, whole-body
/// validation, prefix reads and spliced edits.
#[doc(inline)]
pub use context_relay_json as json;

pub use account::ResolvedAccount;
pub use api::ApiShape;
pub use config::{RelayConfig, RelayMode, RelayOverrides};
pub use handoff::{Handoff, HandoffKey, HandoffKind, HandoffRecord, HandoffSlot};
pub use quota::QuotaSignal;
