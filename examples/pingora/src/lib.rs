//! A [pingora](https://github.com/cloudflare/pingora) reverse proxy in front of two accounts
//! of one LLM provider, keeping coding sessions alive when it moves them from one account to
//! the other, with the transport-agnostic context-relay engine.
//!
//! - [`pool`]: the accounts; a session stays on its account until that account is used up
//!   (a 429, or a quota signal at 95 %), then moves to the next one.
//! - [`phases`]: the relay in pingora's phases, one call per `ProxyHttp` phase: the piece any
//!   pingora proxy plugs in. The relay writes a handoff (a structured summary of the session)
//!   when the serving account crosses the threshold, and on the request that lands on the
//!   other account it removes what only the first account can read and injects the handoff.
//!   The request body is held in `request_body_filter` and emitted rewritten at its end
//!   ([`held`]).
//! - [`proxy`]: the `ProxyHttp`: routing over the pool, the relay through [`phases`].
//! - [`summarizer`]: the summary call, with pingora's HTTP client, to the session's account.
//! - [`server`]: running it as a process or on a thread (tests).
//!
//! A 429 is passed to the client (pingora cannot replay a streamed request body once the
//! response status is known); the client's retry lands on the other account.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod held;
pub mod phases;
pub mod pool;
pub mod proxy;
pub mod server;
pub mod summarizer;

pub use phases::RelayPhases;
pub use pool::{Account, Pool};
pub use proxy::RelayProxy;
pub use server::{RunningProxy, serve, spawn};
pub use summarizer::PoolSummarizer;
