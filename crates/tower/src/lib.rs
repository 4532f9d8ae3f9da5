//! Tower layers of context-relay.
//!
//! - `GenerationLayer` sits after the combo/routing service: it reads quota signals on the way
//!   back and, when the serving account crosses the handoff threshold, summarises the session in
//!   the background into a handoff.
//! - `InjectionLayer` sits after the account resolver: when a request of a session is resolved
//!   to a different account, it makes the body portable and injects the handoff.
//!
//! The services talk to each other through the [`extensions`] types.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod extensions;

pub use extensions::{ComboName, QuotaSignal, ResolvedAccount, SessionId, SkipRelay, Tenant};
