//! What tests make the simulated provider do beyond serving turns: injected faults, revoked
//! keys, account-bound state checks and minting, and questions about recorded state.

use std::sync::atomic::Ordering;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use super::bound::{self, Rejection};
use super::reply::{
    Reply, chat_events, messages_events, messages_failed_events, responses_events,
    responses_failed_events, sse,
};
use super::{Api, RecordedRequest, SimProvider, SimState, lock, tool_loop};

/// A fault the simulated provider answers the next matching request with
/// ([`SimProvider::fail_next`]).
#[derive(Debug, Clone, PartialEq)]
pub enum SimFault {
    /// This status with this JSON body.
    Status(StatusCode, Value),
    /// A 200 stream that fails before any output: Responses `response.created`,
    /// `response.in_progress`, then `response.failed` (`server_error`); Messages
    /// `message_start` then an `error` event (`overloaded_error`). A request that is not
    /// streamed gets a 500 instead.
    InBand,
    /// A 200 stream that fails for quota before any output, as the providers' streams do when
    /// an account runs out after answering: Responses `response.failed` with
    /// `rate_limit_exceeded` ("… Please try again in 20s."), Messages `message_start` then an
    /// `error` event (`rate_limit_error`), Chat a `data:` line holding the error body
    /// (`rate_limit_exceeded`). A request that is not streamed gets a 429 instead.
    InBandLimit,
    /// A 200 stream cut after its first text delta: no terminal event (`response.completed`,
    /// `message_stop`, `[DONE]`), as when the provider's connection drops. A request that is
    /// not streamed gets a 500 instead.
    Truncated,
    /// The provider is overloaded, in the API's words: OpenAI's 503 `server_error` ("That
    /// model is currently overloaded with other requests…"), Anthropic's 529
    /// `overloaded_error`, Gemini's 503 `UNAVAILABLE` ("The model is overloaded…").
    Overloaded,
    /// The connection is closed once the request is read, without any response (the client
    /// sees a connection error, as when the provider's front end drops it).
    Disconnect,
}

/// Marks a response that must not be sent: the connection is closed instead
/// ([`SimFault::Disconnect`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Disconnect;

/// The response of a [`SimFault::Disconnect`]: never sent, see [`close_if_disconnect`].
pub(super) fn disconnect() -> Response<Body> {
    let mut res = Response::new(Body::empty());
    res.extensions_mut().insert(Disconnect);
    res
}

/// Drops the connection of a response marked [`Disconnect`]: the task serving the connection
/// unwinds, so the socket closes with no byte of a response written. `resume_unwind` does not
/// run the panic hook: nothing is printed.
pub(super) fn close_if_disconnect(res: Response<Body>) -> Response<Body> {
    if res.extensions().get::<Disconnect>().is_some() {
        std::panic::resume_unwind(Box::new("simulated connection drop"));
    }
    res
}

/// The overloaded answer of `api` ([`SimFault::Overloaded`]); `None` is Gemini.
pub(super) fn overloaded(api: Option<Api>) -> Response<Body> {
    match api {
        Some(Api::Messages) => json_response(
            StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
                    "request_id": "req_sim"}),
        ),
        Some(_) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": {"message": "That model is currently overloaded with other requests. You can retry your request, or contact us through our help center at help.openai.com if the error persists. (Please include the request ID req_sim in your message.)",
                              "type": "server_error", "param": null, "code": null}}),
        ),
        None => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                              "status": "UNAVAILABLE"}}),
        ),
    }
}

/// Takes the next fault queued for `account` (summary requests take none).
pub(super) fn take_fault(state: &SimState, account: &str, summary: bool) -> Option<SimFault> {
    if summary {
        return None;
    }
    let mut faults = lock(&state.faults);
    let i = faults
        .iter()
        .position(|(a, _)| a.as_deref().is_none_or(|a| a == account))?;
    faults.remove(i).map(|(_, f)| f)
}

impl SimProvider {
    /// Answers the next request of `account` (any account with `None`) with `fault` instead of
    /// serving it. Faults queue up and are used once each; summary requests never take one.
    pub fn fail_next(&self, account: Option<&str>, fault: SimFault) {
        lock(&self.state.faults).push_back((account.map(str::to_owned), fault));
    }

    /// Makes the key of `account` answer 401 from now on (a revoked key), in the API's shape;
    /// for a login, its access tokens are refused and its refresh token is refused for good.
    pub fn revoke(&self, account: &str) {
        lock(&self.state.revoked).push(account.to_owned());
        self.state.logins.revoke(account);
    }

    /// Accepts the key of `account` again (a revoked login stays revoked).
    pub fn restore(&self, account: &str) {
        lock(&self.state.revoked).retain(|a| a != account);
    }

