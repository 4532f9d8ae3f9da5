//! The session id a request's headers give.

use std::borrow::Cow;

use http::{HeaderMap, HeaderName};

use super::{SessionSources, clean_session_id};

/// The session id the headers of a request give, cleaned (see [`clean_session_id`]; borrowed
/// from them unless cleaning changed it), with the header it came from: the first configured
/// session header with a value that is not blank. [`session_id`](super::session_id) tries it first; an adapter
/// that only reads headers on its fast path calls it to avoid an allocation.
///
/// ```
/// use context_relay_core::session::{header_session, SessionSources};
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-session-id", " ".parse().unwrap());
/// headers.insert("thread-id", " t-1 ".parse().unwrap());
/// let sources = SessionSources::default();
/// let (id, name) = header_session(&headers, &sources).unwrap();
/// assert_eq!((&*id, name.as_str()), ("t-1", "thread-id"));
/// ```
pub fn header_session<'h>(
    headers: &'h HeaderMap,
    sources: &'h SessionSources,
) -> Option<(Cow<'h, str>, &'h HeaderName)> {
    // One pass over the request's headers, each name compared with the configured ones (most
    // differ in kind or length at once), instead of a hashed look-up per configured name.
    let names = &sources.headers;
    let mut best: Option<(usize, Cow<'h, str>)> = None;
    for (name, value) in headers {
        let Some(rank) = names.iter().position(|n| n == name) else {
            continue;
        };
        // An earlier name, or an earlier value of this one, already gave an id.
        if best.as_ref().is_some_and(|(b, _)| *b <= rank) {
            continue;
        }
        if let Some(id) = std::str::from_utf8(value.as_bytes())
            .ok()
            .and_then(clean_session_id)
        {
            best = Some((rank, id));
        }
    }
    let (rank, id) = best?;
    Some((id, names.get(rank)?))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// One look-up per configured name, in order: what the single pass must agree with.
    fn by_lookups<'h>(
        headers: &'h HeaderMap,
        sources: &'h SessionSources,
    ) -> Option<(Cow<'h, str>, &'h HeaderName)> {
        sources.headers.iter().find_map(|name| {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| std::str::from_utf8(v.as_bytes()).ok())
                .find_map(clean_session_id)
                .map(|id| (id, name))
        })
    }

    const NAMES: [&str; 6] = [
        "x-session-id",
        "thread-id",
        "session_id",
        "authorization",
        "x-other",
        "content-type",
    ];

    proptest! {
        #[test]
        fn one_pass_finds_what_lookups_find(
            pairs in proptest::collection::vec(
                (0..NAMES.len(), prop_oneof![Just(String::new()), Just("  ".to_owned()), "[ -~]{0,8}"]),
                0..12,
            ),
            configured in proptest::collection::vec(0..NAMES.len(), 0..5),
            opaque in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let mut h = HeaderMap::new();
            for (name, value) in &pairs {
                h.append(NAMES[*name], value.parse().unwrap());
            }
            // A value that is not UTF-8 is skipped by both.
            if let Ok(v) = http::HeaderValue::from_bytes(&[b"s-".as_slice(), &opaque, b"\xff"].concat()) {
                h.append("thread-id", v);
            }
            let sources = SessionSources::none().headers(
                configured.iter().map(|i| HeaderName::from_static(NAMES[*i])),
            );
            prop_assert_eq!(header_session(&h, &sources), by_lookups(&h, &sources));
        }
    }
}
