//! Which provider API a request speaks.

/// The API shape of a request body (and of the summary request sent for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApiShape {
    /// OpenAI Chat Completions (`POST …/chat/completions`, `messages`).
    ChatCompletions,
    /// OpenAI Responses (`POST …/responses`, `input`), and its compaction endpoint
    /// (`POST …/responses/compact`, the same body).
    Responses,
    /// Anthropic Messages (`POST …/messages`, `messages` + top-level `system`).
    AnthropicMessages,
    /// Google Gemini `generateContent` (`contents`, `systemInstruction`).
    Gemini,
}

impl ApiShape {
    /// The shape a request path names, ignoring any query string.
    ///
    /// `…/messages/count_tokens` is not a conversation turn and gives `None`.
    ///
    /// ```
    /// use context_relay_core::ApiShape;
    /// assert_eq!(ApiShape::from_path("/v1/messages?beta=true"), Some(ApiShape::AnthropicMessages));
    /// assert_eq!(ApiShape::from_path("/v1/responses"), Some(ApiShape::Responses));
    /// assert_eq!(ApiShape::from_path("/v1/models"), None);
    /// ```
    pub fn from_path(path: &str) -> Option<Self> {
        // This runs several times on every request, and paths are short. `Uri::path` gives a
        // path without its query: the common case is one word-at-a-time search for `?` and
        // the suffix checks, with no trimming.
        let path = Self::without_query(path);
        Self::from_bare(path).or_else(|| match path.trim_end_matches('/') {
            trimmed if trimmed.len() < path.len() => Self::from_bare(trimmed),
            _ => None,
        })
    }

    /// `path` up to its query, if it has one: found with core's word-at-a-time search, which
    /// costs less on a path of a few dozen bytes than setting up a vector search.
    ///
    /// ```
    /// use context_relay_core::ApiShape;
    /// assert_eq!(ApiShape::without_query("/v1/messages?beta=true"), "/v1/messages");
    /// assert_eq!(ApiShape::without_query("/v1/responses"), "/v1/responses");
    /// ```
    pub fn without_query(path: &str) -> &str {
        match path.as_bytes().contains(&b'?') {
            true => path.split_once('?').map_or(path, |(path, _)| path),
            false => path,
        }
    }

    /// The shape of a path with no query and no trailing `/`.
    fn from_bare(path: &str) -> Option<Self> {
        if path.ends_with("/chat/completions") {
            Some(Self::ChatCompletions)
        } else if path.ends_with("/responses") || path.ends_with("/responses/compact") {
            Some(Self::Responses)
        } else if path.ends_with("/messages") {
            Some(Self::AnthropicMessages)
        } else if path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent") {
            Some(Self::Gemini)
        } else {
            None
        }
    }

    /// A short lower-case name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ChatCompletions => "chat",
            Self::Responses => "responses",
            Self::AnthropicMessages => "anthropic",
            Self::Gemini => "gemini",
        }
    }
}

impl std::fmt::Display for ApiShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            ApiShape::from_path("/v1/chat/completions"),
            Some(ApiShape::ChatCompletions)
        );
        assert_eq!(ApiShape::from_path("/v1/messages/count_tokens"), None);
        assert_eq!(
            ApiShape::from_path("/v1/responses/compact"),
            Some(ApiShape::Responses)
        );
        assert_eq!(
            ApiShape::from_path("/v1beta/models/gemini-2.5-pro:generateContent"),
            Some(ApiShape::Gemini)
        );
        assert_eq!(ApiShape::from_path("/"), None);
    }

    /// The reading before the common case was made cheap: the query cut off, then every
    /// trailing `/`, then the suffixes.
    fn reference(path: &str) -> Option<ApiShape> {
        let path = match path.bytes().position(|b| b == b'?') {
            Some(query) => &path[..query],
            None => path,
        };
        ApiShape::from_bare(path.trim_end_matches('/'))
    }

    proptest::proptest! {
        /// Any path, with queries and trailing slashes that may name another API, reads as
        /// the reference reads it.
        #[test]
        fn any_path_reads_as_the_reference(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "/v1", "/chat/completions", "/responses", "/compact", "/messages",
                    "/models/g:generateContent", ":streamGenerateContent", "/", "?", "?q=/messages",
                    "x", "",
                ]),
                0..6,
            )
        ) {
            let path = parts.concat();
            proptest::prop_assert_eq!(ApiShape::from_path(&path), reference(&path));
        }
    }
}
