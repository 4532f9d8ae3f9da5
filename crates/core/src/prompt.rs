//! The summary request: the prompt and the request body that carries it, in the API shape of
//! the request that triggered it (DESIGN §4.3).
//!
//! The body is minimal on purpose: one user message, `stream` as the provider needs it,
//! `temperature` [`SUMMARY_TEMPERATURE`] and an output limit of [`SUMMARY_MAX_TOKENS`]. No
//! tools, no system prompt, no reasoning settings: the summary must not start a tool cycle and
//! must not depend on the client's options.
//!
//! | shape | body |
//! |---|---|
//! | Chat Completions | `model`, `messages`, `stream`, `temperature`, `max_tokens` |
//! | Responses | `model`, `input` (one user message item), `stream`, `temperature`, `max_output_tokens`, `store: false` |
//! | Anthropic Messages | `model`, `messages`, `stream`, `temperature`, `max_tokens` |
//! | Gemini | `contents`, `generationConfig {temperature, maxOutputTokens}` |
//!
//! Responses bodies carry `store: false` so the provider does not keep the summary as a stored
//! response (the ChatGPT Codex backend also rejects `store: true`). Gemini takes the model and
//! streaming from the URL (`models/{model}:generateContent` or `:streamGenerateContent`), so
//! its body has neither `model` nor `stream`.
//!
//! ```
//! use context_relay_core::{ApiShape, prompt::summary_request};
//!
//! let body = summary_request(ApiShape::ChatCompletions, "gpt-5", "[1] USER:\nhi", false);
//! let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
//! assert_eq!(v["max_tokens"], 800);
//! assert!(v["messages"][0]["content"].as_str().unwrap().ends_with("[1] USER:\nhi\n</conversation>"));
//! ```

use serde_json::{Value, json};

use crate::api::ApiShape;

/// `temperature` of the summary call: low, so the JSON shape is followed.
pub const SUMMARY_TEMPERATURE: f64 = 0.1;
/// Output token limit of the summary call: room for 200 words plus the lists, with margin.
pub const SUMMARY_MAX_TOKENS: u32 = 800;

/// The summary prompt around a formatted history ([`crate::select::Selection::text`]).
///
/// The history goes last, between `<conversation>` tags, so the instructions cannot be read
/// as part of it.
pub fn summary_prompt(history: &str) -> String {
    const HEAD: &str = "\
You are writing a handoff note. The conversation below is moving to another AI account, which \
will receive your note instead of the full history and must carry on as if nothing changed. \
Capture what that assistant needs to continue seamlessly: the goal, the current state of the \
work, what was decided and why, and what comes next.

Reply with ONE JSON object and nothing else: no markdown, no code fence, no text before or after \
it. Use exactly these keys:
- \"summary\": string, at most 200 words, what matters to continue the work;
- \"keyDecisions\": array of strings, decisions and constraints agreed so far;
- \"taskProgress\": string, what is done, what is pending, and the next step;
- \"activeEntities\": array of strings, the files, features, functions and other identifiers \
in play.

Write the note in the language of the conversation. Here is the conversation:

<conversation>
";
    let mut prompt = String::with_capacity(HEAD.len() + history.len() + 16);
    prompt.push_str(HEAD);
    prompt.push_str(history);
    prompt.push_str("\n</conversation>");
    prompt
}

/// The summary request body, in `shape`, for `model` and `history` (see the module docs).
pub fn summary_request(shape: ApiShape, model: &str, history: &str, stream: bool) -> Vec<u8> {
    let prompt = summary_prompt(history);
    let body: Value = match shape {
        ApiShape::ChatCompletions => json!({
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": stream,
            "temperature": SUMMARY_TEMPERATURE,
            "max_tokens": SUMMARY_MAX_TOKENS,
        }),
        ApiShape::Responses => json!({
            "model": model,
            "input": [{
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": prompt}],
            }],
            "stream": stream,
            "store": false,
            "temperature": SUMMARY_TEMPERATURE,
            "max_output_tokens": SUMMARY_MAX_TOKENS,
        }),
        ApiShape::AnthropicMessages => json!({
            "model": model,
            "max_tokens": SUMMARY_MAX_TOKENS,
            "messages": [{"role": "user", "content": prompt}],
            "stream": stream,
            "temperature": SUMMARY_TEMPERATURE,
        }),
        ApiShape::Gemini => json!({
            "contents": [{"role": "user", "parts": [{"text": prompt}]}],
            "generationConfig": {
                "temperature": SUMMARY_TEMPERATURE,
                "maxOutputTokens": SUMMARY_MAX_TOKENS,
            },
        }),
    };
    // Display of a Value is infallible, unlike `to_vec`'s signature suggests.
    body.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Conversation;

    fn parse(body: &[u8]) -> Value {
        serde_json::from_slice(body).expect("summary request is JSON")
    }

    #[test]
    fn prompt_names_every_key_and_carries_the_history() {
        let p = summary_prompt("[1] USER:\nhello <b>");
        for key in [
            "\"summary\"",
            "\"keyDecisions\"",
            "\"taskProgress\"",
            "\"activeEntities\"",
        ] {
            assert!(p.contains(key), "{key}");
        }
        assert!(p.contains("200 words"));
        assert!(p.contains("ONE JSON object"));
        assert!(p.ends_with("<conversation>\n[1] USER:\nhello <b>\n</conversation>"));
    }

    #[test]
    fn every_shape_carries_temperature_and_limit() {
        let history = "[1] USER:\n\"quoted\" \\ text";
        for shape in [
            ApiShape::ChatCompletions,
            ApiShape::Responses,
            ApiShape::AnthropicMessages,
            ApiShape::Gemini,
        ] {
            for stream in [false, true] {
                let v = parse(&summary_request(shape, "m-1", history, stream));
                let (temp, limit) = match shape {
                    ApiShape::Gemini => (
                        &v["generationConfig"]["temperature"],
                        &v["generationConfig"]["maxOutputTokens"],
                    ),
                    ApiShape::Responses => (&v["temperature"], &v["max_output_tokens"]),
                    _ => (&v["temperature"], &v["max_tokens"]),
                };
                assert_eq!(temp.as_f64(), Some(0.1), "{shape}");
                assert_eq!(limit.as_u64(), Some(800), "{shape}");
                if shape == ApiShape::Gemini {
                    assert!(v.get("stream").is_none());
                    assert!(v.get("model").is_none());
                } else {
                    assert_eq!(v["stream"], stream, "{shape}");
                    assert_eq!(v["model"], "m-1");
                }
                // The body reads back as a one-entry conversation holding the prompt.
                let conv = Conversation::from_value(shape, &v).expect("conversation");
                assert_eq!(conv.len(), 1, "{shape}");
                let entry = &conv.entries()[0];
                assert_eq!(entry.role.as_deref(), Some("user"));
                assert_eq!(entry.text(), summary_prompt(history));
            }
        }
    }

    #[test]
    fn responses_request_is_not_stored() {
        let v = parse(&summary_request(ApiShape::Responses, "gpt-5", "h", true));
        assert_eq!(v["store"], false);
        assert_eq!(v["input"][0]["type"], "message");
        assert!(v.get("max_tokens").is_none());
    }
}
