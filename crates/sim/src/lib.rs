//! A simulated LLM provider on loopback — a **test double** for tests, benches and the
//! quickstart, never a production component.
//!
//! It serves OpenAI Chat Completions, the Responses API (and Codex's `/responses/compact`),
//! Anthropic Messages (JSON and SSE, with the event sequences Codex CLI, Claude Code and the
//! official SDKs need) and the Gemini API (`models/{model}:generateContent`,
//! `:streamGenerateContent?alt=sse`), with several accounts keyed by API key
//! (`Authorization: Bearer`, `x-api-key` or Gemini's `x-goog-api-key`):
//!
//! - each turn adds [`SimBuilder::quota_step`] percent to the account's usage, reported with
//!   Codex headers (`x-codex-primary-used-percent`, `-window-minutes`, `-reset-at`) or, with
//!   [`SimQuotaHeaders::Anthropic`], Anthropic unified headers;
//! - an account at 100 % answers 429 (Codex `usage_limit_reached` body, or Anthropic
//!   `rate_limit_error` on `/messages`);
//! - requests recognised as summary requests (a matcher over the body) get a canned reply (or
//!   one built from the request, [`SimBuilder::summary_reply_with`]) and do not count as turns;
//! - tool loops ([`SimBuilder::tool_loop`]): each plain user ask is answered by a configured
//!   number of tool calls before the text answer, on every API, and the pairing of calls and
//!   results is enforced with the real 400s;
//! - account-bound state is minted per account and verified like the real APIs do
//!   (Responses `reasoning` / `compaction` `encrypted_content`, `previous_response_id` of
//!   stored responses, Anthropic `thinking` signatures, and the thinking rules of the Messages
//!   API): another account's state is rejected with the real error bodies;
//!   [`SimProvider::state_owners`] tells who minted each piece of a recorded request;
//! - faults on demand ([`SimProvider::fail_next`]): an error status, an overloaded provider,
//!   a connection closed without a response, or a 200 stream that fails in-band;
//!   [`SimProvider::revoke`] makes an account's key answer 401; a used-up account's 429 is
//!   recorded as a rejection (`usage_limit_reached`, `rate_limit_error`,
//!   `RESOURCE_EXHAUSTED`);
//! - subscription logins ([`SimBuilder::login`]): the ChatGPT and Claude token endpoints with
//!   rotating single-use refresh tokens and expiring access tokens, the ChatGPT Codex backend
//!   route and Claude's OAuth checks, each as strict as the real one (see [`subscription`]);
//! - every request is recorded (headers and body bytes) for assertions;
//! - SSE streams can be held after their first output event until the test releases them
//!   ([`SimProvider::hold_streams`]), to prove that a proxy forwards events without buffering;
//! - the Messages endpoint can have a context window ([`SimBuilder::context_window`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use context_relay_sim::SimProvider;
//! let sim = SimProvider::builder().account("a", "key-a").quota_step(40.0).start().await.unwrap();
//! assert!(sim.base_url().ends_with("/v1"));
//! assert_eq!(sim.used("a"), Some(0.0));
//! sim.set_used("a", 99.0);
//! assert_eq!(sim.used("a"), Some(99.0));
//! sim.shutdown().await;
//! # }
//! ```
//!
//! The `context-relay-sim` binary serves one from the command line (`context-relay-sim --listen
//! 127.0.0.1:9000 --accounts a,b`), for harnesses that run the gateway as a process; with
//! `--summaries` it answers the relay's summary requests with a handoff note, as a model would.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::sync::watch;

mod bound;
mod builder;
mod calls;
mod compact;
mod control;
mod gemini;
mod gzip;
mod hold;
#[cfg(test)]
mod loop_tests;
mod message_params;
mod messages;
mod oauth;
mod pairing;
mod quota;
mod reply;
pub mod rules;
mod server;
pub mod subscription;
mod summary;
mod tool;
mod tool_loop;
mod window;

pub use bound::Minter;
pub use builder::SimBuilder;
pub use control::SimFault;
pub use hold::StreamHold;
pub use oauth::{CLAUDE_CLIENT_ID, CODEX_CLIENT_ID, SimLogin};
pub use quota::SimQuotaHeaders;
use quota::{exhausted, quota_headers};
use reply::{
    Reply, chat_events_in, chat_json, messages_events, messages_json, responses_events,
    responses_json, sse,
};
use server::Server;
pub use summary::SummaryRequest;

/// One request the simulated provider received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The method.
    pub method: Method,
    /// Path and query as received.
    pub uri: Uri,
    /// Every header as received.
    pub headers: HeaderMap,
    /// The body bytes as received.
    pub body: Bytes,
    /// The account id its credential named, if known.
    pub account: Option<String>,
    /// Whether it was recognised as a summary request.
    pub summary: bool,
    /// The error code it was rejected with (`invalid_encrypted_content`, `invalid_signature`,
    /// an injected fault's label, …), if it was.
    pub rejected: Option<String>,
    /// The usage the answer reported, when it was served a whole answer.
    pub usage: Option<SimUsage>,
}

