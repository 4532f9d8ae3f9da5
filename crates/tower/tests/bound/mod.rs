//! A provider double that binds state to the account that minted it, as the real ones do:
//! Responses reasoning items (`encrypted_content`), stored response ids and Anthropic thinking
//! signatures are minted per account, and any that another account minted is rejected with
//! the provider's real error body.
#![allow(dead_code, unreachable_pub)]

pub mod clients;

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
}

impl Received {
    /// Whether the request carries a token minted by `account`.
    pub fn carries_state_of(&self, account: &str) -> bool {
        self.text.contains(&format!(":{account}:"))
            || self
                .headers
                .get("x-codex-turn-state")
                .is_some_and(|v| v.to_str().unwrap_or("").contains(&format!(":{account}:")))
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
    pub minted: usize,
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
            .map(|a| a.account.to_string())
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
            check(&body, &headers, &account, anthropic)
        };
        let status = verdict.as_ref().err().map_or(StatusCode::OK, |e| e.0);
        let mode = state.mode;
        state.received.push(Received {
            account: account.clone(),
            headers,
            body: body.clone(),
            text,
            status,
        });
        let response = match verdict {
            Err((status, error))
                if mode == Mode::FailInBand && !anthropic && status == StatusCode::BAD_REQUEST =>
            {
                let error: Value = serde_json::from_str(error).unwrap();
                stream(&[
                    json!({"type":"response.created","response":{"id":"resp_f","status":"in_progress"}}),
                    json!({"type":"response.in_progress","response":{"id":"resp_f"}}),
                    json!({"type":"response.failed","response":{"id":"resp_f","status":"failed","error":error["error"]}}),
                ])
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
                            {"type": "thinking", "thinking": format!("thought {n}"), "signature": format!("sig:{account}:{n}")},
                            {"type": "text", "text": format!("answer {n}")}
                        ],
                        "stop_reason": "end_turn"
                    }))
                } else {
                    let reasoning = json!({"type":"reasoning","id":format!("rs_{account}_{n}"),"summary":[],"encrypted_content":format!("enc:{account}:{n}")});
                    let message = json!({"type":"message","role":"assistant","content":[{"type":"output_text","text":format!("answer {n}")}]});
                    let mut r = stream(&[
                        json!({"type":"response.created","response":{"id":format!("resp:{account}:{n}"),"status":"in_progress"}}),
                        json!({"type":"response.in_progress","response":{"id":format!("resp:{account}:{n}")}}),
                        json!({"type":"response.output_item.done","output_index":0,"item":reasoning}),
                        json!({"type":"response.output_item.done","output_index":1,"item":message}),
                        json!({"type":"response.completed","response":{"id":format!("resp:{account}:{n}"),"status":"completed","output":[reasoning, message]}}),
                    ]);
                    r.headers_mut().insert(
                        "x-codex-turn-state",
                        format!("ts:{account}:{n}").parse().unwrap(),
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

/// The account that minted a token (`kind:account:n`), if it is one of ours.
fn minter(token: &str) -> Option<&str> {
    let mut parts = token.split(':');
    let _kind = parts.next()?;
    let account = parts.next()?;
    parts.next().map(|_| account)
}

fn foreign(token: Option<&Value>, account: &str) -> bool {
    token
        .and_then(Value::as_str)
        .and_then(minter)
        .is_some_and(|m| m != account)
}

/// Accepts the request, or rejects the first foreign state with the provider's error.
fn check(
    body: &Value,
    headers: &http::HeaderMap,
    account: &str,
    anthropic: bool,
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
    if foreign(body.get("previous_response_id"), account) {
        return Err((bad, PREVIOUS_REJECTED));
    }
    if let Some(ts) = headers
        .get("x-codex-turn-state")
        .and_then(|v| v.to_str().ok())
        && minter(ts).is_some_and(|m| m != account)
    {
        return Err((bad, PREVIOUS_REJECTED));
    }
    for item in body["input"].as_array().into_iter().flatten() {
        if foreign(item.get("encrypted_content"), account) {
            return Err((bad, ENCRYPTED_REJECTED));
        }
    }
    Ok(())
}
