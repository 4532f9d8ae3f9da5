//! An OpenAI/Anthropic-compatible gateway that pools several accounts per provider and keeps
//! long coding sessions alive across account rotation.
//!
//! Inside, a router hands each API request to a combo service (client authentication, body
//! buffering, combo and model routing, session identity), then to the relay's generation layer,
//! an account resolver that picks an account of the provider's pool and retries on the next one
//! when an account is used up, the relay's injection layer, and the upstream client. The
//! generation layer sits above the resolver so that it sees which account served and the quota
//! it reported; the injection layer sits below it so that every attempt, retries included,
//! carries the account it is sent to:
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
//! use context_relay_gateway::{Gateway, config::Config};
//! let config = Config::load("gateway.toml".as_ref())?;
//! let listen = config.listen;
//! let gateway = Gateway::new(config)?.spawn(listen).await?;
//! println!("listening on {}", gateway.url());
//! # Ok(()) }
//! ```
//!
//! The embedding API is [`Gateway`] (built from a [`config::Config`]), what it returns
//! ([`RunningGateway`], [`GatewayError`], [`HttpService`] and its [`ResponseBody`],
//! [`Background`]) and
//! [`prometheus_builder`] for its `/metrics` page.
//!
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod access_log;
mod admin;
mod app;
mod auth;
mod budget;
mod catch_panic;
mod chunks;
mod client_body;
mod client_io;
mod collect;
mod combo;
pub mod config;
mod connection;
mod connector;
mod console;
mod content_length;
mod credential;
mod deadline;
mod decoding;
mod error;
mod gemini;
pub mod http_service;
mod idle;
mod in_flight;
mod linger;
mod live;
mod log_buffer;
mod log_fields;
mod login;
mod metric_help;
mod model;
mod peek;
mod pool;
mod ready;
mod relay;
mod reload;
mod resolver;
mod routes;
mod routing;
mod secret;
mod server;
mod shared_service;
mod slab;
mod store;
mod stream_executor;
mod summary;
mod telemetry;
mod tenant_keys;
mod timer;
mod translate;
mod upstream;
mod usage;

pub use access_log::write_access_lines_to;
pub use app::{Gateway, GatewayError};
pub use config::Config;
pub use context_relay_tower::Background;
pub use http_service::HttpService;
pub use in_flight::{InFlightBody, ResponseBody};
pub use log_buffer::{LineWriter, LogBuffer};
pub use log_fields::PlainFields;
pub use metric_help::describe_metrics;
pub use ready::{NotReady, Readiness, Ready};
pub use server::{BACKGROUND_GRACE, LISTEN_BACKLOG, LOGIN_GRACE, RunningGateway, listen};
pub use shared_service::SharedService;
pub use store::{StoreOpenError, check_store};
pub use telemetry::prometheus_builder;
pub use upstream::UpstreamError;
