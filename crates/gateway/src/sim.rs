//! A simulated LLM provider on loopback — a **test double** for tests, benches and the
//! quickstart, never a production component.
//!
//! It serves OpenAI Chat Completions, the Responses API and Anthropic Messages (JSON and SSE,
//! with the event sequences Codex CLI, Claude Code and the official SDKs need), with several
//! accounts keyed by API key (`Authorization: Bearer` or `x-api-key`):
//!
//! - each turn adds [`SimBuilder::quota_step`] percent to the account's usage, reported with
//!   Codex headers (`x-codex-primary-used-percent`, `-window-minutes`, `-reset-at`) or, with
//!   [`SimQuotaHeaders::Anthropic`], Anthropic unified headers;
//! - an account at 100 % answers 429 (Codex `usage_limit_reached` body, or Anthropic
//!   `rate_limit_error` on `/messages`);
//! - requests recognised as summary requests (a matcher over the body) get a canned reply and
//!   do not count as turns;
//! - every request is recorded (headers and body bytes) for assertions;
//! - SSE streams can be held after their first event until the test releases them
//!   ([`SimProvider::hold_streams`]), to prove that a proxy forwards events without buffering.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use context_relay_gateway::sim::SimProvider;
//! let sim = SimProvider::builder().account("a", "key-a").quota_step(40.0).start().await.unwrap();
//! assert!(sim.base_url().ends_with("/v1"));
//! assert_eq!(sim.used("a"), Some(0.0));
//! sim.set_used("a", 99.0);
//! assert_eq!(sim.used("a"), Some(99.0));
//! sim.shutdown().await;
//! # }
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::error::{ErrorShape, error_body};
use crate::server::RunningGateway;

/// Which quota headers the simulated provider sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SimQuotaHeaders {
    /// `x-codex-primary-*` (percent 0..100, window minutes, reset epoch seconds).
    #[default]
    Codex,
    /// `anthropic-ratelimit-unified-5h-*` (fraction 0..1, reset epoch seconds).
    Anthropic,
    /// None (only the 429 tells).
    None,
}

type Matcher = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Configures a [`SimProvider`].
#[derive(Clone)]
pub struct SimBuilder {
    accounts: Vec<(String, String, f64)>,
    quota_step: f64,
    window_minutes: u64,
    reset_secs: u64,
    quota_headers: SimQuotaHeaders,
    summary: Option<(Matcher, String)>,
    addr: SocketAddr,
}

impl std::fmt::Debug for SimBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBuilder")
            .field(
                "accounts",
                &self.accounts.iter().map(|a| &a.0).collect::<Vec<_>>(),
            )
            .field("quota_step", &self.quota_step)
            .finish_non_exhaustive()
    }
}

impl Default for SimBuilder {
    fn default() -> Self {
        Self {
            accounts: Vec::new(),
            quota_step: 10.0,
            window_minutes: 300,
            reset_secs: 3600,
            quota_headers: SimQuotaHeaders::Codex,
            summary: None,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}

impl SimBuilder {
    /// Adds an account `id` authenticated by `api_key`, starting at 0 % used.
    pub fn account(mut self, id: impl Into<String>, api_key: impl Into<String>) -> Self {
        self.accounts.push((id.into(), api_key.into(), 0.0));
        self
    }

    /// Percent of quota each turn uses (10 by default).
    pub fn quota_step(mut self, percent: f64) -> Self {
        self.quota_step = percent;
        self
    }

    /// Seconds until the announced quota reset (3600 by default).
    pub fn reset_secs(mut self, secs: u64) -> Self {
        self.reset_secs = secs;
        self
    }

    /// Which quota headers are sent.
    pub fn quota_headers(mut self, headers: SimQuotaHeaders) -> Self {
        self.quota_headers = headers;
        self
    }

    /// Requests whose body contains `needle` get `reply` as the assistant text and use no
    /// quota.
    pub fn summary_reply(self, needle: impl Into<String>, reply: impl Into<String>) -> Self {
        let needle = needle.into().into_bytes();
        self.summary_matcher(
            move |body| !needle.is_empty() && body.windows(needle.len()).any(|w| w == needle),
            reply,
        )
    }

    /// Requests for which `matcher(body)` is true get `reply` as the assistant text and use
    /// no quota.
    pub fn summary_matcher(
        mut self,
        matcher: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
        reply: impl Into<String>,
    ) -> Self {
        self.summary = Some((Arc::new(matcher), reply.into()));
        self
    }

    /// Starts serving on `127.0.0.1:0`.
    pub async fn start(self) -> std::io::Result<SimProvider> {
        let state = Arc::new(SimState {
            accounts: Mutex::new(
                self.accounts
                    .iter()
                    .map(|(id, key, used)| SimAccountState {
                        id: id.clone(),
                        key: key.clone(),
                        used: *used,
                        turns: 0,
                    })
                    .collect(),
            ),
            requests: Mutex::new(Vec::new()),
            hold: Mutex::new(None),
            counter: Mutex::new(0),
            config: self.clone(),
        });
        let s = state.clone();
        let router = Router::new().fallback(move |req: Request<Body>| {
            let state = s.clone();
            async move { handle(state, req).await }
        });
        let server = RunningGateway::start(self.addr, router).await?;
        Ok(SimProvider { state, server })
    }
}

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
    requests: Mutex<Vec<RecordedRequest>>,
    hold: Mutex<Option<watch::Receiver<bool>>>,
    counter: Mutex<u64>,
    config: SimBuilder,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running simulated provider. See the [module docs](self).
pub struct SimProvider {
    state: Arc<SimState>,
    server: RunningGateway,
}

impl std::fmt::Debug for SimProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimProvider")
            .field("addr", &self.server.addr())
            .finish()
    }
}

