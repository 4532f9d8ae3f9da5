//! Codex's remote compaction (`POST /responses/compact`) served by a provider that speaks only
//! Anthropic Messages.
//!
//! The Responses API answers a compaction with the history that replaces the client's:
//! `{"object":"response.compaction","output":[…]}`, the user messages of the input followed by
//! one `compaction` item whose `encrypted_content` only that API can read. A Messages
//! provider has no such item, so the compaction is made of a summary instead:
//!
//! 1. [`compaction_turn`] turns the compaction request into an ordinary Responses turn: the
//!    same `instructions`, `input` and `tools`, then one more user message,
//!    [`COMPACTION_PROMPT`], asking for a summary to continue the work from; not streamed, and
//!    with `tool_choice: "none"` (the tools stay declared, since a history with tool calls
//!    needs them). That turn is translated like any other ([`super::responses_to_messages`]).
//! 2. [`messages_to_compaction`] builds the compacted history from the Messages answer: the
//!    user messages of the input, then the summary as a user message
//!    ([`SUMMARY_PREFIX`] + the model's text), which any model, on any provider, can carry on
//!    from.
//!
//! ```
//! use context_relay_core::translate::{ResponseContext, compaction_turn, messages_to_compaction};
//! let body = br#"{"model":"gpt-5.5","input":[{"type":"message","role":"user",
//!     "content":[{"type":"input_text","text":"fix the bug"}]}]}"#;
//! let c = compaction_turn(body).unwrap();
//! let turn: serde_json::Value = serde_json::from_slice(&c.turn).unwrap();
//! assert_eq!(turn["input"].as_array().unwrap().len(), 2);
//! let answer = br#"{"type":"message","id":"msg_1","content":[{"type":"text","text":"Fixed."}],
//!     "usage":{"input_tokens":10,"output_tokens":2}}"#;
//! let out = messages_to_compaction(answer, &c.kept, &ResponseContext::default()).unwrap();
//! let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
//! assert_eq!(v["object"], "response.compaction");
//! assert_eq!(v["output"][0]["content"][0]["text"], "fix the bug");
//! assert!(v["output"][1]["content"][0]["text"].as_str().unwrap().ends_with("Fixed."));
//! ```

use serde_json::{Map, Value, json};

use super::TranslateError;
use super::response::{ResponseContext, usage};

/// The instruction that ends a compaction turn.
pub const COMPACTION_PROMPT: &str = "\
The conversation above is about to be compacted: it will be replaced by the user's messages \
and the summary you write now, and the work will continue from them alone. Do not call any \
tool and do not continue the task. Write a summary that lets the work go on without the \
history: the user's goal and every request still open, the current state of the work, what \
was decided and why, the files, functions, commands and other identifiers in play, errors met \
and how they were dealt with, and the next step. Be complete but concise, use plain text, and \
write in the language of the conversation.";

/// The text before the summary in the compacted history.
pub const SUMMARY_PREFIX: &str =
    "Summary of the conversation so far (its earlier history was compacted):\n\n";

/// A compaction request made into a Responses turn ([`compaction_turn`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionRequest {
    /// The Responses turn asking for the summary.
    pub turn: Vec<u8>,
    /// The user messages of the input, kept in the compacted history.
    pub kept: Vec<Value>,
}

fn is_user_message(item: &Value) -> bool {
    matches!(
        item.get("type").and_then(Value::as_str),
        None | Some("message")
    ) && item.get("role").and_then(Value::as_str) == Some("user")
}

/// The Responses turn that asks for the summary of the compaction request `body`, and the
/// user messages the compacted history keeps.
///
/// The turn has the same `instructions`, `input` and `tools`, then one more user message,
/// [`COMPACTION_PROMPT`]; it is not streamed, and has `tool_choice: "none"` (the tools stay
/// declared, since a history with tool calls needs them). Its Messages answer becomes the
/// compacted history with [`messages_to_compaction`].
///
/// # Errors
/// [`TranslateError`] when the body is not a JSON object or `input` is neither a string nor
/// an array.
pub fn compaction_turn(body: &[u8]) -> Result<CompactionRequest, TranslateError> {
    let root: Value =
        serde_json::from_slice(body).map_err(|e| TranslateError::NotAnObject(e.to_string()))?;
    let Value::Object(mut root) = root else {
        return Err(TranslateError::NotAnObject("not an object".into()));
    };
    let user = |text: &str| {
        json!({"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": text}]})
    };
    let mut input = match root.remove("input") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![user(&s)],
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(TranslateError::BadField {
                field: "input",
                expected: "a string or an array of items",
            });
        }
    };
    let kept = input
        .iter()
        .filter(|i| is_user_message(i))
        .cloned()
        .collect();
    input.push(user(COMPACTION_PROMPT));
    root.insert("input".into(), Value::Array(input));
    root.remove("stream");
    root.insert("tool_choice".into(), Value::String("none".into()));
    let turn = serde_json::to_vec(&Value::Object(root))
        .map_err(|e| TranslateError::NotAnObject(e.to_string()))?;
    Ok(CompactionRequest { turn, kept })
}

