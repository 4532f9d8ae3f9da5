//! A provider double that binds state to the account that minted it, as the real ones do:
//! Responses reasoning items (`encrypted_content`), stored response ids, Codex turn state and
//! Anthropic thinking signatures are minted per account (keyed blobs of real size, minted as
//! the gateway's simulated provider mints them), and any the serving account did not mint —
//! another account's, a mangled or truncated one, an unknown id — is rejected with the
//! provider's real error body.
#![allow(dead_code, unreachable_pub)]

pub mod clients;

/// The simulated provider's minting of account-bound blobs, shared.
use context_relay_sim::Minter;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use context_relay_tower::ResolvedAccount;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

pub type Body = BoxBody<Bytes, Infallible>;

pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into()).boxed()
}

pub const ENCRYPTED_REJECTED: &str = r#"{"error":{"message":"The encrypted content gAAA...DQ== could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}"#;
pub const PREVIOUS_REJECTED: &str = r#"{"error":{"message":"Previous response with id 'resp_x' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}"#;
pub const SIGNATURE_REJECTED: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `signature` in `thinking` block"},"request_id":"req_011CUdL49e3Fu9bCKbWF6cXD"}"#;
pub const UNRELATED_400: &str = r#"{"error":{"message":"Unsupported parameter: 'temperature' is not supported with this model.","type":"invalid_request_error","param":"temperature","code":"unsupported_parameter"}}"#;

/// Size of a minted blob: real `encrypted_content` and signatures are kilobytes.
pub const BLOB_BYTES: usize = 2048;

fn minter() -> Minter {
    Minter::new(0x5eed, BLOB_BYTES)
}

/// The `encrypted_content` the double mints for `account` in its `n`th answer.
pub fn enc(account: &str, n: usize) -> String {
    minter().encrypted(account, &n.to_string())
}

/// The thinking `signature` the double mints for `account` in its `n`th answer.
pub fn sig(account: &str, n: usize) -> String {
    minter().signature(account, &n.to_string())
}

/// The Codex turn state the double mints for `account` in its `n`th answer.
fn turn_state(account: &str, n: usize) -> String {
    minter().encrypted(account, &format!("ts{n}"))
}

/// Whether `account` minted `blob`, whole and unaltered: its keyed digest verifies, and the
/// blob is byte for byte what the account minted (so a truncated or padded one fails too).
fn minted_by(account: &str, blob: &str) -> bool {
    let m = minter();
    if m.owner(&[account.to_owned()], blob).is_none() {
        return false;
    }
    let nonce = blob
        .get(7..)
        .and_then(|rest| rest.split('.').next())
        .unwrap_or("");
    let short = blob
        .get(4..)
        .and_then(|rest| rest.split('.').next())
        .unwrap_or("");
    m.encrypted(account, nonce) == blob || m.signature(account, short) == blob
}

/// Every blob of account-bound state in a request: `encrypted_content`, `signature` and
/// `data` wherever they sit, and the turn-state header.
fn blobs<'a>(body: &'a Value, headers: &'a http::HeaderMap) -> Vec<&'a str> {
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v.as_str()) {
                        ("encrypted_content" | "signature" | "data", Some(s)) => out.push(s),
                        _ => walk(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, &mut out);
    out.extend(
        headers
            .get("x-codex-turn-state")
            .and_then(|v| v.to_str().ok()),
    );
    out
}

/// How the double answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Foreign state: the provider's 400.
    #[default]
    Reject,
    /// Foreign state in a Responses stream: 200, then `response.failed` before any output.
    FailInBand,
}

/// One request the double received.
#[derive(Debug, Clone)]
pub struct Received {
    pub account: String,
    pub headers: http::HeaderMap,
    pub body: Value,
    pub text: String,
    pub status: StatusCode,
    /// The account that stored the `previous_response_id` the request names, if any.
    pub previous_of: Option<String>,
}

impl Received {
    /// How many pieces of state minted by `account` the request carries.
    pub fn state_of(&self, account: &str) -> usize {
        blobs(&self.body, &self.headers)
            .into_iter()
            .filter(|b| minted_by(account, b))
            .count()
            + usize::from(self.previous_of.as_deref() == Some(account))
    }

    /// Whether the request carries a token minted by `account`.
    pub fn carries_state_of(&self, account: &str) -> bool {
        self.state_of(account) > 0
    }

    pub fn handoffs(&self) -> usize {
        self.text.matches("<context_handoff>").count()
    }
}

