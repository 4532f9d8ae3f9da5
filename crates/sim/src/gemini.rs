//! The Gemini API of the simulated provider: `models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse` under `/v1` and `/v1beta`, as strict as the real one where
//! a relay can get it wrong.
//!
//! - The account's key comes in `x-goog-api-key` (or `?key=`); an unknown key gets the real
//!   400 `API_KEY_INVALID`, a missing one the real 403.
//! - The body is a `GenerateContentRequest`: an unknown top-level member is refused with the
//!   real 400 (`Unknown name "…": Cannot find field.`), as proto JSON parsing does; `contents`
//!   must be there.
//! - Every `thoughtSignature` of the history must be one this account minted (or the
//!   documented placeholder `skip_thought_signature_validator`); another one is refused with
//!   the real 400 "Corrupted thought signature.". Signatures are base64 and accepted in either
//!   alphabet, since `google-genai` sends back URL-safe what it received in the standard one.
//! - A used-up account answers the real 429 `RESOURCE_EXHAUSTED` with `QuotaFailure`, `Help`
//!   and a `RetryInfo` whose `retryDelay` is the account's reset.
//! - Replies carry a minted signature on the answer's text part (and a `thought: true` part
//!   when `thinkingConfig.include_thoughts` asks for thoughts); streamed ones are
//!   `data: {…}\r\n\r\n` events, the last one with `finishReason`.
//! - On `gemini-3*` models the first `functionCall` of each model step of the current turn must
//!   carry a signature (the placeholder counts), else the real 400 "Function call is missing a
//!   thought_signature …".
//! - Tool loops ([`SimBuilder::tool_loop`](super::SimBuilder::tool_loop)) answer with a
//!   `functionCall` part signed by the account; the pairing of calls and function responses is
//!   enforced with the real 400s; injected faults are answered in the API's words.
//! - The Gemini API sends no quota headers; the simulated one sends those of
//!   [`SimBuilder::quota_headers`](super::SimBuilder::quota_headers), so that a test can drive a
//!   relay's threshold before the 429 (`SimQuotaHeaders::None` is the real API).

use axum::body::Body;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use super::reply::sse;
use super::{SimFault, SimState, header_value, lock};

/// The members of a `GenerateContentRequest` body, in both proto JSON spellings.
const MEMBERS: [&str; 13] = [
    "contents",
    "tools",
    "toolConfig",
    "tool_config",
    "safetySettings",
    "safety_settings",
    "systemInstruction",
    "system_instruction",
    "generationConfig",
    "generation_config",
    "cachedContent",
    "cached_content",
    "labels",
];

/// The signature the API accepts on history it did not produce.
const PLACEHOLDER: &str = "skip_thought_signature_validator";

/// Whether `path` is a Gemini generation route; `Some(streamed)` when it is.
pub(super) fn route(path: &str) -> Option<bool> {
    let rest = path
        .strip_prefix("/v1/models/")
        .or_else(|| path.strip_prefix("/v1beta/models/"))?;
    let (model, method) = rest.rsplit_once(':')?;
    if model.is_empty() {
        return None;
    }
    match method {
        "generateContent" => Some(false),
        "streamGenerateContent" => Some(true),
        _ => None,
    }
}

/// The key of a Gemini request: `x-goog-api-key`, else `?key=`.
pub(super) fn key(parts: &Parts) -> Option<String> {
    if let Some(v) = parts.headers.get("x-goog-api-key") {
        return v.to_str().ok().map(str::to_owned);
    }
    parts.uri.query()?.split('&').find_map(|pair| {
        let v = pair.strip_prefix("key=")?;
        Some(
            v.replace("%2B", "+")
                .replace("%2F", "/")
                .replace("%3D", "="),
        )
    })
}

/// `{"error":{"code","message","status"[,"details"]}}`.
fn rpc_error(
    code: StatusCode,
    status: &str,
    message: &str,
    details: Option<Value>,
) -> Response<Body> {
    let mut error = json!({"code": code.as_u16(), "message": message, "status": status});
    if let Some(d) = details {
        error["details"] = d;
    }
    super::control::json_response(code, &json!({ "error": error }))
}

