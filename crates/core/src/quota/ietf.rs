//! IETF `RateLimit` headers (draft-ietf-httpapi-ratelimit-headers) and their common
//! predecessors.
//!
//! Forms read, in this order (the first that yields a signal wins):
//! 1. structured fields: `RateLimit: "default";r=50;t=30` with
//!    `RateLimit-Policy: "default";q=100;w=60` (remaining `r` of quota `q`, reset in `t`
//!    seconds, window `w` seconds; items are matched by name);
//! 2. the earlier dictionary form `RateLimit: limit=100, remaining=50, reset=30`, with an
//!    optional `RateLimit-Policy: 100;w=60` for the window;
//! 3. separate `RateLimit-Limit` / `RateLimit-Remaining` / `RateLimit-Reset`;
//! 4. the same with an `X-` prefix, as many APIs send them.
//!
//! Parsing is deliberately lenient (a small tokenizer rather than a strict RFC 8941 parser):
//! servers in the wild mix the draft versions, and a value we half understand is still better
//! than none. Resets of 10⁹ and more are read as Unix seconds, since some servers send those
//! in the `X-` headers.

use std::time::SystemTime;

use http::HeaderMap;

use super::QuotaSignal;
use super::value::{delta_or_epoch, header, number, seconds, signal, used_of, worst};

/// The IETF-style rate-limit signal.
///
/// ```
/// use std::time::UNIX_EPOCH;
/// use context_relay_core::quota::ietf;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("ratelimit", r#""default";r=25;t=30"#.parse().unwrap());
/// headers.insert("ratelimit-policy", r#""default";q=100;w=60"#.parse().unwrap());
/// assert_eq!(ietf::from_headers(&headers, UNIX_EPOCH).unwrap().percent_used, 0.75);
/// ```
pub fn from_headers(headers: &HeaderMap, now: SystemTime) -> Option<QuotaSignal> {
    let ratelimit = members(headers, "ratelimit");
    let policy = members(headers, "ratelimit-policy");
    structured(&ratelimit, &policy, now)
        .or_else(|| dictionary(&ratelimit, &policy, now))
        .or_else(|| separate(headers, SEPARATE, now))
        .or_else(|| separate(headers, SEPARATE_X, now))
}

/// One list or dictionary member: `name`/`key=value` followed by `;param=value`s.
#[derive(Debug, Default)]
struct Member<'a> {
    /// The key of a dictionary member, or the name of a string/token item.
    name: Option<&'a str>,
    /// The value of a dictionary member or a bare number item.
    value: Option<&'a str>,
    params: Vec<(&'a str, &'a str)>,
}

impl<'a> Member<'a> {
    fn param(&self, key: &str) -> Option<f64> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .and_then(|(_, v)| number(v))
    }
}

/// All members of every field line of `name`.
fn members<'h>(headers: &'h HeaderMap, name: &str) -> Vec<Member<'h>> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| std::str::from_utf8(v.as_bytes()).ok())
        .flat_map(|line| split_outside_quotes(line, b','))
        .filter_map(member)
        .collect()
}

fn member(text: &str) -> Option<Member<'_>> {
    let mut parts = split_outside_quotes(text, b';');
    let head = parts.next()?.trim();
    if head.is_empty() {
        return None;
    }
    let mut m = Member::default();
    match head.split_once('=') {
        Some((k, v)) if !head.starts_with('"') => {
            m.name = Some(k.trim());
            m.value = Some(unquote(v.trim()));
        }
        _ if number(head).is_some() => m.value = Some(head),
        _ => m.name = Some(unquote(head)),
    }
    m.params = parts
        .filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            Some((k.trim(), unquote(v.trim())))
        })
        .collect();
    Some(m)
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
}

/// Splits at `sep` bytes that are not inside a quoted string (policy names may be quoted and,
/// in principle, contain the separators).
fn split_outside_quotes(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut in_quotes = false;
    let mut escaped = false;
    let mut cuts = Vec::new();
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if escaped {
            escaped = false;
        } else if in_quotes && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            in_quotes = !in_quotes;
        } else if b == sep && !in_quotes {
            cuts.push(&s[start..i]);
            start = i + 1;
        }
    }
    cuts.push(&s[start..]);
    cuts.into_iter()
}

