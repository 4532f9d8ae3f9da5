//! Whether a provider rejected a request because of account-bound state, and so whether it is
//! worth sending again with that state removed.
//!
//! Providers bind some request state to the account (or organisation) that minted it:
//! encrypted reasoning, compaction and tool-output blobs, stored response ids, signed thinking
//! blocks. Such state can reach an account that did not mint it even when the relay never saw
//! the session switch (the client came from another gateway, the store was wiped, a
//! digest was forgotten), and the provider answers 400. [`classify`] reads the error body (or
//! the data of an in-band `response.failed` event) and names the kind of state at fault; the
//! caller then removes all account-bound state and retries once, on the same account. Any other
//! error is `None`, and is never retried.
//!
//! Recognised, by code or message (the codes as OpenAI, Anthropic and Google send them):
//!
//! | [`RepairKind`] | error |
//! |---|---|
//! | `EncryptedContent` | code `invalid_encrypted_content`; "The encrypted content … could not be verified." |
//! | `EncryptedOutput` | "Encrypted function output content could not be decrypted or decoded." |
//! | `PreviousResponse` | code `previous_response_not_found`; "Previous response with id '…' not found." |
//! | `ThinkingSignature` | "Invalid \`signature\` in \`thinking\` block", "Invalid \`data\` in \`redacted_thinking\` block", and the rest of that family: a thinking block that cannot be verified, or a final assistant turn that must start with a thinking block |
//! | `ThoughtSignature` | Gemini "Corrupted thought signature.", "Invalid thought signature", "Thought signature is not valid", and a `thought_signature` that is not base64 |
//!
//! ```
//! use context_relay_core::repair::{RepairKind, classify};
//!
//! let openai = br#"{"error":{"message":"The encrypted content gAAA...DQ== could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}"#;
//! assert_eq!(classify(openai), Some(RepairKind::EncryptedContent));
//! let anthropic = br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `signature` in `thinking` block"},"request_id":"req_1"}"#;
//! assert_eq!(classify(anthropic), Some(RepairKind::ThinkingSignature));
//! let other = br#"{"error":{"message":"Unsupported parameter: 'temperature'","type":"invalid_request_error","code":"unsupported_parameter"}}"#;
//! assert_eq!(classify(other), None);
//! ```

use memchr::memmem;

/// Largest error body [`classify`] reads; a longer one is judged by its first bytes.
pub const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Which account-bound state a provider rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepairKind {
    /// Encrypted reasoning or compaction content minted by another account.
    EncryptedContent,
    /// An encrypted tool output minted by another account.
    EncryptedOutput,
    /// A `previous_response_id` the account does not know.
    PreviousResponse,
    /// A thinking block whose signature another account made, or a thinking turn left
    /// incomplete.
    ThinkingSignature,
    /// A Gemini `thoughtSignature` another project (account) or model made.
    ThoughtSignature,
}

impl RepairKind {
    /// A short lower-case name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EncryptedContent => "encrypted_content",
            Self::EncryptedOutput => "encrypted_output",
            Self::PreviousResponse => "previous_response",
            Self::ThinkingSignature => "thinking_signature",
            Self::ThoughtSignature => "thought_signature",
        }
    }
}

impl std::fmt::Display for RepairKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Phrases, in the order they are tried; the first found decides.
const SIGNS: &[(&[u8], RepairKind)] = &[
    (
        b"Encrypted function output content could not be decrypted",
        RepairKind::EncryptedOutput,
    ),
    (b"invalid_encrypted_content", RepairKind::EncryptedContent),
    (b"The encrypted content", RepairKind::EncryptedContent),
    (b"previous_response_not_found", RepairKind::PreviousResponse),
    (b"Previous response with id", RepairKind::PreviousResponse),
    (
        b"Invalid `signature` in `thinking` block",
        RepairKind::ThinkingSignature,
    ),
    (
        b"Invalid signature in thinking block",
        RepairKind::ThinkingSignature,
    ),
    // The opaque payload of a `redacted_thinking` block is bound to its account the same way.
    (
        b"Invalid `data` in `redacted_thinking` block",
        RepairKind::ThinkingSignature,
    ),
    (
        b"Expected `thinking` or `redacted_thinking`",
        RepairKind::ThinkingSignature,
    ),
    (
        b"must start with a thinking block",
        RepairKind::ThinkingSignature,
    ),
    (
        b"thinking` block could not be verified",
        RepairKind::ThinkingSignature,
    ),
    (b"Corrupted thought signature", RepairKind::ThoughtSignature),
    (b"Invalid thought signature", RepairKind::ThoughtSignature),
    (
        b"Thought signature is not valid",
        RepairKind::ThoughtSignature,
    ),
    // A signature that is not base64 at all (one minted by another provider's translation).
    (
        b"thought_signature' (TYPE_BYTES)",
        RepairKind::ThoughtSignature,
    ),
];

