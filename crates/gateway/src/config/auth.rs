//! `auth`: how a provider's accounts authenticate upstream.

use serde::Deserialize;

/// How the account credential is sent upstream: an API key in a header, or a subscription
/// login's access token (accounts with `credentials`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum AuthScheme {
    /// `Authorization: Bearer <key>` (OpenAI, Codex).
    #[default]
    #[serde(rename = "bearer")]
    Bearer,
    /// `x-api-key: <key>` (Anthropic).
    #[serde(rename = "x-api-key")]
    XApiKey,
    /// `x-goog-api-key: <key>` (Gemini API).
    #[serde(rename = "x-goog-api-key")]
    XGoogApiKey,
    /// A ChatGPT login of Codex CLI (`auth.json`): `Authorization: Bearer <access token>` and
    /// `chatgpt-account-id`, for the ChatGPT Codex backend.
    #[serde(rename = "chatgpt")]
    Chatgpt,
    /// A Claude Pro/Max login of Claude Code (`.credentials.json`): `Authorization: Bearer
    /// <access token>` and the `oauth-2025-04-20` beta added to the client's `anthropic-beta`.
    #[serde(rename = "claude-oauth")]
    ClaudeOauth,
}

impl AuthScheme {
    /// Whether accounts log in with `credentials` (rather than an API key).
    ///
    /// ```
    /// use context_relay_gateway::config::AuthScheme;
    /// assert!(AuthScheme::Chatgpt.is_login() && !AuthScheme::XApiKey.is_login());
    /// ```
    pub fn is_login(self) -> bool {
        matches!(self, Self::Chatgpt | Self::ClaudeOauth)
    }

    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bearer => "bearer",
            Self::XApiKey => "x-api-key",
            Self::XGoogApiKey => "x-goog-api-key",
            Self::Chatgpt => "chatgpt",
            Self::ClaudeOauth => "claude-oauth",
        }
    }
}