/// Holds SSE streams after their first event until released (or dropped).
#[derive(Debug)]
pub struct StreamHold {
    tx: watch::Sender<bool>,
}

impl StreamHold {
    /// Lets held streams continue.
    pub fn release(self) {
        // Drop does it.
    }
}

impl Drop for StreamHold {
    fn drop(&mut self) {
        let _ = self.tx.send(true);
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

    /// Holds every SSE stream started from now on after its first event, until the returned
    /// guard is released or dropped.
    pub fn hold_streams(&self) -> StreamHold {
        let (tx, rx) = watch::channel(false);
        *lock(&self.state.hold) = Some(rx);
        StreamHold { tx }
    }

    /// Stops the server (in-flight streams finish first).
    pub async fn shutdown(self) {
        let _ = self.server.shutdown().await;
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
    let shape = ErrorShape::for_path(&path);
    let credential = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| parts.headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::to_owned);
    let account = credential.as_deref().and_then(|k| {
        lock(&state.accounts)
            .iter()
            .find(|a| a.key == k)
            .map(|a| a.id.clone())
    });
    let summary = state.config.summary.as_ref().is_some_and(|(m, _)| m(&body));
    lock(&state.requests).push(RecordedRequest {
        method: parts.method.clone(),
        uri: parts.uri.clone(),
        headers: parts.headers.clone(),
        body: body.clone(),
        account: account.clone(),
        summary,
    });

    if parts.method == Method::HEAD || (parts.method == Method::GET && path == "/") {
        return Response::new(Body::empty());
    }
    let api = match path.as_str() {
        p if p.ends_with("/chat/completions") => Api::Chat,
        p if p.ends_with("/responses") => Api::Responses,
        p if p.ends_with("/messages") => Api::Messages,
        _ => {
            return error(
                shape,
                StatusCode::NOT_FOUND,
                "not_found_error",
                "unknown path",
            );
        }
    };
    let Some(account) = account else {
        return error(
            shape,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid API key",
        );
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return error(
                shape,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "body is not a JSON object",
            );
        }
    };
    // Real providers refuse some parameters on some models: so does the double.
    if let Some((status, body)) =
        crate::sim_rules::check(crate::sim_rules::Backend::Api, &path, &request)
    {
        let mut res = Response::new(Body::from(body));
        *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return res;
    }
    let model = request["model"].as_str().unwrap_or("unknown").to_owned();
    let stream = request["stream"].as_bool().unwrap_or(false);
    let cfg = &state.config;
    let now = unix_now();