/// The answer to a Gemini request already recorded at `recorded`.
pub(super) fn serve(
    state: &SimState,
    recorded: usize,
    parts: &Parts,
    body: &[u8],
    account: Option<String>,
    summary: bool,
) -> Response<Body> {
    let Some(stream) = route(parts.uri.path()) else {
        return rpc_error(StatusCode::NOT_FOUND, "NOT_FOUND", "unknown path", None);
    };
    let model = parts
        .uri
        .path()
        .rsplit_once(':')
        .and_then(|(p, _)| p.rsplit_once("/models/"))
        .map_or("unknown", |(_, m)| m)
        .to_owned();
    let account = match account {
        Some(a) if !lock(&state.revoked).contains(&a) => a,
        Some(_) | None if key(parts).is_some() => {
            state.reject(recorded, "API_KEY_INVALID");
            return rpc_error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                "API key not valid. Please pass a valid API key.",
                Some(json!([{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"}
                }])),
            );
        }
        _ => {
            state.reject(recorded, "unregistered_caller");
            return rpc_error(
                StatusCode::FORBIDDEN,
                "PERMISSION_DENIED",
                "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
                None,
            );
        }
    };
    let request = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => m,
        _ => {
            state.reject(recorded, "invalid_json");
            return rpc_error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                "Invalid JSON payload received. Expected an object.",
                None,
            );
        }
    };
    if let Some(unknown) = request.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        state.reject(recorded, "unknown_field");
        let message = format!(
            "Invalid JSON payload received. Unknown name \"{unknown}\": Cannot find field."
        );
        return rpc_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            &message,
            Some(json!([{
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"description": message}]
            }])),
        );
    }
    let request = Value::Object(request);
    if request["contents"].as_array().is_none_or(Vec::is_empty) {
        state.reject(recorded, "contents_missing");
        return rpc_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "* GenerateContentRequest.contents: contents is not specified\n",
            None,
        );
    }
    if signatures(&request).any(|s| s != PLACEHOLDER && !owned(state, &account, s)) {
        state.reject(recorded, "corrupted_thought_signature");
        return rpc_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "Corrupted thought signature.",
            None,
        );
    }
    if model.starts_with("gemini-3")
        && let Some(position) = unsigned_current_call(&request)
    {
        state.reject(recorded, "missing_thought_signature");
        return rpc_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            &format!(
                "Function call is missing a thought_signature in functionCall parts. This is \
                 required for tools to work correctly, and missing thought_signature may lead \
                 to degraded model performance. Additional data, function call position \
                 {position}. Please refer to \
                 https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
            ),
            None,
        );
    }

    if let Some(message) = super::pairing::gemini(&request) {
        state.reject(recorded, "tool_pairing");
        return rpc_error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message, None);
    }
    if let Some(fault) = super::control::take_fault(state, &account, summary) {
        return fault_answer(state, recorded, fault);
    }

    let cfg = &state.config;
    let (used, turn) = {
        let mut accounts = lock(&state.accounts);
        let Some(a) = accounts.iter_mut().find(|a| a.id == account) else {
            return rpc_error(
                StatusCode::FORBIDDEN,
                "PERMISSION_DENIED",
                "unknown account",
                None,
            );
        };
        if !summary {
            if a.used >= 100.0 {
                drop(accounts);
                state.reject(recorded, "RESOURCE_EXHAUSTED");
                return exhausted(&model, cfg.reset_secs);
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
    let text = if summary {
        super::summary::reply(state, &account, body)
    } else {
        format!("Reply {turn} from account {account}.")
    };
    let call = if summary {
        None
    } else {
        super::tool_loop::next_call(cfg, super::tool_loop::LoopApi::Gemini, &request, id)
    };
    let signature = STANDARD.encode(state.minter.signature(&account, &format!("g{id}")));
    let thoughts = ["include_thoughts", "includeThoughts"].iter().any(|k| {
        ["generationConfig", "generation_config"].iter().any(|g| {
            request[g]["thinkingConfig"][k] == true || request[g]["thinking_config"][k] == true
        })
    });
    let tokens = super::input_tokens(body.len());
    let cached = super::cached_tokens(tokens);
    // Thoughts are counted apart from the candidates' tokens.
    let thought_tokens: u64 = if thoughts { 3 } else { 0 };
    let usage = |out: u64| {
        let mut u = json!({"promptTokenCount": tokens, "cachedContentTokenCount": cached,
            "candidatesTokenCount": out, "totalTokenCount": tokens + out + thought_tokens});
        if thoughts {
            u["thoughtsTokenCount"] = json!(thought_tokens);
        }
        u
    };
    state.note_usage(
        recorded,
        super::SimUsage {
            input: tokens,
            cached,
            output: 12 + thought_tokens,
            reasoning: thought_tokens,
        },
    );
    let chunk = |parts: Value, finish: bool, out: u64| {
        let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
        if finish {
            candidate["finishReason"] = json!("STOP");
        }
        json!({"candidates": [candidate], "usageMetadata": usage(out),
            "modelVersion": model, "responseId": format!("resp-{account}-{id}")})
    };
    let thought =
        json!({"text": format!("**Answering**\n\nThinking about turn {turn}."), "thought": true});
    let mut res = if stream {
        let mut mid = text.len() / 2;
        while !text.is_char_boundary(mid) {
            mid -= 1;
        }
        let (head, tail) = text.split_at(mid);
        let chunks = if let Some(call) = &call {
            // The thought streams first, then the signed call ends the step.
            let last = chunk(
                json!([super::calls::gemini_part(call, &signature)]),
                true,
                12,
            );
            if thoughts {
                vec![chunk(json!([thought]), false, 4), last]
            } else {
                vec![last]
            }
        } else {
            let mut first = vec![json!({"text": head})];
            if thoughts {
                first.insert(0, thought);
            }
            vec![
                chunk(Value::Array(first), false, 4),
                chunk(
                    json!([{"text": tail, "thoughtSignature": signature}]),
                    true,
                    12,
                ),
            ]
        };
        let events = chunks
            .iter()
            .map(|v| Bytes::from(format!("data: {v}\r\n\r\n")))
            .collect();
        sse(events, lock(&state.hold).clone())
    } else {
        let mut parts = match &call {
            Some(call) => vec![super::calls::gemini_part(call, &signature)],
            None => vec![json!({"text": text, "thoughtSignature": signature})],
        };
        if thoughts {
            parts.insert(0, thought);
        }
        let mut r = Response::new(Body::from(chunk(Value::Array(parts), true, 12).to_string()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=UTF-8"),
        );
        r
    };
    super::quota::quota_headers(cfg, res.headers_mut(), used, super::unix_now());
    res.headers_mut()
        .insert("x-sim-account", header_value(&account));
    res
}

/// The answer to a request that met an injected `fault`, as the Gemini API words it.
fn fault_answer(state: &SimState, recorded: usize, fault: SimFault) -> Response<Body> {
    match fault {
        SimFault::Status(status, body) => {
            state.reject(recorded, &format!("fault_{}", status.as_u16()));
            super::control::json_response(status, &body)
        }
        SimFault::Overloaded => {
            state.reject(recorded, "overloaded");
            super::control::overloaded(None)
        }
        SimFault::Disconnect => {
            state.reject(recorded, "disconnect");
            super::control::disconnect()
        }
        SimFault::InBand | SimFault::InBandLimit | SimFault::Truncated => {
            state.reject(recorded, "internal");
            rpc_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL",
                "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
                None,
            )
        }
    }
}

/// Gemini 3 validates the current turn's function calls: the first `functionCall` part of each
/// model step after the last user message (a user entry with more than function responses)
/// must carry a signature. The index in `contents` of the first step without one.
fn unsigned_current_call(request: &Value) -> Option<usize> {
    let contents = request["contents"].as_array()?;
    let asks = |c: &Value| {
        c["role"] == "user"
            && c["parts"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p.get("functionResponse").is_none()))
    };
    let start = contents.iter().rposition(asks).map_or(0, |i| i + 1);
    contents.iter().enumerate().skip(start).find_map(|(i, c)| {
        let first_call = c["parts"]
            .as_array()?
            .iter()
            .find(|p| p.get("functionCall").is_some())?;
        let signed = [
            &first_call["thoughtSignature"],
            &first_call["thought_signature"],
        ]
        .iter()
        .any(|s| s.as_str().is_some_and(|s| !s.is_empty()));
        (c["role"] == "model" && !signed).then_some(i)
    })
}

/// Every thought signature of the history (`contents[].parts[]`), in both spellings.
fn signatures(request: &Value) -> impl Iterator<Item = &str> {
    request["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["parts"].as_array())
        .flatten()
        .flat_map(|p| [&p["thoughtSignature"], &p["thought_signature"]])
        .filter_map(Value::as_str)
}

/// Whether `signature` (base64, either alphabet) was minted by `account`.
fn owned(state: &SimState, account: &str, signature: &str) -> bool {
    let decoded = STANDARD
        .decode(signature)
        .or_else(|_| URL_SAFE.decode(signature))
        .or_else(|_| URL_SAFE_NO_PAD.decode(signature));
    let Some(blob) = decoded.ok().and_then(|b| String::from_utf8(b).ok()) else {
        return false;
    };
    state.minter.owner(&[account.to_owned()], &blob).is_some()
}

/// Which account minted `signature` (base64, either alphabet), among `accounts`.
fn signature_owner<'a>(
    state: &SimState,
    accounts: &'a [String],
    signature: &str,
) -> Option<&'a str> {
    accounts
        .iter()
        .find(|a| owned(state, a, signature))
        .map(String::as_str)
}