    /// Whether another account's state in a streamed Responses request is rejected in-band
    /// (a 200 stream ending in `response.failed`) rather than with a 400.
    pub fn set_state_errors_in_band(&self, in_band: bool) {
        self.state.in_band.store(in_band, Ordering::Relaxed);
    }

    /// An `encrypted_content` blob minted by `account`, for histories built by a test (e.g.
    /// a `compaction` item, or an encrypted multi-agent tool output). `nonce` must not contain
    /// a `.`.
    pub fn mint_encrypted(&self, account: &str, nonce: &str) -> String {
        self.state.minter.encrypted(account, nonce)
    }

    /// A thinking `signature` (or `redacted_thinking` `data`) minted by `account`.
    pub fn mint_signature(&self, account: &str, nonce: &str) -> String {
        self.state.minter.signature(account, nonce)
    }

    /// Every piece of account-bound state `request` carried (`previous_response_id`, items
    /// with `encrypted_content` by type, `thinking` / `redacted_thinking` blocks), each with the
    /// account that minted it (`None`: no account of this provider did).
    pub fn state_owners(&self, request: &RecordedRequest) -> Vec<(String, Option<String>)> {
        let Some(json) = request.json() else {
            return Vec::new();
        };
        let accounts: Vec<String> = lock(&self.state.accounts)
            .iter()
            .map(|a| a.id.clone())
            .collect();
        bound::owners(
            &self.state.minter,
            &lock(&self.state.stored),
            &accounts,
            &json,
        )
    }
}

impl SimState {
    pub(super) fn reject(&self, index: usize, code: &str) {
        if let Some(r) = lock(&self.requests).get_mut(index) {
            r.rejected = Some(code.to_owned());
        }
    }

    /// Records the usage the answer to request `index` reported.
    pub(super) fn note_usage(&self, index: usize, usage: super::SimUsage) {
        if let Some(r) = lock(&self.requests).get_mut(index) {
            r.usage = Some(usage);
        }
    }

    fn next_id(&self) -> u64 {
        let mut c = lock(&self.counter);
        *c += 1;
        *c
    }
}

pub(super) fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut res = Response::new(Body::from(body.to_string()));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// A 500 as OpenAI words it.
fn server_error() -> Response<Body> {
    json_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        &json!({"error": {"message": "The server had an error while processing your request.",
                          "type": "server_error", "param": null, "code": null}}),
    )
}

