//! The readable text of a conversation's reasoning: what a switch would otherwise lose.
//!
//! Reasoning travels with an account-bound proof (an encrypted blob, a signature), and a
//! switch removes it (see [`crate::portable`]). Much of it is also plain text next to that
//! proof, which any account may read:
//!
//! | shape | readable reasoning |
//! |---|---|
//! | Responses | the `summary[].text` (and any plain `content[].text`) of `reasoning` items; only `encrypted_content` is bound |
//! | Anthropic Messages | the `thinking` text of `thinking` blocks; only `signature` is bound (a `redacted_thinking` block has no readable text) |
//! | Gemini | the `text` of parts marked `thought: true`; only `thoughtSignature` is bound |
//! | Chat Completions | an assistant message's `reasoning_content` or `reasoning` string, as some providers send it |
//!
//! [`readable_reasoning`] gives those texts newest first, whitespace folded, each clipped to
//! [`MAX_REASONING_CHARS`], at most [`MAX_REASONING_ITEMS`] of them: what a switch-time handoff
//! (see [`crate::extractive::switch_handoff`]) carries of the thinking that led here.
//!
//! ```
//! use context_relay_core::{ApiShape, reasoning::readable_reasoning};
//!
//! let body = serde_json::json!({"input": [
//!     {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Check the parser first."}],
//!      "encrypted_content": "gAAA…"},
//!     {"type": "reasoning", "summary": [{"type": "summary_text", "text": "The flag needs a test."}],
//!      "encrypted_content": "gAAA…"}
//! ]});
//! assert_eq!(
//!     readable_reasoning(ApiShape::Responses, &body),
//!     ["The flag needs a test.", "Check the parser first."]
//! );
//! ```

use serde_json::Value;

use crate::api::ApiShape;
use crate::parse::clamp_chars;

/// Most reasoning texts kept.
pub const MAX_REASONING_ITEMS: usize = 8;
/// Longest reasoning text kept, in chars (an ellipsis marks a clipped one).
pub const MAX_REASONING_CHARS: usize = 600;

/// The readable reasoning of `body` (a request of `shape`), newest first (see the module
/// docs). Entries of unexpected shapes are passed over.
pub fn readable_reasoning(shape: ApiShape, body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut keep = |text: &str| {
        if out.len() >= MAX_REASONING_ITEMS {
            return false;
        }
        let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if !folded.is_empty() {
            let cut = clamp_chars(&folded, MAX_REASONING_CHARS);
            out.push(if cut.len() < folded.len() {
                format!("{cut}…")
            } else {
                folded
            });
        }
        true
    };
    let list = |key: &str| body.get(key).and_then(Value::as_array);
    match shape {
        ApiShape::Responses => {
            for item in list("input").into_iter().flatten().rev() {
                if item.get("type").and_then(Value::as_str) != Some("reasoning") {
                    continue;
                }
                // Within an item the parts are in order: newest last.
                let parts = ["content", "summary"]
                    .iter()
                    .filter_map(|k| item.get(*k).and_then(Value::as_array))
                    .flat_map(|parts| parts.iter().rev());
                for part in parts {
                    if let Some(text) = part.get("text").and_then(Value::as_str)
                        && !keep(text)
                    {
                        return out;
                    }
                }
            }
        }
        ApiShape::AnthropicMessages => {
            for message in list("messages").into_iter().flatten().rev() {
                let blocks = message.get("content").and_then(Value::as_array);
                for block in blocks.into_iter().flatten().rev() {
                    if block.get("type").and_then(Value::as_str) == Some("thinking")
                        && let Some(text) = block.get("thinking").and_then(Value::as_str)
                        && !keep(text)
                    {
                        return out;
                    }
                }
            }
        }
        ApiShape::Gemini => {
            for content in list("contents").into_iter().flatten().rev() {
                let parts = content.get("parts").and_then(Value::as_array);
                for part in parts.into_iter().flatten().rev() {
                    if part.get("thought").and_then(Value::as_bool) == Some(true)
                        && let Some(text) = part.get("text").and_then(Value::as_str)
                        && !keep(text)
                    {
                        return out;
                    }
                }
            }
        }
        ApiShape::ChatCompletions => {
            for message in list("messages").into_iter().flatten().rev() {
                let text = ["reasoning_content", "reasoning"]
                    .iter()
                    .find_map(|k| message.get(*k).and_then(Value::as_str));
                if let Some(text) = text
                    && !keep(text)
                {
                    return out;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_shape_gives_its_readable_reasoning_newest_first() {
        let anthropic = json!({"messages": [
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "first  idea", "signature": "s1"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "ok"}]},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "second idea", "signature": "s2"}]}]});
        assert_eq!(
            readable_reasoning(ApiShape::AnthropicMessages, &anthropic),
            ["second idea", "first idea"]
        );
        let gemini = json!({"contents": [{"role": "model", "parts": [
            {"text": "thought about it", "thought": true, "thoughtSignature": "x"},
            {"text": "answer"}]}]});
        assert_eq!(
            readable_reasoning(ApiShape::Gemini, &gemini),
            ["thought about it"]
        );
        let chat = json!({"messages": [{"role": "assistant", "content": "a",
                                        "reasoning_content": "why a"}]});
        assert_eq!(
            readable_reasoning(ApiShape::ChatCompletions, &chat),
            ["why a"]
        );
        let responses = json!({"input": [{"type": "reasoning", "summary": [
            {"type": "summary_text", "text": "one"}, {"type": "summary_text", "text": "two"}]}]});
        assert_eq!(
            readable_reasoning(ApiShape::Responses, &responses),
            ["two", "one"]
        );
    }

    #[test]
    fn bounded_in_count_and_size() {
        let long = "word ".repeat(1000);
        let input: Vec<Value> = (0..20)
            .map(|i| json!({"type": "reasoning", "summary": [{"text": format!("{i} {long}")}]}))
            .collect();
        let out = readable_reasoning(ApiShape::Responses, &json!({ "input": input }));
        assert_eq!(out.len(), MAX_REASONING_ITEMS);
        assert!(out[0].starts_with("19 word"));
        assert!(
            out.iter()
                .all(|t| t.chars().count() <= MAX_REASONING_CHARS + 1)
        );
        assert!(out[0].ends_with('…'));
    }

    #[test]
    fn odd_shapes_are_passed_over() {
        for body in [
            json!({"input": "plain"}),
            json!({"input": [1, {"type": "reasoning", "summary": "x"}]}),
            json!({"messages": {"role": "assistant"}}),
            json!([]),
        ] {
            for shape in [
                ApiShape::Responses,
                ApiShape::AnthropicMessages,
                ApiShape::Gemini,
                ApiShape::ChatCompletions,
            ] {
                assert!(readable_reasoning(shape, &body).is_empty());
            }
        }
    }
}
