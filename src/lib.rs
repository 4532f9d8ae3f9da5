//! context-relay: tower middleware that keeps long LLM coding sessions alive when a gateway
//! rotates between several accounts of the same provider.
//!
//! This facade re-exports the workspace crates:
//! - [`core`]: the protocol as pure functions (selection, prompts, parsing, rendering,
//!   injection, portability, quota and session derivation);
//! - [`store`]: where handoffs wait between accounts (redb, memory and redis backends), the
//!   in-flight registry and the unparseable cool-down;
//! - [`engine`]: the relay's orchestration, transport-agnostic (what a pingora proxy or any
//!   other adapter calls);
//! - [`tower`]: the extension types, the layers and [`ContextRelay`](tower::ContextRelay),
//!   which builds both.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub use context_relay_core as core;
pub use context_relay_engine as engine;
pub use context_relay_store as store;
pub use context_relay_tower as tower;