impl super::SimProvider {
    /// A Gemini `thoughtSignature` minted by `account` (standard base64, as the API sends it).
    pub fn mint_thought_signature(&self, account: &str, nonce: &str) -> String {
        STANDARD.encode(self.state.minter.signature(account, nonce))
    }

    /// The `thoughtSignature`s of a recorded Gemini request, each with the account that minted
    /// it (`None`: no account of this provider did, e.g. the placeholder).
    pub fn thought_signature_owners(
        &self,
        request: &super::RecordedRequest,
    ) -> Vec<(String, Option<String>)> {
        let Some(json) = request.json() else {
            return Vec::new();
        };
        let accounts: Vec<String> = lock(&self.state.accounts)
            .iter()
            .map(|a| a.id.clone())
            .collect();
        signatures(&json)
            .map(|s| {
                let owner = signature_owner(&self.state, &accounts, s).map(str::to_owned);
                (s.to_owned(), owner)
            })
            .collect()
    }
}

/// The 429 of a used-up account, as the Gemini API words it.
fn exhausted(model: &str, reset_secs: u64) -> Response<Body> {
    rpc_error(
        StatusCode::TOO_MANY_REQUESTS,
        "RESOURCE_EXHAUSTED",
        "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
        Some(json!([
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                "quotaDimensions": {"location": "global", "model": model},
                "quotaValue": "10"}]},
            {"@type": "type.googleapis.com/google.rpc.Help", "links": [{
                "description": "Learn more about Gemini API quotas",
                "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{reset_secs}s")}
        ])),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route("/v1/models/gemini-2.5-flash:generateContent"),
            Some(false)
        );
        assert_eq!(route("/v1beta/models/m:streamGenerateContent"), Some(true));
        assert_eq!(route("/v1/models/m:countTokens"), None);
        assert_eq!(route("/v1/models/:generateContent"), None);
        assert_eq!(route("/v1/responses"), None);
    }

    #[test]
    fn current_turn_calls_need_a_signature() {
        let call = |sig: Option<&str>| {
            let mut part = json!({"functionCall": {"name": "ls", "args": {}}});
            if let Some(s) = sig {
                part["thoughtSignature"] = json!(s);
            }
            json!({"role": "model", "parts": [part]})
        };
        let answer = json!({"role": "user", "parts": [{"functionResponse": {"name": "ls"}}]});
        let ask = json!({"role": "user", "parts": [{"text": "list"}]});
        // An unsigned call of an earlier turn is not checked; one of the current turn is.
        let earlier = json!({"contents": [ask, call(None), answer, ask]});
        assert_eq!(unsigned_current_call(&earlier), None);
        let current = json!({"contents": [ask, call(Some("c2ln")), answer, call(None), answer]});
        assert_eq!(unsigned_current_call(&current), Some(3));
        let placeholder = json!({"contents": [ask, call(Some(PLACEHOLDER)), answer]});
        assert_eq!(unsigned_current_call(&placeholder), None);
    }
}
