//! The upstream URL of a client request, and the paths that are refused instead of forwarded.

use std::borrow::Cow;
use std::sync::OnceLock;

use bytes::Bytes;
use http::Uri;
use smallvec::SmallVec;

/// An upstream URL as it is written: inline up to the length nearly every provider URL stays
/// under, on the heap past it.
type Url = SmallVec<[u8; 192]>;

/// A provider's base URL, with the upstream URLs of the proxy's API paths made once each.
///
/// A request to one of the paths the proxy serves without parameters (`/v1/chat/completions`,
/// `/v1/responses`, `/v1/messages`, …) and without a query has the same upstream URL every
/// time: it is written and parsed on the first such request and shared after that (a copy of
/// a [`Uri`] is reference counts on its bytes), where each request wrote and parsed its own
/// (one allocation and a parse of the URL). Any other request's URL is made for it.
pub(crate) struct BaseUrl {
    /// Without a trailing `/`.
    url: Box<str>,
    made: [OnceLock<Uri>; crate::routes::PROXY_PATHS.len()],
}

impl BaseUrl {
    /// `url`, a provider's configured base URL.
    pub(crate) fn new(url: &str) -> Self {
        Self {
            url: url.trim_end_matches('/').into(),
            made: Default::default(),
        }
    }

    /// The base URL, without a trailing `/`.
    pub(crate) fn as_str(&self) -> &str {
        &self.url
    }

    /// The upstream URL of `client` (see [`upstream_uri`]).
    pub(crate) fn uri_for(&self, client: &Uri) -> Result<Uri, http::uri::InvalidUri> {
        let slot = match client.query() {
            None => crate::routes::proxy_path_index(client.path()).and_then(|i| self.made.get(i)),
            Some(_) => None,
        };
        let Some(slot) = slot else {
            return upstream_uri(&self.url, client);
        };
        if let Some(made) = slot.get() {
            return Ok(made.clone());
        }
        let made = upstream_uri(&self.url, client)?;
        Ok(slot.get_or_init(|| made).clone())
    }
}

impl std::fmt::Debug for BaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BaseUrl")
            .field(&crate::secret::redact_url(&self.url))
            .finish()
    }
}

/// Whether a request path has a `.` or `..` segment, as sent or percent-encoded (`%2e%2E`,
/// `..%2F`): such a path could name another resource of the provider once it resolves it, so it
/// is refused instead of forwarded.
pub(crate) fn has_dot_segment(path: &str) -> bool {
    // A dot is sent as `.` or encoded with `%`: a path with neither has no dot segment.
    if !path.bytes().any(|b| b == b'.' || b == b'%') {
        return false;
    }
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    decoded
        .split(['/', '\\'])
        .any(|segment| segment == "." || segment == "..")
}

/// `query` without its `key` parameters (a client credential some clients put there), or
/// `None` when it has none; other parameters keep their order and spelling. A name is read
/// decoded, as a provider reads it: `%6Bey` and `ke%79` are `key` too.
fn without_query_key(query: &str) -> Option<String> {
    let is_key = |pair: &str| {
        url::form_urlencoded::parse(pair.as_bytes())
            .next()
            .is_some_and(|(name, _)| name == context_relay_core::session::QUERY_CREDENTIAL)
    };
    if !query.split('&').any(is_key) {
        return None;
    }
    let kept: Vec<&str> = query.split('&').filter(|p| !is_key(p)).collect();
    Some(kept.join("&"))
}

