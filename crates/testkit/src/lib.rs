//! The shared test support of context-relay's tests, benches and examples (not published):
//!
//! - [`redis_server`] and [`redis_cluster`]: a throwaway redis-server (or `REDIS_URL`) and a
//!   throwaway Redis Cluster on loopback;
//! - [`clients`]: real-sized Codex and Claude Code requests rebuilt from the captures in
//!   `shared/fixtures/clients/`, how each client continues from a reply, and the reading of
//!   streamed replies; [`handoff`]: the handoff's tag and the summary the simulator answers;
//! - [`sessions`]: long, real-size sessions of three clients (core's tests and benches);
//! - [`hyper_request`]: requests shaped as hyper's HTTP/1 server hands them on (tower's bench);
//! - [`binary`]: the gateway binary as a child process; [`captured`]: a writer a test's log
//!   subscriber writes to;
//! - with the `gateway` feature, `harness`: gateways served over the strict simulated provider
//!   (the one gateway test setup: `Harness::serve` and the constructors built on it),
//!   `conversation`: Codex and Claude Code talking through it, `agents`: coding agents of the
//!   four API shapes in tool loops, `logins`: subscription logins with their credential
//!   files, and `fleet`: four providers over two simulators for gateway binaries (the soak's
//!   and the profile-guided build's training run's) and the POST their clients send.
//!
//! Without the `gateway` feature the kit depends on no crate of the workspace but the core, so
//! the store's, tower's and core's own tests use it too (a dev-dependency cycle cargo allows).

#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms)]

#[cfg(feature = "gateway")]
pub mod agents;
pub mod binary;
pub mod captured;
pub mod clients;
#[cfg(feature = "gateway")]
pub mod conversation;
#[cfg(feature = "gateway")]
pub mod fleet;
pub mod forward_store;
pub mod handoff;
#[cfg(feature = "gateway")]
pub mod harness;
pub mod hyper_request;
#[cfg(feature = "gateway")]
pub mod logins;
pub mod redis_cluster;
pub mod redis_server;
pub mod sessions;
pub mod waker;