/// The compaction answer built from the Messages JSON `answer` to a [`compaction_turn`] and
/// the `kept` user messages: `{"id","object":"response.compaction","created_at","output",
/// "usage"}`, whose `output` (the history that replaces the client's) is the kept messages
/// then the summary as a user message, [`SUMMARY_PREFIX`] and the model's text. `None` when
/// the answer is not a Messages answer or carries no text.
pub fn messages_to_compaction(
    answer: &[u8],
    kept: &[Value],
    ctx: &ResponseContext,
) -> Option<Vec<u8>> {
    let v: Value = serde_json::from_slice(answer).ok()?;
    if v.get("type").and_then(Value::as_str) != Some("message") {
        return None;
    }
    let summary: String = v
        .get("content")
        .and_then(Value::as_array)?
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    let summary = summary.trim();
    if summary.is_empty() {
        return None;
    }
    let mut output = kept.to_vec();
    output.push(json!({"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": format!("{SUMMARY_PREFIX}{summary}")}]}));
    let id = v.get("id").and_then(Value::as_str).unwrap_or("msg");
    let mut out = Map::new();
    out.insert("id".into(), json!(format!("resp_{id}")));
    out.insert("object".into(), json!("response.compaction"));
    out.insert("created_at".into(), json!(ctx.created_at));
    out.insert("output".into(), Value::Array(output));
    out.insert("usage".into(), usage(v.get("usage"), None));
    serde_json::to_vec(&Value::Object(out)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::{RequestOptions, responses_to_messages};

    fn msg(role: &str, text: &str) -> Value {
        let kind = if role == "assistant" {
            "output_text"
        } else {
            "input_text"
        };
        json!({"type": "message", "role": role, "content": [{"type": kind, "text": text}]})
    }

    #[test]
    fn the_turn_asks_for_a_summary_with_the_history_and_no_tool_call() {
        let body = json!({
            "model": "gpt-5.5", "instructions": "You are Codex.", "stream": true,
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
            "input": [
                msg("developer", "rules"), msg("user", "fix the bug"),
                {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
                msg("assistant", "Done."), msg("user", "now test it"),
                {"type": "compaction", "encrypted_content": "opaque"},
            ]
        });
        let c = compaction_turn(body.to_string().as_bytes()).unwrap();
        assert_eq!(
            c.kept,
            [msg("user", "fix the bug"), msg("user", "now test it")]
        );
        let t = responses_to_messages(&c.turn, &RequestOptions::new("claude-x")).unwrap();
        assert!(!t.stream);
        let v: Value = serde_json::from_slice(&t.body).unwrap();
        assert!(v.get("stream").is_none());
        assert_eq!(v["tool_choice"], json!({"type": "none"}));
        assert_eq!(v["tools"][0]["name"], "shell");
        let messages = v["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        assert_eq!(last["role"], "user");
        let text = serde_json::to_string(&last["content"]).unwrap();
        assert!(text.contains("about to be compacted"), "{text}");
        assert!(
            messages
                .iter()
                .any(|m| m["content"].to_string().contains("tool_use"))
        );
        assert!(!t.body.windows(6).any(|w| w == b"opaque"));

        // A string input is one user message.
        let c = compaction_turn(br#"{"model":"m","input":"hello"}"#).unwrap();
        assert_eq!(c.kept, [msg("user", "hello")]);
        assert!(compaction_turn(b"[1]").is_err());
        assert!(compaction_turn(br#"{"input":5}"#).is_err());
    }

    #[test]
    fn the_answer_is_the_kept_messages_and_the_summary() {
        let kept = [msg("user", "fix the bug")];
        let ctx = ResponseContext {
            created_at: 7,
            ..ResponseContext::default()
        };
        let answer = json!({"type": "message", "id": "msg_5", "role": "assistant",
            "content": [{"type": "text", "text": "Goal: fix."}, {"type": "text", "text": "Next: test."}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 100, "output_tokens": 20}});
        let out = messages_to_compaction(answer.to_string().as_bytes(), &kept, &ctx).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "resp_msg_5");
        assert_eq!(v["created_at"], 7);
        assert_eq!(v["usage"]["total_tokens"], 120);
        let output = v["output"].as_array().unwrap();
        assert_eq!(output.len(), 2);
        assert_eq!(output[0], kept[0]);
        assert_eq!(output[1]["role"], "user");
        assert_eq!(
            output[1]["content"][0]["text"],
            format!("{SUMMARY_PREFIX}Goal: fix.\nNext: test.")
        );
        let empty = json!({"type": "message", "content": [{"type": "text", "text": " "}]});
        assert!(messages_to_compaction(empty.to_string().as_bytes(), &kept, &ctx).is_none());
        assert!(messages_to_compaction(b"{\"type\":\"error\"}", &kept, &ctx).is_none());
    }
}
