//! The request-parameter rules real providers enforce, with their exact error bodies, for the
//! simulated provider and the test doubles (a double that accepts anything proves nothing).
//!
//! | rule | answer |
//! |---|---|
//! | GPT-5 family (Chat or Responses) with `temperature` or `top_p` | 400 `Unsupported parameter: 'temperature' is not supported with this model.` (`unsupported_parameter`) |
//! | o-series (`o1`, `o3`, `o4`) with a `temperature` other than 1 | 400 `Unsupported value: 'temperature' does not support 0.1 with this model. Only the default (1) value is supported.` (`unsupported_value`) |
//! | Chat Completions, reasoning family, with `max_tokens` | 400 `Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.` |
//! | Anthropic Messages without `max_tokens` | 400 `max_tokens: Field required` |
//! | Anthropic Messages with `max_tokens` above the model's output limit (Claude 3: 4096, 3.5: 8192, Opus 4 and 4.1: 32000, …) | 400 `max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens for claude-3-5-sonnet-20241022` |
//! | Anthropic Messages with an unknown field, a first message not `user`, a role other than `user`/`assistant`, a `tool_use`/`tool_result` not paired (consecutive messages of one role are one turn, as the API combines them), a repeated `tool_use` id, an empty or whitespace-only text block, a final assistant message ending in whitespace | 400 `invalid_request_error` with the real API's message (`input: Extra inputs are not permitted`, …) |
//! | Anthropic Messages with `tool_use`/`tool_result` blocks but no `tools`, a `tool_choice` naming an unknown tool, more than 4 `cache_control` blocks, `temperature` with `top_p`, a temperature outside `0..=1`, a blank `system` text block | 400 `invalid_request_error` with the real API's message (`Requests which include \`tool_use\` or \`tool_result\` blocks must define tools.`, `A maximum of 4 blocks with cache_control may be provided. Found 5.`, …) |
//! | ChatGPT Codex backend ([`Backend::ChatGptCodex`]) | `{"detail": …}` 400s unless `instructions` is given, `input` is a list, `stream: true` and `store: false`, and for `max_output_tokens` / `temperature` / `top_p` |
//!
//! ```
//! use context_relay_sim::rules::{Backend, check};
//! let body = serde_json::json!({"model": "gpt-5", "temperature": 0.1, "messages": []});
//! let (status, error) = check(Backend::Api, "/v1/chat/completions", &body).unwrap();
//! assert_eq!(status, 400);
//! assert!(error.contains("\"param\":\"temperature\""));
//! assert!(check(Backend::Api, "/v1/chat/completions", &serde_json::json!({"model": "gpt-4.1", "temperature": 0.1})).is_none());
//! ```

use serde_json::{Value, json};

/// Which provider backend's rules apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Backend {
    /// The OpenAI and Anthropic APIs.
    #[default]
    Api,
    /// The ChatGPT backend Codex subscriptions use (`/backend-api/codex/responses`): it takes
    /// only what Codex itself sends.
    ChatGptCodex,
}

fn model_name(body: &Value) -> String {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase()
}

/// An OpenAI error body, fields in the order the API sends them.
fn openai_error(message: &str, param: &str, code: &str) -> String {
    let quoted = |s: &str| Value::String(s.to_owned()).to_string();
    format!(
        r#"{{"error":{{"message":{},"type":"invalid_request_error","param":{},"code":{}}}}}"#,
        quoted(message),
        quoted(param),
        quoted(code)
    )
}