/// The tokens an answer of the simulated provider reported, in its own terms: `input` counts
/// the cached tokens too, `output` the reasoning ones. Each API says it its own way (Anthropic's
/// `input_tokens` leaves the cache reads out, Gemini's candidates leave the thoughts out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimUsage {
    /// Every input token.
    pub input: u64,
    /// Of `input`, read from the prompt cache (a quarter of it, in this double).
    pub cached: u64,
    /// Every output token.
    pub output: u64,
    /// Of `output`, reasoning tokens (sent by the OpenAI APIs and by Gemini with thoughts).
    pub reasoning: u64,
}

/// The input tokens the simulated provider charges for a request body of `len` bytes.
pub(crate) fn input_tokens(len: usize) -> u64 {
    (len / 4) as u64
}

/// The cached share of `input` tokens (a quarter: the history a client resends is cached).
pub(crate) fn cached_tokens(input: u64) -> u64 {
    input / 4
}

impl RecordedRequest {
    /// The body parsed as JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

struct SimAccountState {
    id: String,
    key: String,
    used: f64,
    turns: u64,
}

struct SimState {
    accounts: Mutex<Vec<SimAccountState>>,
    logins: oauth::Logins,
    requests: Mutex<Vec<RecordedRequest>>,
    hold: Mutex<Option<watch::Receiver<bool>>>,
    /// Counts the requests received (what [`SimProvider::arrivals`] watches).
    arrivals: watch::Sender<usize>,
    counter: Mutex<u64>,
    minter: bound::Minter,
    stored: Mutex<bound::StoredResponses>,
    faults: Mutex<VecDeque<(Option<String>, SimFault)>>,
    revoked: Mutex<Vec<String>>,
    compacted: Mutex<summary::Compacted>,
    in_band: AtomicBool,
    config: SimBuilder,
}

/// A seed per sim instance, so that two sims never verify each other's state.
fn minting_seed() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    (NEXT.fetch_add(1, Ordering::Relaxed) << 32) ^ nanos ^ u64::from(std::process::id())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running simulated provider. See the [module docs](self).
pub struct SimProvider {
    state: Arc<SimState>,
    server: Server,
}

impl std::fmt::Debug for SimProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimProvider")
            .field("addr", &self.server.addr())
            .finish()
    }
}

impl SimProvider {
    /// A builder with no accounts.
    pub fn builder() -> SimBuilder {
        SimBuilder::default()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `http://{addr}/v1`, the value for a provider's `base_url`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.url())
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    /// A watch of the number of requests received so far (token requests apart): a test
    /// awaits a request with `wait_for` instead of polling.
    pub fn arrivals(&self) -> watch::Receiver<usize> {
        self.state.arrivals.subscribe()
    }

    /// The requests recorded since the last take or clear, which are forgotten (under one
    /// lock: none arriving meanwhile is lost).
    pub fn take_requests(&self) -> Vec<RecordedRequest> {
        std::mem::take(&mut *lock(&self.state.requests))
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        lock(&self.state.requests).clear();
    }

    /// Percent used of account `id`.
    pub fn used(&self, id: &str) -> Option<f64> {
        lock(&self.state.accounts)
            .iter()
            .find(|a| a.id == id)
            .map(|a| a.used)
    }

    /// Sets the percent used of account `id` (100 makes it answer 429).
    pub fn set_used(&self, id: &str, percent: f64) {
        if let Some(a) = lock(&self.state.accounts).iter_mut().find(|a| a.id == id) {
            a.used = percent;
        }
    }

    /// Turns served by account `id`.
    pub fn turns(&self, id: &str) -> Option<u64> {
        lock(&self.state.accounts)
            .iter()
            .find(|a| a.id == id)
            .map(|a| a.turns)
    }

    /// Stops the server (in-flight streams finish first).
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Responses,
    Messages,
}

async fn handle(state: Arc<SimState>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_owned();
    if parts.method == Method::POST && oauth::is_token_path(&path) {
        // Acted on at once; only the answer takes the issuer's delay.
        let answer = state.logins.token(&path, &body);
        if let Some(delay) = state.config.token_delay {
            tokio::time::sleep(delay).await;
        }
        return answer;
    }
    let anthropic = path.ends_with("/messages") || path.contains("/messages/");
    let credential = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| parts.headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::to_owned)
        .or_else(|| gemini::key(&parts));
    let account = credential.as_deref().and_then(|k| {
        lock(&state.accounts)
            .iter()
            .find(|a| a.key == k)
            .map(|a| a.id.clone())
            .or_else(|| state.logins.owner(k))
    });
    let summary = state.config.summary.as_ref().is_some_and(|(m, _)| m(&body));
    let recorded = {
        let mut requests = lock(&state.requests);
        requests.push(RecordedRequest {
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            headers: parts.headers.clone(),
            body: body.clone(),
            account: account.clone(),
            summary,
            rejected: None,
            usage: None,
        });
        requests.len() - 1
    };
    state.arrivals.send_replace(recorded + 1);

