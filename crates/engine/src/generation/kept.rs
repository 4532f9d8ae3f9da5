//! The request headers a later summary needs, kept without cloning the whole header map.

use context_relay_core::session::SessionSources;
use http::{HeaderMap, HeaderName, HeaderValue, header};
use smallvec::SmallVec;

/// The name under which a request header is kept for a possible summary of its turn, if it is:
/// the credential (the tenant is derived from it, and stacks forward the client's key), the
/// body's encoding, the session headers, and the API-version and account-routing headers a
/// provider requires on the summary request too. Everything else belongs to the turn and is
/// not repeated.
///
/// Kept under static names (or the configured session headers' own): a static name is cloned
/// for free, while a request's own custom name is a buffer whose first clone allocates.
fn kept(name: &HeaderName, sources: &SessionSources) -> Option<HeaderName> {
    macro_rules! name {
        ($n:literal) => {
            const { HeaderName::from_static($n) }
        };
    }
    Some(match name.as_str() {
        "authorization" => header::AUTHORIZATION,
        "x-api-key" => name!("x-api-key"),
        "x-goog-api-key" => name!("x-goog-api-key"),
        "content-encoding" => header::CONTENT_ENCODING,
        "anthropic-version" => name!("anthropic-version"),
        "anthropic-beta" => name!("anthropic-beta"),
        "openai-beta" => name!("openai-beta"),
        "openai-organization" => name!("openai-organization"),
        "openai-project" => name!("openai-project"),
        "chatgpt-account-id" => name!("chatgpt-account-id"),
        "originator" => name!("originator"),
        "user-agent" => header::USER_AGENT,
        "version" => name!("version"),
        // `DEFAULT_SESSION_HEADERS` (checked in the tests).
        "x-session-id" => name!("x-session-id"),
        "x-claude-code-session-id" => name!("x-claude-code-session-id"),
        "session-id" => name!("session-id"),
        "session_id" => name!("session_id"),
        "conversation_id" => name!("conversation_id"),
        "x-opencode-session" => name!("x-opencode-session"),
        "thread-id" => name!("thread-id"),
        _ => return sources.header_names().iter().find(|k| *k == name).cloned(),
    })
}

/// Headers kept from a request, in a vector with room for a few inline (no allocation for a
/// typical request): built and dropped on every relayed request, turned into a `HeaderMap` only
/// for the rare response that leads to a summary.
#[derive(Debug, Default)]
pub(crate) struct KeptHeaders(SmallVec<[(HeaderName, HeaderValue); 4]>);

impl KeptHeaders {
    /// The kept headers of `headers` (one pass, no full clone).
    pub(crate) fn keep(headers: &HeaderMap, sources: &SessionSources) -> Self {
        let mut out = SmallVec::new();
        for (name, value) in headers {
            if let Some(name) = kept(name, sources) {
                out.push((name, value.clone()));
            }
        }
        Self(out)
    }

    /// As a header map.
    pub(crate) fn into_map(self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.0.len());
        for (name, value) in self.0 {
            map.append(name, value);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use context_relay_core::session;
    use proptest::prelude::*;

    #[test]
    fn every_default_session_header_is_kept() {
        let sources = SessionSources::none();
        for name in context_relay_core::session::DEFAULT_SESSION_HEADERS {
            let name = HeaderName::from_static(name);
            assert_eq!(kept(&name, &sources), Some(name));
        }
    }

    proptest! {
        /// The tenant is derived from the kept headers when a response qualifies: they must
        /// give the credential the whole request gives, whatever headers it has, in any order,
        /// repeated or blank.
        #[test]
        fn kept_headers_give_the_requests_credential(
            pairs in prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "authorization", "x-api-key", "x-goog-api-key", "content-type",
                        "x-session-id", "proxy-authorization", "cookie",
                    ]),
                    prop::sample::select(vec![
                        "Bearer sk-one", "bearer  sk-two ", "Bearer", " ", "Basic dTpw",
                        "sk-three", "AIza-four", "",
                    ]),
                ),
                0..6,
            )
        ) {
            let mut h = HeaderMap::new();
            for (n, v) in pairs {
                h.append(n, HeaderValue::from_static(v));
            }
            let kept = KeptHeaders::keep(&h, &SessionSources::default()).into_map();
            prop_assert_eq!(session::credential(&kept), session::credential(&h));
            prop_assert_eq!(session::tenant(&kept), session::tenant(&h));
        }
    }

    #[test]
    fn keeps_credentials_session_and_api_headers_only() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("authorization", "Bearer k"),
            ("x-goog-api-key", "AIza"),
            ("x-claude-code-session-id", "s"),
            ("anthropic-version", "2023-06-01"),
            ("content-encoding", "zstd"),
            ("x-codex-turn-state", "ts"),
            ("accept", "text/event-stream"),
            ("content-length", "12"),
            ("x-custom-session", "c"),
        ] {
            h.insert(n, v.parse().unwrap());
        }
        let sources =
            SessionSources::default().headers([HeaderName::from_static("x-custom-session")]);
        let kept = KeptHeaders::keep(&h, &sources).into_map();
        let names: Vec<&str> = kept.keys().map(|n| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "authorization",
                "x-goog-api-key",
                "x-claude-code-session-id",
                "anthropic-version",
                "content-encoding",
                "x-custom-session"
            ]
        );
    }
}