/// The 400 a real provider answers to `body` posted to `path`, as `(status, JSON body)`, or
/// `None` when it would accept the parameters.
pub fn check(backend: Backend, path: &str, body: &Value) -> Option<(u16, String)> {
    let model = model_name(body);
    let has = |k: &str| body.get(k).is_some_and(|v| !v.is_null());
    if backend == Backend::ChatGptCodex {
        let detail = |m: &str| Some((400, json!({ "detail": m }).to_string()));
        if !body.get("instructions").is_some_and(Value::is_string) {
            return detail("Instructions are required");
        }
        if !body.get("input").is_some_and(Value::is_array) {
            return detail("Input must be a list");
        }
        if body.get("stream").and_then(Value::as_bool) != Some(true) {
            return detail("Stream must be set to true");
        }
        if body.get("store").and_then(Value::as_bool) != Some(false) {
            return detail("Store must be set to false");
        }
        for p in ["max_output_tokens", "temperature", "top_p"] {
            if has(p) {
                return detail(&format!("Unsupported parameter: {p}"));
            }
        }
        return None;
    }
    if path.ends_with("/messages") {
        if !has("max_tokens") {
            let e = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}});
            return Some((400, e.to_string()));
        }
        return crate::messages::check(body)
            .or_else(|| crate::message_params::check(body))
            .map(|message| {
            let e = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
            (400, e.to_string())
        });
    }
    let gpt5 = model.starts_with("gpt-5");
    let o_series = ["o1", "o3", "o4"].iter().any(|f| model.starts_with(f));
    if gpt5 {
        for p in ["temperature", "top_p"] {
            if has(p) {
                let message =
                    format!("Unsupported parameter: '{p}' is not supported with this model.");
                return Some((400, openai_error(&message, p, "unsupported_parameter")));
            }
        }
    }
    if o_series
        && let Some(t) = body.get("temperature").and_then(Value::as_f64)
        && t != 1.0
    {
        let message = format!(
            "Unsupported value: 'temperature' does not support {t} with this model. Only the default (1) value is supported."
        );
        return Some((
            400,
            openai_error(&message, "temperature", "unsupported_value"),
        ));
    }
    if (gpt5 || o_series) && path.ends_with("/chat/completions") && has("max_tokens") {
        let message = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.";
        return Some((
            400,
            openai_error(message, "max_tokens", "unsupported_parameter"),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_bodies() {
        let (_, b) = check(
            Backend::Api,
            "/v1/responses",
            &json!({"model": "gpt-5.5", "temperature": 0.1}),
        )
        .expect("refused");
        assert_eq!(
            b,
            r#"{"error":{"message":"Unsupported parameter: 'temperature' is not supported with this model.","type":"invalid_request_error","param":"temperature","code":"unsupported_parameter"}}"#
        );
        let (_, b) = check(
            Backend::Api,
            "/v1/chat/completions",
            &json!({"model": "o3-mini", "temperature": 0.1}),
        )
        .expect("refused");
        assert!(b.contains("Unsupported value: 'temperature' does not support 0.1 with this model. Only the default (1) value is supported."));
        assert!(
            check(
                Backend::Api,
                "/v1/chat/completions",
                &json!({"model": "o3", "temperature": 1})
            )
            .is_none()
        );
        let (_, b) = check(
            Backend::Api,
            "/v1/chat/completions",
            &json!({"model": "gpt-5", "max_tokens": 800}),
        )
        .expect("refused");
        assert!(b.contains("Use 'max_completion_tokens' instead."));
        assert!(
            check(
                Backend::Api,
                "/v1/responses",
                &json!({"model": "gpt-5", "max_output_tokens": 800})
            )
            .is_none()
        );
        assert!(check(Backend::Api, "/v1/messages", &json!({"model": "claude"})).is_some());
        assert!(
            check(
                Backend::Api,
                "/v1/messages",
                &json!({"model": "claude", "max_tokens": 5, "temperature": 0.1})
            )
            .is_none()
        );
    }

    #[test]
    fn chatgpt_backend_takes_only_what_codex_sends() {
        let ok = json!({"model": "gpt-5.5", "stream": true, "store": false, "instructions": "x",
                        "input": []});
        assert!(check(Backend::ChatGptCodex, "/v1/responses", &ok).is_none());
        let mut b = ok.clone();
        b["max_output_tokens"] = json!(800);
        let (_, e) = check(Backend::ChatGptCodex, "/v1/responses", &b).expect("refused");
        assert_eq!(
            e,
            r#"{"detail":"Unsupported parameter: max_output_tokens"}"#
        );
        b = ok.clone();
        b["stream"] = json!(false);
        assert!(check(Backend::ChatGptCodex, "/v1/responses", &b).is_some());
        for (field, value, error) in [
            (
                "instructions",
                Value::Null,
                r#"{"detail":"Instructions are required"}"#,
            ),
            ("input", json!("hi"), r#"{"detail":"Input must be a list"}"#),
        ] {
            b = ok.clone();
            b[field] = value;
            let (_, e) = check(Backend::ChatGptCodex, "/v1/responses", &b).expect("refused");
            assert_eq!(e, error);
        }
    }
}
