//! Tower layers of context-relay: keep long LLM coding sessions alive when a gateway rotates
//! between several accounts of the same provider.
//!
//! - [`GenerationLayer`] sits after the combo/routing service: it reads quota signals on the
//!   way back and, when the serving account crosses the handoff threshold, summarises the
//!   session in the background into a handoff ([`generation`]).
//! - [`InjectionLayer`] sits after the account resolver: when a request of a session is
//!   resolved to a different account, it makes the body portable and injects the handoff
//!   ([`injection`]).
//!
//! ```text
//! client ─▶ ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ upstream
//!           sets ComboName                      sets ResolvedAccount
//! ```
//!
//! The services talk through the [`extensions`] types; both layers share one
//! [`HandoffStore`](context_relay_store::HandoffStore). Neither layer ever fails or delays a
//! request because of the relay: failures are logged with `tracing` and counted with the
//! `metrics` facade (names in [`metrics`]), and the request passes through unchanged.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod background;
mod builder;
mod configs;
pub mod extensions;
pub mod generation;
mod identity;
pub mod injection;
pub mod metrics;
mod quota_source;
mod summarizer;

pub use background::Background;
pub use builder::ServiceBuilderExt;
pub use configs::RelayConfigs;
pub use extensions::{ComboName, QuotaSignal, ResolvedAccount, SessionId, SkipRelay, Tenant};
pub use generation::{Generation, GenerationLayer};
pub use injection::{Injection, InjectionLayer, RELAY_HEADER, RelayAction};
pub use quota_source::{HeaderQuota, QuotaSource};
pub use summarizer::{
    BoxError, MAX_ERROR_BODY_BYTES, MAX_SUMMARY_REPLY_BYTES, Summarizer, SummaryError,
    SummaryFuture, SummaryRequest,
};