/// The upstream URL of a client request: `base_url` + the path after `/v1` (or `/v1beta`) +
/// the query, without a `key` parameter (the provider's credential goes in a header; a
/// client's key never leaves the gateway).
pub(crate) fn upstream_uri(base_url: &str, client: &Uri) -> Result<Uri, http::uri::InvalidUri> {
    let path = client.path();
    // Gemini clients name their API version `v1beta` as well as `v1`.
    let rest = match path
        .strip_prefix("/v1beta")
        .or_else(|| path.strip_prefix("/v1"))
    {
        Some(r) if r.is_empty() || r.starts_with('/') => r,
        _ => path,
    };
    // Written into one buffer that becomes the URI's shared owner: the URI's parts, and the
    // copy hyper-util's client takes of it, are reference counts on it. A `String` made its
    // shared handle in a second allocation.
    let mut url = Url::new();
    url.extend_from_slice(base_url.trim_end_matches('/').as_bytes());
    url.extend_from_slice(rest.as_bytes());
    // A query left empty by taking the key out goes; one the client sent empty stays.
    let query = client.query().and_then(|q| match without_query_key(q) {
        None => Some(Cow::Borrowed(q)),
        Some(kept) if kept.is_empty() => None,
        Some(kept) => Some(Cow::Owned(kept)),
    });
    if let Some(q) = query {
        url.push(b'?');
        url.extend_from_slice(q.as_bytes());
    }
    Uri::from_maybe_shared(Bytes::from_owner(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris() {
        let u = |s: &str| s.parse::<Uri>().unwrap();
        for (base, path, expected) in [
            (
                "http://h:1/v1/",
                "/v1/chat/completions",
                "http://h:1/v1/chat/completions",
            ),
            (
                "https://chatgpt.example/backend-api/codex",
                "/v1/responses",
                "https://chatgpt.example/backend-api/codex/responses",
            ),
            ("http://h", "/v1x/other?a=1&b", "http://h/v1x/other?a=1&b"),
            // A client's `key` never goes upstream, whatever the route.
            (
                "http://h/v1",
                "/v1/messages?key=secret",
                "http://h/v1/messages",
            ),
            (
                "http://h/v1",
                "/v1/messages?beta=true&key=s&keys=1",
                "http://h/v1/messages?beta=true&keys=1",
            ),
            // An empty query the client sent stays; one emptied by taking the key out goes.
            ("http://h/v1", "/v1/messages?", "http://h/v1/messages?"),
            ("http://h/v1", "/v1/messages?key=s", "http://h/v1/messages"),
            // Spelled with escapes, it is the same parameter to a provider that decodes names.
            (
                "http://h/v1",
                "/v1/messages?%6Bey=s&beta=true&ke%79=t&k%65y2=u",
                "http://h/v1/messages?beta=true&k%65y2=u",
            ),
            (
                "http://h/v1",
                "/v1/messages?%6b%65%79=s",
                "http://h/v1/messages",
            ),
        ] {
            assert_eq!(upstream_uri(base, &u(path)).unwrap(), expected, "{path}");
        }
        // Past the inline buffer the URL is written on the heap, the same.
        let long = format!(
            "/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse&x={}",
            "q".repeat(300)
        );
        let uri = upstream_uri("https://generativelanguage.example/v1beta", &u(&long)).unwrap();
        assert_eq!(
            uri.to_string(),
            format!("https://generativelanguage.example/v1beta{}", &long[3..])
        );
        assert_eq!(uri.host(), Some("generativelanguage.example"));
        assert_eq!(uri.clone(), uri, "a copy reads the same bytes");
    }

    #[test]
    fn dot_segments() {
        for path in [
            "/v1/models/../../admin:generateContent",
            "/v1/models/..%2F..%2Fadmin:generateContent",
            "/v1/%2e%2E/x",
            "/v1/./x",
            "/v1/a\\..\\b",
        ] {
            assert!(has_dot_segment(path), "{path}");
        }
        for path in [
            "/v1/chat/completions",
            "/v1/models/gemini-2.5-pro:generateContent",
            "/v1/a..b/c.",
        ] {
            assert!(!has_dot_segment(path), "{path}");
        }
    }

    proptest::proptest! {
        /// The shortcut for a path with no `.` and no `%` answers what decoding it answers.
        #[test]
        fn dot_segments_shortcut_agrees_with_decoding(
            parts in proptest::collection::vec(
                proptest::sample::select(vec!["/", "\\", ".", "%2e", "%2E", "%2F", "%", "a"]),
                0..8,
            )
        ) {
            let path = parts.concat();
            let decoded = percent_encoding::percent_decode_str(&path).decode_utf8_lossy();
            let decoding = decoded.split(['/', '\\']).any(|s| s == "." || s == "..");
            proptest::prop_assert_eq!(has_dot_segment(&path), decoding);
        }
    }

    proptest::proptest! {
        /// A base URL's URL of a client request is the one made for it, whether the request
        /// is the first to its path or a later one, with or without a query.
        #[test]
        fn a_made_url_is_the_one_made_for_the_request(
            base in proptest::sample::select(vec!["http://h:1/v1/", "https://x.example/api", "http://h"]),
            paths in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "/v1/chat/completions", "/v1/responses", "/v1/messages",
                        "/v1/messages/count_tokens", "/v1/responses/compact", "/v1/other",
                        "/v1beta/models/g:generateContent",
                    ]),
                    proptest::option::of(proptest::sample::select(vec!["", "beta=true", "key=k"])),
                ),
                1..12,
            ),
        ) {
            let made = BaseUrl::new(base);
            for (path, query) in paths {
                let client: Uri = match query {
                    Some(q) => format!("{path}?{q}"),
                    None => path.to_owned(),
                }
                .parse()
                .unwrap();
                let expected = upstream_uri(base, &client).unwrap();
                let uri = made.uri_for(&client).unwrap();
                proptest::prop_assert_eq!(&uri, &expected);
                proptest::prop_assert_eq!(uri.to_string(), expected.to_string());
            }
        }
    }

    #[test]
    fn a_proxy_path_without_a_query_is_made_once() {
        let base = BaseUrl::new("http://h:1/v1/");
        let chat: Uri = "/v1/chat/completions".parse().unwrap();
        let first = base.uri_for(&chat).unwrap();
        let again = base.uri_for(&chat).unwrap();
        assert_eq!(first, "http://h:1/v1/chat/completions");
        // The same bytes: the second is a copy of the first, not written again.
        assert_eq!(
            first.path_and_query().map(|p| p.as_str().as_ptr()),
            again.path_and_query().map(|p| p.as_str().as_ptr())
        );
        let queried: Uri = "/v1/chat/completions?x=1".parse().unwrap();
        let other = base.uri_for(&queried).unwrap();
        assert_eq!(other, "http://h:1/v1/chat/completions?x=1");
        assert_eq!(base.uri_for(&chat).unwrap(), first);
        assert_eq!(format!("{base:?}"), "BaseUrl(\"http://h:1/v1\")");
    }

    #[test]
    fn upstream_uri_example() {
        let uri: http::Uri = "/v1/messages?beta=true".parse().unwrap();
        assert_eq!(
            upstream_uri("https://api.example/v1", &uri).unwrap(),
            "https://api.example/v1/messages?beta=true"
        );
    }
}