#[derive(Default)]
pub struct State {
    pub mode: Mode,
    /// Answer the next request with this status and body, whatever it holds.
    pub next_error: Option<(StatusCode, &'static str)>,
    /// Hold the next in-band failure's stream open after its events until this resolves or
    /// is dropped (a provider slow to close a failed stream).
    pub hold: Option<tokio::sync::oneshot::Receiver<()>>,
    pub minted: usize,
    /// Response ids stored by the answers: id → account.
    pub stored: HashMap<String, String>,
    pub received: Vec<Received>,
}

#[derive(Clone, Default)]
pub struct Provider {
    pub state: Arc<Mutex<State>>,
}

impl Provider {
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap())
    }

    pub async fn answer<B>(self, req: Request<B>) -> Result<Response<Body>, Infallible>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: std::fmt::Debug,
    {
        let account = req
            .extensions()
            .get::<ResolvedAccount>()
            .map(|a| a.account().to_string())
            .unwrap_or_default();
        let path = req.uri().path().to_owned();
        let headers = req.headers().clone();
        let bytes = req.into_body().collect().await.expect("body").to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body: Value = serde_json::from_slice(&bytes).expect("the provider gets JSON");
        let mut state = self.state.lock().unwrap();
        let anthropic = path.ends_with("/messages");
        let verdict = if let Some((status, body)) = state.next_error.take() {
            Err((status, body))
        } else {
            check(&body, &headers, &account, anthropic, &state.stored)
        };
        let previous_of = body
            .get("previous_response_id")
            .and_then(Value::as_str)
            .and_then(|id| state.stored.get(id).cloned());
        let status = verdict.as_ref().err().map_or(StatusCode::OK, |e| e.0);
        let mode = state.mode;
        state.received.push(Received {
            account: account.clone(),
            headers,
            body: body.clone(),
            text,
            status,
            previous_of,
        });
        let response = match verdict {
            Err((status, error))
                if mode == Mode::FailInBand && !anthropic && status == StatusCode::BAD_REQUEST =>
            {
                let error: Value = serde_json::from_str(error).unwrap();
                let failed = stream(&[
                    json!({"type":"response.created","response":{"id":"resp_f","status":"in_progress"}}),
                    json!({"type":"response.in_progress","response":{"id":"resp_f"}}),
                    json!({"type":"response.failed","response":{"id":"resp_f","status":"failed","error":error["error"]}}),
                ]);
                match state.hold.take() {
                    Some(held) => failed.map(|events| held_open(events, held)),
                    None => failed,
                }
            }
            Err((status, error)) => {
                let mut r = Response::new(full(error));
                *r.status_mut() = status;
                r
            }
            Ok(()) => {
                state.minted += 1;
                let n = state.minted;
                if anthropic {
                    json_reply(json!({
                        "id": format!("msg_{n}"), "type": "message", "role": "assistant",
                        "content": [
                            {"type": "thinking", "thinking": format!("thought {n}"), "signature": sig(&account, n)},
                            {"type": "text", "text": format!("answer {n}")}
                        ],
                        "stop_reason": "end_turn"
                    }))
                } else {
                    let reasoning = json!({"type":"reasoning","id":format!("rs_{account}_{n}"),"summary":[],"encrypted_content":enc(&account, n)});
                    let id = format!("resp_{n:04}");
                    if body.get("store") != Some(&Value::Bool(false)) {
                        state.stored.insert(id.clone(), account.clone());
                    }
                    let message = json!({"type":"message","role":"assistant","content":[{"type":"output_text","text":format!("answer {n}")}]});
                    let mut r = stream(&[
                        json!({"type":"response.created","response":{"id":id,"status":"in_progress"}}),
                        json!({"type":"response.in_progress","response":{"id":id}}),
                        json!({"type":"response.output_item.done","output_index":0,"item":reasoning}),
                        json!({"type":"response.output_item.done","output_index":1,"item":message}),
                        json!({"type":"response.completed","response":{"id":id,"status":"completed","output":[reasoning, message]}}),
                    ]);
                    r.headers_mut().insert(
                        "x-codex-turn-state",
                        turn_state(&account, n).parse().unwrap(),
                    );
                    r
                }
            }
        };
        Ok(response)
    }
}

fn json_reply(v: Value) -> Response<Body> {
    let mut r = Response::new(full(v.to_string()));
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

/// `body`'s frames, then nothing until `held` resolves or is dropped, then the end.
fn held_open(body: Body, held: tokio::sync::oneshot::Receiver<()>) -> Body {
    use futures_util::StreamExt;
    let frames = http_body_util::BodyStream::new(body);
    let rest = futures_util::stream::once(held).filter_map(|_| async { None });
    BodyExt::boxed(http_body_util::StreamBody::new(frames.chain(rest)))
}

fn stream(events: &[Value]) -> Response<Body> {
    let mut out = String::new();
    for e in events {
        out.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap()
        ));
    }
    let mut r = Response::new(full(out));
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    r
}

/// Whether `token`, if present, is something the serving `account` did not mint: another
/// account's, a mangled or truncated blob, or no blob at all.
fn foreign(token: Option<&Value>, account: &str) -> bool {
    token.is_some_and(|t| !t.as_str().is_some_and(|b| minted_by(account, b)))
}

/// Accepts the request, or rejects the first state the serving account did not mint with the
/// provider's error.
fn check(
    body: &Value,
    headers: &http::HeaderMap,
    account: &str,
    anthropic: bool,
    stored: &HashMap<String, String>,
) -> Result<(), (StatusCode, &'static str)> {
    let bad = StatusCode::BAD_REQUEST;
    if anthropic {
        for m in body["messages"].as_array().into_iter().flatten() {
            for b in m["content"].as_array().into_iter().flatten() {
                if foreign(b.get("signature"), account) || foreign(b.get("data"), account) {
                    return Err((bad, SIGNATURE_REJECTED));
                }
            }
        }
        return Ok(());
    }
    if let Some(prev) = body.get("previous_response_id")
        && prev
            .as_str()
            .and_then(|id| stored.get(id))
            .is_none_or(|owner| owner != account)
    {
        return Err((bad, PREVIOUS_REJECTED));
    }
    if foreign(
        headers
            .get("x-codex-turn-state")
            .map(|v| Value::from(v.to_str().unwrap_or("")))
            .as_ref(),
        account,
    ) {
        return Err((bad, PREVIOUS_REJECTED));
    }
    for item in body["input"].as_array().into_iter().flatten() {
        if foreign(item.get("encrypted_content"), account) {
            return Err((bad, ENCRYPTED_REJECTED));
        }
    }
    Ok(())
}
