//! An OpenAI/Anthropic-compatible gateway that pools several accounts per provider and keeps
//! long coding sessions alive across account rotation.
//!
//! It is a thin crate made of a router ([`app`], [`admin`]), a combo service ([`combo`]), an
//! account resolver ([`resolver`] over [`pool`]), the upstream client ([`upstream`]), the
//! handoff store ([`store`]) and the relay layers of `context-relay-tower` ([`relay`]), in the
//! order of DESIGN §3:
//!
//! ```text
//! client ─▶ [router] ─▶ ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ Upstream
//! ```
//!
//! The simulated provider the tests and the quickstart run against is the `context-relay-sim`
//! crate (a test double, not shipped).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use context_relay_gateway::{app::Gateway, config::Config};
//! let config = Config::load("gateway.toml".as_ref())?;
//! let listen = config.listen;
//! let gateway = Gateway::new(config)?.spawn(listen).await?;
//! println!("listening on {}", gateway.url());
//! # Ok(()) }
//! ```
//!
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod admin;
pub mod app;
pub mod auth;
pub mod budget;
mod collect;
pub mod combo;
pub mod config;
pub mod error;
pub mod idle;
pub mod model;
pub mod peek;
pub mod pool;
pub mod ready;
pub mod relay;
pub mod resolver;
pub mod secret;
pub mod server;
pub mod store;
pub mod summary;
pub mod telemetry;
pub mod upstream;
pub mod verdict;

pub use app::{Gateway, GatewayError, ProxyService, StackOptions, proxy_stack};
pub use combo::{ComboLayer, ComboService, RouteTargets, Routes, Target};
pub use config::Config;
pub use relay::{RelayBackground, RelayLayers};
pub use resolver::{AccountResolver, AccountResolverLayer};
pub use server::RunningGateway;
pub use upstream::{Upstream, UpstreamEndpoint, UpstreamLimits};
