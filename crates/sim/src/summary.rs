//! What the simulated provider answers to summary requests (requests the builder's matcher
//! recognises: they get the configured reply and use no quota), and what a model can read
//! from the `compaction` items of its own account.
//!
//! A `compaction` item stands for the history it replaced: only the account that minted it can
//! read it. The simulator remembers, per minted item, the plain text of what it replaced
//! (assistant text, reasoning summaries, tool calls and their outputs; not the user messages,
//! which the compacted history keeps, nor the developer prompts). A reply built with
//! [`SimBuilder::summary_reply_with`] is given the texts of the compaction items of the summary
//! request that the serving account can read ([`SummaryRequest::compacted`]), so a test can
//! tell whether a summary was written with the compacted context or without it.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::bound::Minter;
use super::{SimBuilder, SimState, lock};

/// Largest text remembered per compaction item.
const MAX_COMPACTED: usize = 16 * 1024;

/// A summary request as its reply function sees it.
#[derive(Debug)]
pub struct SummaryRequest<'a> {
    /// The request body as received.
    pub body: &'a [u8],
    /// The account serving it.
    pub account: &'a str,
    /// The plain text behind each `compaction` item of the request that this account minted
    /// (and so can read), in order.
    pub compacted: Vec<String>,
}

/// Builds the reply text of a summary request.
pub(super) type Replier = Arc<dyn Fn(&SummaryRequest<'_>) -> String + Send + Sync>;

/// Compaction nonce → the text it replaced.
pub(super) type Compacted = HashMap<String, String>;

impl SimBuilder {
    /// Makes summary requests take `delay` before they are answered (a model writing a long
    /// summary), so that a session's turns can go on, and switch, while one is in flight.
    pub fn summary_delay(mut self, delay: std::time::Duration) -> Self {
        self.summary_delay = Some(delay);
        self
    }

    /// Requests for which `matcher(body)` is true get `reply(request)` as the assistant text
    /// and use no quota; the reply sees the body and what the serving account can read of the
    /// request's `compaction` items.
    pub fn summary_reply_with(
        mut self,
        matcher: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
        reply: impl Fn(&SummaryRequest<'_>) -> String + Send + Sync + 'static,
    ) -> Self {
        self.summary = Some((Arc::new(matcher), Arc::new(reply)));
        self
    }
}

/// Collects the strings under `text`, `arguments` and `output` keys of `v`.
fn texts(v: &Value, out: &mut String) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                match (k.as_str(), v) {
                    ("text" | "arguments" | "output", Value::String(s)) => {
                        out.push_str(s);
                        out.push('\n');
                    }
                    ("encrypted_content", _) => {}
                    _ => texts(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| texts(v, out)),
        _ => {}
    }
}

/// Remembers what the compaction item minted with `nonce` replaced: the items of `input` that
/// are neither user nor developer messages.
pub(super) fn remember(state: &SimState, nonce: &str, input: &Value) {
    let mut text = String::new();
    for item in input.as_array().into_iter().flatten() {
        let role = item.get("role").and_then(Value::as_str);
        if matches!(role, Some("user" | "developer" | "system")) {
            continue;
        }
        texts(item, &mut text);
    }
    let mut cut = text.len().min(MAX_COMPACTED);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    lock(&state.compacted).insert(nonce.to_owned(), text);
}

/// The reply to a summary request `body` served by `account`.
pub(super) fn reply(state: &SimState, account: &str, body: &[u8]) -> String {
    let Some((_, replier)) = &state.config.summary else {
        return String::new();
    };
    let compacted = readable(state, account, body);
    replier(&SummaryRequest {
        body,
        account,
        compacted,
    })
}

/// The remembered texts of the `compaction` items of `body` that `account` minted.
fn readable(state: &SimState, account: &str, body: &[u8]) -> Vec<String> {
    // Most summary requests carry no compaction item: skip the parse.
    if !body.windows(12).any(|w| w == b"\"compaction\"") {
        return Vec::new();
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let remembered = lock(&state.compacted);
    let mut out = Vec::new();
    let mut stack = vec![&v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(o) => {
                if o.get("type").and_then(Value::as_str) == Some("compaction")
                    && let Some(blob) = o.get("encrypted_content").and_then(Value::as_str)
                    && state.minter.verifies(account, blob)
                    && let Some(text) = Minter::nonce(blob).and_then(|n| remembered.get(n))
                {
                    out.push(text.clone());
                }
                stack.extend(o.values());
            }
            Value::Array(a) => stack.extend(a.iter().rev()),
            _ => {}
        }
    }
    out
}
