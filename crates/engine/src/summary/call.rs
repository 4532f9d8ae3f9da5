//! The summary call: send the derived request, retry once without a parameter the model
//! refused, remember that refusal for the provider and model, and sort the answer into an
//! outcome.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use context_relay_core::unsupported::{UnsupportedParam, drop_param, unsupported_param};
use http::StatusCode;
use serde_json::Value;

use std::sync::Arc;

use super::{Summarizer, SummaryError, SummaryRequest};

/// Most `(provider, model)` pairs whose refused parameters are remembered.
const MAX_REMEMBERED_MODELS: usize = 1024;

/// Parameters each `(provider, model)` refused, applied to every later summary request to it.
#[derive(Debug, Default)]
pub(crate) struct DroppedParams {
    map: Mutex<HashMap<(String, String), Vec<UnsupportedParam>>>,
}

impl DroppedParams {
    fn with<R>(
        &self,
        f: impl FnOnce(&mut HashMap<(String, String), Vec<UnsupportedParam>>) -> R,
    ) -> R {
        match self.map.lock() {
            Ok(mut m) => f(&mut m),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Removes the remembered parameters of `provider` / `model` from `body`.
    pub(crate) fn apply(&self, provider: &str, model: &str, body: &mut Value) {
        let known = self.with(|m| m.get(&(provider.to_owned(), model.to_owned())).cloned());
        for p in known.iter().flatten() {
            drop_param(body, p);
        }
    }

    fn remember(&self, provider: &str, model: &str, param: UnsupportedParam) {
        self.with(|m| {
            if m.len() >= MAX_REMEMBERED_MODELS {
                // A bounded table: forgetting only costs one more refused call.
                m.clear();
            }
            let list = m
                .entry((provider.to_owned(), model.to_owned()))
                .or_default();
            if !list.contains(&param) {
                list.push(param);
            }
        });
    }
}

/// How the summary call ended.
#[derive(Debug)]
pub(crate) enum CallResult {
    /// A 2xx reply body.
    Reply(Bytes),
    /// Refused for good: a non-2xx other than 408, 429 and 5xx (after the retry, if any).
    Rejected,
    /// Transient: timeout, transport error, 408, 429 or 5xx.
    Unavailable,
}

/// Sends `body` through `summarizer`, bounded by `timeout` per attempt; a 400 naming an
/// unsupported parameter is retried once without it, and the refusal remembered.
pub(crate) async fn call(
    summarizer: &Arc<dyn Summarizer>,
    dropped: &DroppedParams,
    provider: &str,
    model: &str,
    mut body: Value,
    make: impl Fn(Bytes) -> SummaryRequest,
    timeout: Duration,
) -> CallResult {
    let mut retried = false;
    loop {
        let bytes = Bytes::from(body.to_string());
        let answer = tokio::time::timeout(timeout, summarizer.summarize(make(bytes))).await;
        let err = match answer {
            Ok(Ok(reply)) => return CallResult::Reply(reply),
            Ok(Err(e)) => e,
            Err(_) => {
                tracing::warn!(timeout_secs = timeout.as_secs(), "summary call timed out");
                return CallResult::Unavailable;
            }
        };
        let (status, error_body) = match err {
            SummaryError::Status { status, body } => (status, body),
            e => {
                tracing::warn!(error = %e, "summary call failed");
                return CallResult::Unavailable;
            }
        };
        if status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS
            || status.is_server_error()
        {
            tracing::warn!(%status, "summary call unavailable");
            return CallResult::Unavailable;
        }
        if status == StatusCode::BAD_REQUEST
            && !retried
            && let Some(param) = unsupported_param(&error_body)
            && drop_param(&mut body, &param)
        {
            tracing::info!(
                provider,
                model,
                param = %param.param,
                replacement = param.replacement.as_deref().unwrap_or(""),
                "summary parameter refused by the model; retrying without it"
            );
            dropped.remember(provider, model, param);
            retried = true;
            continue;
        }
        // The error message is the provider's, never our prompt.
        let message = error_message(&error_body);
        tracing::warn!(%status, error = %message, "summary call rejected");
        return CallResult::Rejected;
    }
}

/// The provider's error message (at most 300 chars), for the log.
fn error_message(body: &[u8]) -> String {
    let v: Option<Value> = serde_json::from_slice(body).ok();
    let message = v
        .as_ref()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("detail"))
        })
        .and_then(Value::as_str)
        .unwrap_or("");
    message.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_drops_apply_per_provider_and_model() {
        let d = DroppedParams::default();
        let p = UnsupportedParam {
            param: "temperature".into(),
            replacement: None,
        };
        d.remember("openai", "gpt-5", p.clone());
        d.remember("openai", "gpt-5", p);
        let mut body = serde_json::json!({"temperature": 0.2, "model": "gpt-5"});
        d.apply("openai", "gpt-4.1", &mut body);
        assert_eq!(body["temperature"], 0.2, "another model keeps it");
        d.apply("openai", "gpt-5", &mut body);
        assert!(body.get("temperature").is_none());
        assert_eq!(d.with(|m| m.values().map(Vec::len).sum::<usize>()), 1);
    }

    #[test]
    fn error_messages_for_the_log() {
        assert_eq!(
            error_message(br#"{"error":{"message":"bad model"}}"#),
            "bad model"
        );
        assert_eq!(error_message(br#"{"detail":"nope"}"#), "nope");
        assert_eq!(error_message(b"<html>"), "");
    }
}
