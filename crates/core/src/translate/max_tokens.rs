//! `max_tokens` of a translated request whose client set no `max_output_tokens`.
//!
//! Codex never sends one and the Messages API requires it. The default is generous (a long
//! `apply_patch` must not be cut short) but must stay within the model's output limit, which
//! the API enforces with a 400 (`max_tokens: 32000 > 8192, which is the maximum allowed number
//! of output tokens for claude-3-5-sonnet-20241022`).

/// The default for current Claude models: the output limit of Claude Opus 4 and 4.1, within
/// that of every later model (Sonnet 4 and 4.5, Haiku 4.5, Opus 4.5 and later take 64000) and
/// of Claude 3.7 Sonnet (64000).
pub const DEFAULT_MAX_TOKENS: u64 = 32_000;

/// The default `max_tokens` for `model`: [`DEFAULT_MAX_TOKENS`], or the lower output limit of
/// an older Claude model: 8192 for Claude 3.5 (Sonnet, Haiku), 4096 for Claude 3 (Opus,
/// Sonnet, Haiku). The name is matched as Anthropic, Bedrock and Vertex spell it
/// (`claude-3-5-sonnet-20241022`, `anthropic.claude-3-5-sonnet-20240620-v1:0`,
/// `claude-3-5-haiku@20241022`), case aside.
///
/// ```
/// use context_relay_core::translate::{DEFAULT_MAX_TOKENS, default_max_tokens};
/// assert_eq!(default_max_tokens("claude-sonnet-4-5"), DEFAULT_MAX_TOKENS);
/// assert_eq!(default_max_tokens("claude-3-7-sonnet-latest"), DEFAULT_MAX_TOKENS);
/// assert_eq!(default_max_tokens("anthropic.claude-3-5-sonnet-20240620-v1:0"), 8192);
/// assert_eq!(default_max_tokens("claude-3-haiku-20240307"), 4096);
/// ```
pub fn default_max_tokens(model: &str) -> u64 {
    let named = |family: &str| {
        model
            .as_bytes()
            .windows(family.len())
            .any(|w| w.eq_ignore_ascii_case(family.as_bytes()))
    };
    if named("claude-3-5-") || named("claude-3.5-") {
        8192
    } else if ["claude-3-opus", "claude-3-sonnet", "claude-3-haiku"]
        .iter()
        .any(|f| named(f))
    {
        4096
    } else {
        DEFAULT_MAX_TOKENS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_as_providers_spell_them() {
        for (model, max) in [
            ("claude-3-5-sonnet-20241022", 8192),
            ("claude-3-5-haiku-latest", 8192),
            ("Claude-3-5-Sonnet-20240620", 8192),
            ("claude-3-5-haiku@20241022", 8192),
            ("us.anthropic.claude-3-5-sonnet-20241022-v2:0", 8192),
            ("claude-3-opus-20240229", 4096),
            ("anthropic.claude-3-haiku-20240307-v1:0", 4096),
            ("claude-3-7-sonnet-20250219", DEFAULT_MAX_TOKENS),
            ("claude-opus-4-1", DEFAULT_MAX_TOKENS),
            ("claude-sonnet-4-5", DEFAULT_MAX_TOKENS),
            ("claude-haiku-4-5", DEFAULT_MAX_TOKENS),
            ("", DEFAULT_MAX_TOKENS),
        ] {
            assert_eq!(default_max_tokens(model), max, "{model}");
        }
    }

    proptest! {
        /// Whatever surrounds it, a Claude 3.5 name gets 8192 and a Claude 3 one 4096; a
        /// name with neither in it gets the default.
        #[test]
        fn the_family_decides_wherever_it_stands(
            prefix in "[a-z.:@-]{0,12}",
            suffix in "[a-z0-9.:@-]{0,16}",
        ) {
            prop_assert_eq!(default_max_tokens(&format!("{prefix}claude-3-5-{suffix}")), 8192);
            prop_assert_eq!(default_max_tokens(&format!("{prefix}claude-3-haiku{suffix}")), 4096);
            let other = format!("{prefix}{suffix}");
            if !other.contains("claude-3") {
                prop_assert_eq!(default_max_tokens(&other), DEFAULT_MAX_TOKENS);
            }
        }
    }
}