/// The 401 of a revoked or unknown key, as each API words it.
pub(super) fn unauthorized(api: Api) -> Response<Body> {
    let body = if api == Api::Messages {
        json!({"type": "error", "error": {"type": "authentication_error",
               "message": "invalid x-api-key"}, "request_id": "req_sim"})
    } else {
        json!({"error": {"message": "Incorrect API key provided: sk-****. You can find your API key at https://platform.openai.com/account/api-keys.",
               "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
    };
    json_response(StatusCode::UNAUTHORIZED, &body)
}

fn failed_reply(state: &SimState, request: &Value) -> Reply {
    // The input was read before the answer failed: a stream reports it at its start.
    let input_tokens = super::input_tokens(request.to_string().len());
    Reply {
        id: state.next_id(),
        model: request["model"].as_str().unwrap_or("unknown").to_owned(),
        text: String::new(),
        input_tokens,
        cached_tokens: super::cached_tokens(input_tokens),
        output_tokens: 0,
        include_usage: false,
        ..Reply::default()
    }
}

/// The answer to a request that is not served: an injected fault, or account-bound state of
/// another account. `None` when the request is to be served.
pub(super) fn rejection(
    state: &SimState,
    recorded: usize,
    api: Api,
    account: &str,
    request: &Value,
    summary: bool,
) -> Option<Response<Body>> {
    let stream = request["stream"].as_bool().unwrap_or(false);
    match take_fault(state, account, summary) {
        Some(SimFault::Status(status, body)) => {
            state.reject(recorded, &format!("fault_{}", status.as_u16()));
            return Some(json_response(status, &body));
        }
        Some(SimFault::InBand) => {
            state.reject(recorded, "in_band");
            let reply = failed_reply(state, request);
            return Some(match (api, stream) {
                (Api::Responses, true) => sse(
                    responses_failed_events(
                        &reply,
                        json!({"code": "server_error",
                               "message": "An error occurred while processing your request."}),
                    ),
                    None,
                ),
                (Api::Messages, true) => sse(
                    messages_failed_events(
                        &reply,
                        json!({"type": "overloaded_error", "message": "Overloaded"}),
                    ),
                    None,
                ),
                _ => server_error(),
            });
        }
        Some(SimFault::InBandLimit) => {
            state.reject(recorded, "in_band_limit");
            let reply = failed_reply(state, request);
            let message = "Rate limit reached for requests. Please try again in 20s.";
            return Some(match (api, stream) {
                (Api::Responses, true) => sse(
                    responses_failed_events(
                        &reply,
                        json!({"code": "rate_limit_exceeded", "message": message}),
                    ),
                    None,
                ),
                (Api::Messages, true) => sse(
                    messages_failed_events(
                        &reply,
                        json!({"type": "rate_limit_error", "message": message}),
                    ),
                    None,
                ),
                (Api::Chat, true) => sse(
                    vec![Bytes::from(format!(
                        "data: {}\n\n",
                        json!({"error": {"message": message, "type": "requests",
                                         "param": null, "code": "rate_limit_exceeded"}})
                    ))],
                    None,
                ),
                _ => json_response(
                    StatusCode::TOO_MANY_REQUESTS,
                    &json!({"error": {"message": message, "type": "requests",
                                      "param": null, "code": "rate_limit_exceeded"}}),
                ),
            });
        }
        Some(SimFault::Truncated) if stream => {
            state.reject(recorded, "truncated");
            let mut reply = failed_reply(state, request);
            reply.text = "Partial answer that never ends".to_owned();
            let (events, kept) = match api {
                Api::Responses => (responses_events(&reply), 5),
                Api::Messages => (messages_events(&reply), 4),
                Api::Chat => (chat_events(&reply), 2),
            };
            return Some(sse(events.into_iter().take(kept).collect(), None));
        }
        Some(SimFault::Truncated) => {
            state.reject(recorded, "truncated");
            return Some(server_error());
        }
        Some(SimFault::Overloaded) => {
            state.reject(recorded, "overloaded");
            return Some(overloaded(Some(api)));
        }
        Some(SimFault::Disconnect) => {
            state.reject(recorded, "disconnect");
            return Some(disconnect());
        }
        None => {}
    }
    if let Some(body) = match api {
        Api::Responses => crate::pairing::responses(request),
        Api::Chat => crate::pairing::chat(request),
        Api::Messages => None,
    } {
        state.reject(recorded, "tool_pairing");
        return Some(json_response(StatusCode::BAD_REQUEST, &body));
    }
    let rejected: Option<Rejection> = match api {
        Api::Responses => {
            bound::check_responses(&state.minter, &lock(&state.stored), account, request)
        }
        Api::Messages => bound::check_messages(&state.minter, account, request),
        Api::Chat => None,
    };
    let r = rejected?;
    state.reject(recorded, r.code);
    if api == Api::Responses && stream && state.in_band.load(Ordering::Relaxed) {
        let reply = failed_reply(state, request);
        let error = json!({"code": r.body["error"]["code"], "message": r.body["error"]["message"]});
        return Some(sse(responses_failed_events(&reply, error), None));
    }
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST);
    Some(json_response(status, &r.body))
}

/// Adds the state `account` mints to a reply: a reasoning item when the Responses request
/// asked for `reasoning.encrypted_content`, a signed thinking block when the Messages request
/// enabled thinking. A Responses reply is stored (for `previous_response_id`) unless the
/// request said `store: false`.
pub(super) fn mint(
    state: &SimState,
    api: Api,
    account: &str,
    request: &Value,
    mut reply: Reply,
) -> Reply {
    match api {
        Api::Responses => {
            let wants = request["include"]
                .as_array()
                .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content"));
            if wants {
                let id = format!("rs_sim_{}", reply.id);
                let blob = state.minter.encrypted(account, &id);
                reply.reasoning = Some((id, blob));
            }
            if request["store"].as_bool() != Some(false) {
                let mut stored = lock(&state.stored);
                stored.insert(format!("resp_sim_{}", reply.id), account.to_owned());
                // Stored output items can be sent back by id alone.
                if let Some((id, _)) = &reply.reasoning {
                    stored.insert(id.clone(), account.to_owned());
                }
            }
        }
        Api::Messages => {
            let on = matches!(
                request.pointer("/thinking/type").and_then(Value::as_str),
                Some("enabled" | "adaptive")
            );
            if on {
                let nonce = format!("th_sim_{}", reply.id);
                reply.thinking = Some(state.minter.signature(account, &nonce));
            }
            reply.tool_use = super::tool::call(&state.config, request, reply.id);
        }
        Api::Chat => {}
    }
    if api != Api::Messages {
        reply.tool_use = tool_loop::next_call(&state.config, api.into(), request, reply.id);
    }
    reply
}