    let (used, turn) = {
        let mut accounts = lock(&state.accounts);
        let Some(a) = accounts.iter_mut().find(|a| a.id == account) else {
            return error(
                shape,
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "unknown account",
            );
        };
        if !summary {
            if a.used >= 100.0 {
                let used = a.used;
                drop(accounts);
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
    let text = match (&cfg.summary, summary) {
        (Some((_, reply)), true) => reply.clone(),
        _ => format!("Reply {turn} from account {account}."),
    };
    let input_tokens = (body.len() / 4) as u64;
    let reply = Reply {
        id,
        model,
        text,
        input_tokens,
        output_tokens: 12,
        include_usage: request["stream_options"]["include_usage"]
            .as_bool()
            .unwrap_or(false),
    };

    let mut res = if stream {
        let hold = lock(&state.hold).clone();
        let events = match api {
            Api::Chat => chat_events(&reply),
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

fn quota_headers(cfg: &SimBuilder, h: &mut HeaderMap, used: f64, now: u64) {
    let reset = (now + cfg.reset_secs).to_string();
    match cfg.quota_headers {
        SimQuotaHeaders::Codex => {
            h.insert(
                "x-codex-primary-used-percent",
                header_value(&format!("{used:.1}")),
            );
            h.insert(
                "x-codex-primary-window-minutes",
                header_value(&cfg.window_minutes.to_string()),
            );
            h.insert("x-codex-primary-reset-at", header_value(&reset));
        }
        SimQuotaHeaders::Anthropic => {
            h.insert(
                "anthropic-ratelimit-unified-5h-utilization",
                header_value(&format!("{:.3}", used / 100.0)),
            );
            h.insert("anthropic-ratelimit-unified-5h-reset", header_value(&reset));
        }
        SimQuotaHeaders::None => {}
    }
}

fn exhausted(cfg: &SimBuilder, api: Api, used: f64, now: u64) -> Response<Body> {
    let body = if api == Api::Messages {
        json!({"type": "error", "error": {"type": "rate_limit_error",
            "message": "This account's rate limit has been reached."}})
    } else {
        json!({"error": {"type": "usage_limit_reached",
            "message": "The usage limit has been reached",
            "resets_in_seconds": cfg.reset_secs}})
    };
    let mut res = Response::new(Body::from(body.to_string()));
    *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    quota_headers(cfg, res.headers_mut(), used, now);
    res
}

fn error(shape: ErrorShape, status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let mut res = Response::new(Body::from(error_body(shape, kind, message)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

struct Reply {
    id: u64,
    model: String,
    text: String,
    input_tokens: u64,
    output_tokens: u64,
    include_usage: bool,
}

impl Reply {
    /// The text in two deltas, so that streams carry more than one.
    fn halves(&self) -> (&str, &str) {
        let mid = self.text.char_indices().nth(self.text.chars().count() / 2);
        self.text.split_at(mid.map_or(self.text.len(), |(i, _)| i))
    }
}

fn chat_json(r: &Reply) -> Value {
    json!({
        "id": format!("chatcmpl-sim-{}", r.id), "object": "chat.completion", "created": unix_now(),
        "model": r.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": r.text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": r.input_tokens, "completion_tokens": r.output_tokens,
                  "total_tokens": r.input_tokens + r.output_tokens}
    })
}

fn chat_events(r: &Reply) -> Vec<Bytes> {
    let id = format!("chatcmpl-sim-{}", r.id);
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": unix_now(), "model": r.model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let (a, b) = r.halves();
    let mut out = vec![
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": a}), Value::Null),
        chunk(json!({"content": b}), Value::Null),
        chunk(json!({}), json!("stop")),
    ];
    if r.include_usage {
        out.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": unix_now(),
            "model": r.model, "choices": [],
            "usage": {"prompt_tokens": r.input_tokens, "completion_tokens": r.output_tokens,
                      "total_tokens": r.input_tokens + r.output_tokens}}),
        );
    }
    let mut events: Vec<Bytes> = out
        .into_iter()
        .map(|v| Bytes::from(format!("data: {v}\n\n")))
        .collect();
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

fn responses_message(r: &Reply, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": format!("msg_sim_{}", r.id), "status": status,
           "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn responses_json(r: &Reply) -> Value {
    json!({
        "id": format!("resp_sim_{}", r.id), "object": "response", "created_at": unix_now(),
        "status": "completed", "model": r.model,
        "output": [responses_message(r, &r.text, "completed")],
        "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                  "total_tokens": r.input_tokens + r.output_tokens}
    })
}

fn responses_events(r: &Reply) -> Vec<Bytes> {
    let resp_id = format!("resp_sim_{}", r.id);
    let item_id = format!("msg_sim_{}", r.id);
    let base = |status: &str, output: Value, usage: Value| {
        json!({"id": resp_id, "object": "response", "created_at": unix_now(), "status": status,
               "model": r.model, "output": output, "usage": usage})
    };
    let (a, b) = r.halves();
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
    let events = vec![
        json!({"type": "response.created", "response": base("in_progress", json!([]), Value::Null)}),
        json!({"type": "response.in_progress", "response": base("in_progress", json!([]), Value::Null)}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": responses_message(r, "", "in_progress")}),
        json!({"type": "response.content_part.added", "item_id": item_id, "output_index": 0,
               "content_index": 0, "part": part("")}),
        json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0,
               "content_index": 0, "delta": a}),
        json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0,
               "content_index": 0, "delta": b}),
        json!({"type": "response.output_text.done", "item_id": item_id, "output_index": 0,
               "content_index": 0, "text": r.text}),
        json!({"type": "response.content_part.done", "item_id": item_id, "output_index": 0,
               "content_index": 0, "part": part(&r.text)}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": responses_message(r, &r.text, "completed")}),
        json!({"type": "response.completed", "response": base(
            "completed",
            json!([responses_message(r, &r.text, "completed")]),
            json!({"input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                   "total_tokens": r.input_tokens + r.output_tokens}),
        )}),
    ];
    events
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            v["sequence_number"] = json!(i);
            let kind = v["type"].as_str().unwrap_or("message").to_owned();
            Bytes::from(format!("event: {kind}\ndata: {v}\n\n"))
        })
        .collect()
}

fn messages_json(r: &Reply) -> Value {
    json!({
        "id": format!("msg_sim_{}", r.id), "type": "message", "role": "assistant",
        "model": r.model, "content": [{"type": "text", "text": r.text}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens}
    })
}

fn messages_events(r: &Reply) -> Vec<Bytes> {
    let (a, b) = r.halves();
    let delta = |t: &str| {
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": t}})
    };
    let events = vec![
        json!({"type": "message_start", "message": {
            "id": format!("msg_sim_{}", r.id), "type": "message", "role": "assistant",
            "model": r.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": r.input_tokens, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        delta(a),
        delta(b),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": r.output_tokens}}),
        json!({"type": "message_stop"}),
    ];
    events
        .into_iter()
        .map(|v| {
            let kind = v["type"].as_str().unwrap_or("message").to_owned();
            Bytes::from(format!("event: {kind}\ndata: {v}\n\n"))
        })
        .collect()
}

/// An SSE response sending `events` one frame each; with a hold, only the first event goes out
/// before the hold is released.
fn sse(events: Vec<Bytes>, hold: Option<watch::Receiver<bool>>) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let mut hold = hold;
        for (i, e) in events.into_iter().enumerate() {
            if i == 1
                && let Some(h) = hold.as_mut()
            {
                // A dropped hold counts as released.
                let _ = h.wait_for(|released| *released).await;
            }
            if tx.send(e).await.is_err() {
                return;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut res = Response::new(Body::new(StreamBody::new(stream.boxed())));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> Reply {
        Reply {
            id: 1,
            model: "m".into(),
            text: "héllo world".into(),
            input_tokens: 3,
            output_tokens: 2,
            include_usage: true,
        }
    }

    fn parse(events: &[Bytes]) -> Vec<(Option<String>, Value)> {
        events
            .iter()
            .filter_map(|e| {
                let s = std::str::from_utf8(e).unwrap();
                let event = s
                    .lines()
                    .find_map(|l| l.strip_prefix("event: "))
                    .map(str::to_owned);
                let data = s.lines().find_map(|l| l.strip_prefix("data: "))?;
                serde_json::from_str(data).ok().map(|v| (event, v))
            })
            .collect()
    }

    #[test]
    fn responses_stream_has_the_sequence_sdks_need() {
        let ev = parse(&responses_events(&reply()));
        let types: Vec<&str> = ev
            .iter()
            .map(|(_, v)| v["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types[..4],
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added"
            ]
        );
        assert_eq!(types.last(), Some(&"response.completed"));
        let done = &ev.last().unwrap().1["response"];
        assert!(done["id"].is_string());
        assert_eq!(done["usage"]["total_tokens"], 5);
        let text: String = ev
            .iter()
            .filter(|(_, v)| v["type"] == "response.output_text.delta")
            .map(|(_, v)| v["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "héllo world");
        assert!(ev.iter().all(|(e, v)| e.as_deref() == v["type"].as_str()));
    }

    #[test]
    fn messages_stream_has_event_lines() {
        let ev = parse(&messages_events(&reply()));
        assert_eq!(ev[0].0.as_deref(), Some("message_start"));
        assert_eq!(ev[1].0.as_deref(), Some("content_block_start"));
        assert!(ev.iter().any(|(_, v)| v["usage"]["output_tokens"] == 2));
    }

    #[test]
    fn chat_stream_ends_with_done_and_usage() {
        let ev = chat_events(&reply());
        assert_eq!(&ev.last().unwrap()[..], b"data: [DONE]\n\n");
        let parsed = parse(&ev);
        assert_eq!(parsed.last().unwrap().1["usage"]["total_tokens"], 5);
    }
}