fn structured(
    ratelimit: &[Member<'_>],
    policy: &[Member<'_>],
    now: SystemTime,
) -> Option<QuotaSignal> {
    ratelimit
        .iter()
        .filter(|m| m.value.is_none())
        .map(|m| {
            let remaining = m.param("r")?;
            // Match the policy by name; a lone policy applies to a lone, unnamed-or-renamed
            // limit, which is how single-policy servers get the names wrong.
            let matched = policy
                .iter()
                .find(|p| p.value.is_none() && p.name.is_some() && p.name == m.name)
                .or(if policy.len() == 1 {
                    policy.first()
                } else {
                    None
                });
            let quota = matched.and_then(|p| p.param("q"));
            let used = match quota {
                Some(q) => used_of(q, remaining)?,
                // Without a quota only "nothing left" is meaningful.
                None if remaining == 0.0 => 1.0,
                None => return None,
            };
            let reset = m.param("t").and_then(|t| delta_or_epoch(now, t));
            let window = matched.and_then(|p| p.param("w")).and_then(seconds);
            signal(used, reset, window)
        })
        .fold(None, worst)
}

fn dictionary(
    ratelimit: &[Member<'_>],
    policy: &[Member<'_>],
    now: SystemTime,
) -> Option<QuotaSignal> {
    let get = |key: &str| {
        ratelimit
            .iter()
            .find(|m| m.name.is_some_and(|n| n.eq_ignore_ascii_case(key)))
            .and_then(|m| m.value)
            .and_then(number)
    };
    let remaining = get("remaining")?;
    let first_policy = policy.iter().find(|p| p.value.is_some());
    let limit = get("limit").or_else(|| first_policy.and_then(|p| p.value).and_then(number))?;
    let reset = get("reset").and_then(|t| delta_or_epoch(now, t));
    let window = first_policy.and_then(|p| p.param("w")).and_then(seconds);
    signal(used_of(limit, remaining)?, reset, window)
}

/// Limit, remaining and reset headers of the pre-structured-fields forms.
const SEPARATE: [&str; 3] = ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"];
const SEPARATE_X: [&str; 3] = [
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

fn separate(headers: &HeaderMap, names: [&str; 3], now: SystemTime) -> Option<QuotaSignal> {
    let [limit_name, remaining_name, reset_name] = names;
    // `RateLimit-Limit: 100, 100;w=60, 1000;w=3600` (early drafts) lists the current limit
    // first, then the policies; the first member is the one that applies.
    let limit_line = header(headers, limit_name)?;
    let limits: Vec<Member<'_>> = split_outside_quotes(limit_line, b',')
        .filter_map(member)
        .collect();
    let limit = limits.first().and_then(|m| m.value).and_then(number)?;
    let window = limits.iter().find_map(|m| m.param("w")).and_then(seconds);
    let remaining = header(headers, remaining_name).and_then(number)?;
    let reset = header(headers, reset_name)
        .and_then(number)
        .and_then(|t| delta_or_epoch(now, t));
    signal(used_of(limit, remaining)?, reset, window)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    use super::super::test_headers as headers;

    #[test]
    fn structured_worst_policy_wins() {
        let now = UNIX_EPOCH + Duration::from_secs(100);
        let h = headers(&[
            ("ratelimit", r#""burst";r=90;t=1, "daily";r=100;t=3600"#),
            (
                "ratelimit-policy",
                r#""burst";q=100;w=1, "daily";q=1000;w=86400"#,
            ),
        ]);
        let s = from_headers(&h, now).unwrap();
        assert_eq!(s.percent_used, 0.9);
        assert_eq!(s.window, Some(Duration::from_secs(86_400)));
        assert_eq!(s.resets_at, Some(now + Duration::from_secs(3600)));
    }

    #[test]
    fn structured_without_policy_only_reports_exhaustion() {
        let h = headers(&[("ratelimit", r#""default";r=0;t=5"#)]);
        assert_eq!(from_headers(&h, UNIX_EPOCH).unwrap().percent_used, 1.0);
        let h = headers(&[("ratelimit", r#""default";r=3;t=5"#)]);
        assert_eq!(from_headers(&h, UNIX_EPOCH), None);
    }

    #[test]
    fn dictionary_form_with_policy_window() {
        let h = headers(&[
            ("ratelimit", "limit=100, remaining=50, reset=30"),
            ("ratelimit-policy", "100;w=60"),
        ]);
        let s = from_headers(&h, UNIX_EPOCH).unwrap();
        assert_eq!(s.percent_used, 0.5);
        assert_eq!(s.window, Some(Duration::from_secs(60)));
        assert_eq!(s.resets_at, Some(UNIX_EPOCH + Duration::from_secs(30)));
    }

    #[test]
    fn separate_and_x_prefixed() {
        let h = headers(&[
            ("ratelimit-limit", "100, 100;w=60"),
            ("ratelimit-remaining", "20"),
            ("ratelimit-reset", "10"),
        ]);
        let s = from_headers(&h, UNIX_EPOCH).unwrap();
        assert_eq!(s.percent_used, 0.8);
        assert_eq!(s.window, Some(Duration::from_secs(60)));
        let h = headers(&[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1800000000"),
        ]);
        let s = from_headers(&h, UNIX_EPOCH).unwrap();
        assert_eq!(s.percent_used, 1.0);
        assert_eq!(
            s.resets_at,
            Some(UNIX_EPOCH + Duration::from_secs(1_800_000_000))
        );
    }

    #[test]
    fn quoted_separators_do_not_split() {
        let h = headers(&[
            ("ratelimit", r#""a,b;c";r=1"#),
            ("ratelimit-policy", r#""a,b;c";q=4, "other";q=1"#),
        ]);
        assert_eq!(from_headers(&h, UNIX_EPOCH).unwrap().percent_used, 0.75);
    }
}
