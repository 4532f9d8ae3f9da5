//! Translation between the OpenAI Responses API and the Anthropic Messages API, as pure
//! functions: a Responses request becomes a Messages request, and the Messages answer (a JSON
//! body, an SSE stream or an error body) becomes the Responses answer the client expects.
//!
//! The gateway uses it when a combo moves a Responses client (Codex CLI, the OpenAI SDK) to a
//! provider that speaks only Anthropic Messages. It runs below the relay layers, so the relay
//! keeps seeing the client's own shape; translation only changes what goes on the wire.
//!
//! What a Messages request cannot carry is dropped and listed in [`Translated::dropped`]:
//! `reasoning` items and every other piece of Responses state (`encrypted_content`,
//! `previous_response_id`, `include`, `store`, `prompt_cache_key`, compaction items), the
//! Responses-only parameters (`reasoning`, `text`, `truncation`, `metadata`, …) and tools that
//! are not functions (`web_search`, `local_shell`, `tool_search`, namespaces). Freeform
//! `custom` tools (Codex `apply_patch`) become tools whose input is one string, `input`, with
//! their grammar (`format`) appended to the description, and come back as `custom_tool_call`
//! items.
//!
//! - **System prompt.** `instructions` (a string or an array of messages) and every
//!   `developer` or `system` message become the Messages `system`, in order. Messages has no
//!   developer turn, so a developer message in the middle of the conversation also moves to
//!   `system`: the model reads it before the whole conversation rather than at its place.
//! - **Prompt caching.** `system` is sent as a text block, and cache breakpoints
//!   (`cache_control: {"type": "ephemeral"}`) mark the last tool, the system block and the last
//!   block of the last user message: three, within the API's limit of four, so each turn reads
//!   the previous turn's prefix from the cache.
//! - **Tool results** keep their content parts: an output given as an array becomes the
//!   `tool_result`'s text and image blocks (`input_image` with a `data:` URL as a base64
//!   source, with an http(s) URL as a URL source).
//! - **Tool ids** are cleaned to the characters Messages allows; two call ids that clean to
//!   the same id get distinct ones (a suffix), consistently for the call and its output.
//! - **`tool_choice`** naming a tool that is not in the translated list becomes `auto`.
//! - **Sampling.** Current Claude models refuse `temperature` together with `top_p`, and a
//!   temperature outside `0..=1`: `top_p` is left out when both are given, and both are
//!   clamped to `0..=1`.
//! - **`max_tokens`** is the client's `max_output_tokens`, else
//!   [`RequestOptions::default_max_tokens`] (the target model's [`default_max_tokens`]:
//!   [`DEFAULT_MAX_TOKENS`], less for older Claude models, unless the provider sets its own).
//!
//! The request obeys the Messages rules the real API enforces: the first message is `user`,
//! roles alternate, every `tool_use` is answered by a `tool_result` in the next message, and
//! `tool_result` blocks come first in their message and answer a `tool_use` of the assistant
//! message just before (an answer to nothing becomes plain text); tool ids are unique; no
//! text block is empty or only whitespace, and a final assistant message does not end with
//! whitespace. A request left with no tool (its history calling only tools that were
//! dropped, such as `web_search`) carries its calls and their results as text, since the API
//! refuses `tool_use` and `tool_result` blocks in a request without tools.
//!
//! ```
//! use context_relay_core::translate::{RequestOptions, responses_to_messages};
//! let body = br#"{"model":"gpt-5.5","instructions":"Be terse.","input":"say hi",
//!     "store":false,"reasoning":{"effort":"medium"}}"#;
//! let t = responses_to_messages(body, &RequestOptions::new("claude-sonnet-4-5")).unwrap();
//! let v: serde_json::Value = serde_json::from_slice(&t.body).unwrap();
//! assert_eq!(v["system"][0]["text"], "Be terse.");
//! assert_eq!(v["system"][0]["cache_control"]["type"], "ephemeral");
//! assert_eq!(v["messages"][0]["role"], "user");
//! assert_eq!(v["max_tokens"], 32000);
//! assert!(v.get("store").is_none() && v.get("reasoning").is_none());
//! assert!(t.dropped.contains(&"reasoning".to_owned()));
//! ```

mod compact;
mod error;
mod max_tokens;
mod request;
mod response;
mod sequence;
mod stream;
#[cfg(test)]
mod tests;
mod tools;

pub use compact::{
    COMPACTION_PROMPT, CompactionRequest, SUMMARY_PREFIX, compaction_turn, messages_to_compaction,
};
pub use error::{
    CONTEXT_LENGTH_EXCEEDED, ResponsesError, SERVER_IS_OVERLOADED, messages_error_to_responses,
    responses_error_code,
};
pub use max_tokens::{DEFAULT_MAX_TOKENS, default_max_tokens};
pub use request::{RequestOptions, Translated, responses_to_messages};
pub use response::{ResponseContext, messages_to_response};
pub use stream::StreamTranslator;

/// Why a body could not be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// The body is not a JSON object.
    #[error("the request body is not a JSON object: {0}")]
    NotAnObject(String),
    /// A field has a type the API does not allow.
    #[error("`{field}` must be {expected}")]
    BadField {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
}
