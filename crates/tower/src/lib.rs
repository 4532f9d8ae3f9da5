//! Tower layers of context-relay: keep long LLM coding sessions alive when a gateway rotates
//! between several accounts of the same provider.
//!
//! - [`GenerationLayer`] sits after the combo/routing service: it reads quota signals on the
//!   way back and, when the serving account crosses the handoff threshold, summarises the
//!   session in the background into a handoff ([`generation`]).
//! - [`InjectionLayer`] sits after the account resolver: when a request of a session is
//!   resolved to a different account, it makes the body portable and injects the handoff
//!   ([`injection`]). It puts the request's [`ResolvedAccount`] on every response.
//!
//! ```text
//! client ─▶ ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ upstream
//!           sets ComboName                      sets ResolvedAccount
//! ```
//!
//! [`ContextRelay`] builds both over one configuration, one store and one [`Background`]
//! tracker. The services talk through the [`extensions`] types. Neither layer ever fails or
//! delays a request because of the relay: failures are logged with `tracing` and counted with
//! the `metrics` facade (names in [`metrics`]), and the request passes through unchanged. The
//! decisions themselves live in [`context_relay_engine`], which other transports (a pingora
//! proxy) use directly.
//!
//! **Types.** The layers take any `Request<B>` with `B: http_body::Body<Data = Bytes>` (axum's
//! and hyper's bodies are). The service below them receives `Request<RequestBody<B>>`
//! ([`RequestBody`] is a `Body<Data = Bytes>` with `B`'s error type: hyper-util's `Client`
//! accepts it, and `axum::body::Body::new` wraps it). Responses keep the inner body's data and
//! error types in a [`ResponseBody`], so a stack over an upstream answering
//! `Response<axum::body::Body>` (or hyper's `Incoming`) is an axum service as it is.
//!
//! # Example
//!
//! A session served by `acct-a` crosses the threshold: its handoff is written in the
//! background. Its next request is resolved to `acct-b`: the handoff is injected.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::{Arc, Mutex};
//! use bytes::Bytes;
//! use context_relay_store::MemoryStore;
//! use context_relay_tower::{ComboName, ContextRelay, RELAY_HEADER, RequestBody, ResolvedAccount};
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! // The provider: 88 % of the account used; a summary request gets a handoff back.
//! let seen = Arc::new(Mutex::new(Vec::<Bytes>::new()));
//! let log = seen.clone();
//! let upstream = service_fn(move |req: Request<RequestBody<RequestBody<Full<Bytes>>>>| {
//!     let log = log.clone();
//!     async move {
//!         let body = req.into_body().collect().await?.to_bytes();
//!         let reply = if body.windows(12).any(|w| w == b"keyDecisions") {
//!             r#"{"choices":[{"message":{"content":"{\"summary\":\"Adding a --json flag\"}"}}]}"#
//!         } else {
//!             r#"{"choices":[{"message":{"role":"assistant","content":"ok"}}]}"#
//!         };
//!         log.lock().unwrap().push(body);
//!         let mut res = Response::new(Full::new(Bytes::from(reply)));
//!         res.headers_mut().insert("x-codex-primary-used-percent", "88".parse().unwrap());
//!         Ok::<_, std::convert::Infallible>(res)
//!     }
//! });
//!
//! let relay = ContextRelay::builder(Arc::new(MemoryStore::new())).build();
//! let svc = ServiceBuilder::new()
//!     // The combo service.
//!     .map_request(|mut req: Request<Full<Bytes>>| {
//!         req.extensions_mut().insert(ComboName::new("coding"));
//!         req
//!     })
//!     .layer(relay.generation_layer())
//!     // The account resolver: here, the account a test header names (acct-a by default).
//!     .map_request(|mut req: Request<RequestBody<Full<Bytes>>>| {
//!         let account = match req.headers().get("x-test-account") {
//!             Some(v) => v.to_str().unwrap_or("acct-a").to_owned(),
//!             None => "acct-a".to_owned(),
//!         };
//!         req.extensions_mut().insert(ResolvedAccount::new("openai", account));
//!         req
//!     })
//!     .layer(relay.injection_layer())
//!     .service(upstream);
//!
//! let turn = |account: &str| {
//!     Request::post("/v1/chat/completions")
//!         .header("x-session-id", "s1")
//!         .header("x-test-account", account)
//!         .body(Full::new(Bytes::from(
//!             r#"{"model":"gpt-5","messages":[{"role":"user","content":"add --json"}]}"#,
//!         )))
//!         .unwrap()
//! };
//! let res = svc.clone().oneshot(turn("acct-a")).await?;
//! assert_eq!(res.extensions().get::<ResolvedAccount>(), Some(&ResolvedAccount::new("openai", "acct-a")));
//! res.into_body().collect().await?; // the turn ends: the summary starts
//! relay.background().idle().await;
//!
//! let res = svc.oneshot(turn("acct-b")).await?;
//! assert_eq!(res.headers()[RELAY_HEADER], "injected");
//! let sent = seen.lock().unwrap().last().cloned().unwrap();
//! let sent = String::from_utf8_lossy(&sent);
//! assert!(sent.contains("<context_handoff>") && sent.contains("Adding a --json flag"));
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! # }).unwrap();
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod builder;
pub mod extensions;
pub mod generation;
pub mod injection;
mod relay;
mod request_body;
mod response_body;
mod summarizer;

pub use builder::ServiceBuilderExt;
pub use context_relay_engine::metrics;
pub use context_relay_engine::{
    Background, BoxError, HeaderQuota, MAX_ERROR_BODY_BYTES, MAX_SUMMARY_REPLY_BYTES, QuotaSource,
    RelayConfigs, RelayEvent, RelayEvents, Summarizer, SummaryError, SummaryFuture, SummaryRequest,
};
pub use extensions::{
    ComboName, Fact, Facts, FactsExt, QuotaSignal, ResolvedAccount, ServingModel, SessionId,
    SkipRelay, StoredAffinity, SummaryCall, Tenant,
};
pub use generation::{Generation, GenerationLayer};
pub use injection::{Injection, InjectionLayer, RELAY_HEADER, RelayAction};
pub use relay::{ContextRelay, ContextRelayBuilder};
pub use request_body::RequestBody;
pub use response_body::ResponseBody;
