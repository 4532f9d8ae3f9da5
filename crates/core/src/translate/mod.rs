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
//! `custom` tools (Codex `apply_patch`) become tools whose input is one string, `input`, and
//! come back as `custom_tool_call` items.
//!
//! The request obeys the Messages rules the real API enforces: the first message is `user`,
//! roles alternate, every `tool_use` is answered by a `tool_result` in the next message, and
//! `tool_result` blocks come first in their message and answer a `tool_use` of the assistant
//! message just before (an answer to nothing becomes plain text).
//!
//! ```
//! use context_relay_core::translate::{RequestOptions, responses_to_messages};
//! let body = br#"{"model":"gpt-5.5","instructions":"Be terse.","input":"say hi",
//!     "store":false,"reasoning":{"effort":"medium"}}"#;
//! let t = responses_to_messages(body, &RequestOptions::new("claude-sonnet-4-5")).unwrap();
//! let v: serde_json::Value = serde_json::from_slice(&t.body).unwrap();
//! assert_eq!(v["system"], "Be terse.");
//! assert_eq!(v["messages"][0]["role"], "user");
//! assert_eq!(v["max_tokens"], 8192);
//! assert!(v.get("store").is_none() && v.get("reasoning").is_none());
//! ```

mod compact;
mod error;
mod request;
mod response;
mod sequence;
mod stream;
#[cfg(test)]
mod tests;

pub use compact::{
    COMPACTION_PROMPT, CompactionRequest, SUMMARY_PREFIX, compaction_turn, messages_to_compaction,
};
pub use error::{
    CONTEXT_LENGTH_EXCEEDED, ResponsesError, SERVER_IS_OVERLOADED, messages_error_to_responses,
    responses_error_code,
};
pub use request::{RequestOptions, Translated, responses_to_messages};
pub use response::{ResponseContext, messages_to_response};
pub use stream::StreamTranslator;

/// `max_tokens` of a translated request whose client set no `max_output_tokens` (the Messages
/// API requires one; 8192 is within the output limit of every current Claude model).
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

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