/// The kind of account-bound state an error body (or in-band failure event) blames, if any.
pub fn classify(body: &[u8]) -> Option<RepairKind> {
    let body = &body[..body.len().min(ERROR_BODY_LIMIT)];
    // "could not be verified" alone is too vague: it must come with encrypted content.
    SIGNS
        .iter()
        .find(|(sign, _)| memmem::find(body, sign).is_some())
        .map(|(_, kind)| *kind)
        .filter(|kind| {
            *kind != RepairKind::EncryptedContent
                || memmem::find(body, b"invalid_encrypted_content").is_some()
                || memmem::find(body, b"could not be verified").is_some()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Error bodies as the providers send them.
    const REPAIRABLE: &[(&str, RepairKind)] = &[
        (
            r#"{"error":{"message":"The encrypted content gAAA...Rg== could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}"#,
            RepairKind::EncryptedContent,
        ),
        (
            r#"{"error":{"code":"invalid_encrypted_content","message":"The encrypted content for item cmp_34....b7bd could not be verified. Reason: Encrypted content could not be decrypted or parsed.","param":null,"type":"invalid_request_error"}}"#,
            RepairKind::EncryptedContent,
        ),
        (
            r#"{"error":{"message":"Encrypted function output content could not be decrypted or decoded.","type":"invalid_request_error","param":"input","code":"invalid_request_error"}}"#,
            RepairKind::EncryptedOutput,
        ),
        (
            r#"{"error":{"message":"Previous response with id 'resp_0f09a275409' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}"#,
            RepairKind::PreviousResponse,
        ),
        (
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `signature` in `thinking` block"},"request_id":"req_011CUdL49e3Fu9bCKbWF6cXD"}"#,
            RepairKind::ThinkingSignature,
        ),
        (
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.3.content.1: Invalid `data` in `redacted_thinking` block"},"request_id":"req_011CV2bQp7Yt3kRmWq9Zf1aB"}"#,
            RepairKind::ThinkingSignature,
        ),
        (
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.129.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)."}}"#,
            RepairKind::ThinkingSignature,
        ),
        (
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"invalid_encrypted_content","message":"The encrypted content gAAA could not be verified."}}}"#,
            RepairKind::EncryptedContent,
        ),
        (
            "{\n  \"error\": {\n    \"code\": 400,\n    \"message\": \"Corrupted thought signature.\",\n    \"status\": \"INVALID_ARGUMENT\"\n  }\n}\n",
            RepairKind::ThoughtSignature,
        ),
        (
            r#"{"error":{"code":400,"message":"Unable to submit request because Thought signature is not valid.. Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/gemini","status":"INVALID_ARGUMENT"}}"#,
            RepairKind::ThoughtSignature,
        ),
        (
            r#"{"error":{"code":400,"message":"Invalid value at 'contents[1].parts[0].thought_signature' (TYPE_BYTES), Base64 decoding failed for \"msg_01\"","status":"INVALID_ARGUMENT"}}"#,
            RepairKind::ThoughtSignature,
        ),
    ];

    const OTHERS: &[&str] = &[
        r#"{"error":{"message":"Unsupported parameter: 'temperature' is not supported with this model.","type":"invalid_request_error","param":"temperature","code":"unsupported_parameter"}}"#,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 64000 > 32000, which is the maximum allowed"}}"#,
        r#"{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        r#"{"error":{"message":"The signature could not be verified.","type":"invalid_request_error"}}"#,
        // Removing signatures cannot add one the client never sent.
        r#"[{"error":{"code":400,"message":"Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:exec_command` , position 3. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.","status":"INVALID_ARGUMENT"}}]"#,
        "",
        "Bad Request",
    ];

    #[test]
    fn real_bodies() {
        for (body, kind) in REPAIRABLE {
            assert_eq!(classify(body.as_bytes()), Some(*kind), "{body}");
        }
        for body in OTHERS {
            assert_eq!(classify(body.as_bytes()), None, "{body}");
        }
    }

    proptest! {
        #[test]
        fn never_panics_and_noise_is_not_repairable(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let kind = classify(&body);
            if !body.windows(9).any(|w| w == b"encrypted" || w == b"Encrypted") {
                prop_assert!(kind.is_none() || body.windows(8).any(|w| w == b"thinking" || w == b"Previous" || w == b"previous"));
            }
        }
    }
}