    if parts.method == Method::HEAD || (parts.method == Method::GET && path == "/") {
        return Response::new(Body::empty());
    }
    if gemini::route(&path).is_some() {
        return gemini::serve(&state, recorded, &parts, &body, account, summary);
    }
    let compact = path.ends_with("/responses/compact");
    let api = match path.as_str() {
        p if p.ends_with("/chat/completions") => Api::Chat,
        p if p.ends_with("/responses") || compact => Api::Responses,
        p if p.ends_with("/messages") => Api::Messages,
        _ => {
            return error(
                anthropic,
                StatusCode::NOT_FOUND,
                "not_found_error",
                "unknown path",
            );
        }
    };
    let login = match subscription::admit(&state, &parts.headers, &path, api, credential.as_deref())
    {
        Ok(login) => login.map(|(_, kind)| kind),
        Err(refusal) => {
            let (res, code) = *refusal;
            state.reject(recorded, code);
            return res;
        }
    };
    let Some(account) = account.filter(|a| !lock(&state.revoked).contains(a)) else {
        state.reject(recorded, "invalid_api_key");
        return control::unauthorized(api);
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return error(
                anthropic,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "body is not a JSON object",
            );
        }
    };
    if let Some(refusal) = subscription::check_body(login, &request) {
        let (res, code) = *refusal;
        state.reject(recorded, code);
        return res;
    }
    // Real providers refuse some parameters on some models: so does the double.
    let backend = if subscription::is_codex_backend(&path) && !compact {
        rules::Backend::ChatGptCodex
    } else {
        rules::Backend::Api
    };
    if let Some((status, body)) = rules::check(backend, &path, &request) {
        state.reject(recorded, "parameter_rule");
        let mut res = Response::new(Body::from(body));
        *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return res;
    }
    if let Some(res) = window::refusal(&state, recorded, &path, &body) {
        return res;
    }
    let model = request["model"].as_str().unwrap_or("unknown").to_owned();
    let stream = request["stream"].as_bool().unwrap_or(false);
    let cfg = &state.config;
    let now = unix_now();
    if let Some(res) = control::rejection(&state, recorded, api, &account, &request, summary) {
        return res;
    }

    let (used, turn) = {
        let mut accounts = lock(&state.accounts);
        let Some(a) = accounts.iter_mut().find(|a| a.id == account) else {
            return error(
                anthropic,
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "unknown account",
            );
        };
        if !summary {
            if a.used >= 100.0 {
                let used = a.used;
                drop(accounts);
                let code = match api {
                    Api::Messages => "rate_limit_error",
                    _ => "usage_limit_reached",
                };
                state.reject(recorded, code);
                return exhausted(cfg, api, used, now);
            }
            a.used = (a.used + cfg.quota_step).min(100.0);
            a.turns += 1;
        }
        (a.used, a.turns)
    };
    let id = {
        let mut c = lock(&state.counter);
        *c += 1;
        *c
    };
    if summary && let Some(delay) = state.config.summary_delay {
        tokio::time::sleep(delay).await;
    }
    let text = if summary {
        summary::reply(&state, &account, &body)
    } else {
        format!("Reply {turn} from account {account}.")
    };
    let input_tokens = input_tokens(body.len());
    let reply = Reply {
        id,
        model,
        text,
        input_tokens,
        cached_tokens: cached_tokens(input_tokens),
        output_tokens: 12,
        // The OpenAI APIs tell the reasoning tokens apart; Anthropic does not.
        reasoning_tokens: if api == Api::Messages { 0 } else { 5 },
        include_usage: request["stream_options"]["include_usage"]
            .as_bool()
            .unwrap_or(false),
        ..Reply::default()
    };
    if compact {
        return compact::reply(&state, &account, &request, id, used, now);
    }
    let reply = control::mint(&state, api, &account, &request, reply);
    state.note_usage(
        recorded,
        SimUsage {
            input: reply.input_tokens,
            cached: reply.cached_tokens,
            output: reply.output_tokens,
            reasoning: reply.reasoning_tokens,
        },
    );

    let mut res = if stream {
        let hold = lock(&state.hold).clone();
        let events = match api {
            Api::Chat => chat_events_in(&reply, cfg.chat_deltas),
            Api::Responses => responses_events(&reply),
            Api::Messages => messages_events(&reply),
        };
        sse(events, hold)
    } else {
        let v = match api {
            Api::Chat => chat_json(&reply),
            Api::Responses => responses_json(&reply),
            Api::Messages => messages_json(&reply),
        };
        let mut r = Response::new(Body::from(v.to_string()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    };
    quota_headers(cfg, res.headers_mut(), used, now);
    res.headers_mut()
        .insert("x-sim-account", header_value(&account));
    res.headers_mut()
        .insert("x-codex-turn-state", header_value(&format!("turn-{id}")));
    res
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// An error in the shape of the API `path` belongs to: Anthropic's
/// `{"type":"error","error":{"type","message"}}` or OpenAI's `{"error":{"message","type"}}`.
fn error(anthropic: bool, status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let body = if anthropic {
        serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
    } else {
        serde_json::json!({"error": {"message": message, "type": kind, "code": kind}})
    };
    control::json_response(status, &body)
}
