//! Quota signals: "this account is X % used, resets at T", read from response headers and
//! quota error bodies.
//!
//! The generation layer reads a signal off every upstream response to decide whether the
//! serving account is close enough to its limit to write a handoff, and the gateway uses the
//! same signal to rotate accounts. Each provider family has its own module ([`codex`],
//! [`anthropic`], [`openai`], [`ietf`]); [`from_headers`] dispatches on a [`QuotaKind`] and
//! [`from_response`] adds what a 429 or a quota error body says.
//!
//! Nothing here fails: a header that is absent, not UTF-8, not a number, `NaN`, infinite or
//! negative contributes no signal, and a returned `percent_used` is always finite and `≥ 0`.
//!
//! ```
//! use std::time::UNIX_EPOCH;
//! use context_relay_core::quota::{self, QuotaKind};
//!
//! let mut headers = http::HeaderMap::new();
//! headers.insert("x-codex-primary-used-percent", "88".parse().unwrap());
//! headers.insert("x-codex-secondary-used-percent", "20".parse().unwrap());
//! let signal = quota::from_headers(QuotaKind::Auto, &headers, UNIX_EPOCH).unwrap();
//! assert_eq!(signal.percent_used, 0.88);
//!
//! // A 429 means "used up", whatever the headers said.
//! let signal = quota::from_response(
//!     QuotaKind::Auto, http::StatusCode::TOO_MANY_REQUESTS, &headers, None, UNIX_EPOCH,
//! ).unwrap();
//! assert_eq!(signal.percent_used, 1.0);
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};

pub mod anthropic;
mod body;
pub mod codex;
mod gemini;
pub mod ietf;
mod in_band;
pub mod openai;
mod value;

pub use in_band::{limit_in_band, may_be_failure};

/// Account usage read from one response.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaSignal {
    /// Fraction of the quota used: `0.0..=1.0`, may exceed 1 when the provider says so.
    pub percent_used: f64,
    /// When the window that is most used resets, when known.
    pub resets_at: Option<SystemTime>,
    /// Length of that window, when known.
    pub window: Option<Duration>,
}

impl QuotaSignal {
    /// A signal with only a usage fraction.
    pub fn used(percent_used: f64) -> Self {
        Self {
            percent_used,
            resets_at: None,
            window: None,
        }
    }
}

/// Which headers to read a quota signal from.
///
/// The serde and [`FromStr`] names (`auto`, `codex`, `anthropic`, `openai`, `ietf`, `none`) are
/// part of the gateway's configuration format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotaKind {
    /// Try [`Codex`](Self::Codex), [`Anthropic`](Self::Anthropic), [`OpenAi`](Self::OpenAi)
    /// and [`Ietf`](Self::Ietf) in that order; the first that yields a signal wins.
    #[default]
    Auto,
    /// `x-codex-{primary,secondary}-*` (ChatGPT subscription accounts).
    Codex,
    /// `anthropic-ratelimit-*` (unified subscription windows and API-key dimensions).
    Anthropic,
    /// `x-ratelimit-*-{requests,tokens}` (OpenAI API keys).
    OpenAi,
    /// `RateLimit` / `RateLimit-Policy` and the older `RateLimit-*` / `X-RateLimit-*`.
    Ietf,
    /// Read nothing: no signal, not even from a 429.
    None,
}

impl QuotaKind {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Codex => "codex",
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
            Self::Ietf => "ietf",
            Self::None => "none",
        }
    }
}

impl fmt::Display for QuotaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A quota kind name that is not one of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown quota kind `{0}`: expected one of auto, codex, anthropic, openai, ietf, none")]
pub struct UnknownQuotaKind(pub String);

impl FromStr for QuotaKind {
    type Err = UnknownQuotaKind;

    /// Parses a configuration name, ignoring case and surrounding whitespace.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let kinds = [
            Self::Auto,
            Self::Codex,
            Self::Anthropic,
            Self::OpenAi,
            Self::Ietf,
            Self::None,
        ];
        let name = s.trim();
        kinds
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(name))
            .ok_or_else(|| UnknownQuotaKind(s.to_owned()))
    }
}

/// The quota signal in `headers`, read as `kind` says.
pub fn from_headers(kind: QuotaKind, headers: &HeaderMap, now: SystemTime) -> Option<QuotaSignal> {
    match kind {
        QuotaKind::Auto => {
            type Parser = fn(&HeaderMap, SystemTime) -> Option<QuotaSignal>;
            let present = Families::of(headers);
            let run = |on: bool, parse: Parser| if on { parse(headers, now) } else { None };
            run(present.codex, codex::from_headers)
                .or_else(|| run(present.anthropic, anthropic::from_headers))
                .or_else(|| run(present.openai, openai::from_headers))
                .or_else(|| run(present.ietf, ietf::from_headers))
        }
        QuotaKind::Codex => codex::from_headers(headers, now),
        QuotaKind::Anthropic => anthropic::from_headers(headers, now),
        QuotaKind::OpenAi => openai::from_headers(headers, now),
        QuotaKind::Ietf => ietf::from_headers(headers, now),
        QuotaKind::None => None,
    }
}

/// Which header families a response carries, found in one pass over its header names so
/// that `auto` does not look up two dozen absent names on every response (most responses of
/// a gateway carry one family or none).
#[derive(Default)]
struct Families {
    codex: bool,
    anthropic: bool,
    openai: bool,
    ietf: bool,
}

impl Families {
    fn of(headers: &HeaderMap) -> Self {
        let mut found = Self::default();
        for name in headers.keys() {
            // Header names are stored lower-case.
            let name = name.as_str();
            if name.starts_with("x-codex-") {
                found.codex = true;
            } else if name.starts_with("anthropic-ratelimit-") {
                found.anthropic = true;
            } else if let Some(rest) = name.strip_prefix("x-ratelimit-") {
                // `x-ratelimit-limit-tokens` is OpenAI's, `x-ratelimit-limit` the generic form.
                if rest.contains('-') {
                    found.openai = true;
                } else {
                    found.ietf = true;
                }
            } else if name.starts_with("ratelimit") {
                found.ietf = true;
            }
        }
        found
    }
}

/// The quota signal of a whole response: its headers, plus what a 429 status or a quota
/// error body (Codex `usage_limit_reached`, Anthropic `rate_limit_error`, OpenAI
/// `rate_limit_exceeded`, Gemini `RESOURCE_EXHAUSTED`) says.
///
/// Such a response means the account is used up: `percent_used` is at least 1.0 (more when
/// the headers say more). The reset is, in order of preference, the `retry-after-ms` /
/// `retry-after` header (seconds or an HTTP date), the body's `resets_in_seconds` /
/// `resets_at` (Codex) or `google.rpc.RetryInfo` `retryDelay` (Gemini), then the reset of the
/// header signal; when none says, it is `None` and the caller applies its own cool-down.
/// Bodies are only looked at on non-2xx responses: a successful body is the model's answer
/// (possibly a stream), never a quota error. `body` must already be decoded (see
/// [`crate::decode`]).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use context_relay_core::quota::{self, QuotaKind};
///
/// let body = br#"{"error":{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}}"#;
/// let signal = quota::from_response(
///     QuotaKind::Auto, http::StatusCode::TOO_MANY_REQUESTS, &http::HeaderMap::new(), Some(body), UNIX_EPOCH,
/// ).unwrap();
/// assert_eq!(signal.percent_used, 1.0);
/// assert_eq!(signal.resets_at, Some(UNIX_EPOCH + Duration::from_millis(1500)));
/// ```
pub fn from_response(
    kind: QuotaKind,
    status: StatusCode,
    headers: &HeaderMap,
    body: Option<&[u8]>,
    now: SystemTime,
) -> Option<QuotaSignal> {
    if kind == QuotaKind::None {
        return None;
    }
    let from_headers = from_headers(kind, headers, now);
    let body_reset = match body {
        Some(body) if !status.is_success() => body::limit_reached(body, now),
        _ => None,
    };
    if status != StatusCode::TOO_MANY_REQUESTS && body_reset.is_none() {
        return from_headers;
    }
    let resets_at = value::retry_after(headers, now)
        .or(body_reset.flatten())
        .or(from_headers.and_then(|s| s.resets_at));
    Some(QuotaSignal {
        percent_used: from_headers.map_or(1.0, |s| s.percent_used.max(1.0)),
        resets_at,
        window: from_headers.and_then(|s| s.window),
    })
}

/// A header map of static pairs, for the parsers' tests.
#[cfg(test)]
pub(crate) fn test_headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                http::HeaderName::from_static(k),
                http::HeaderValue::from_static(v),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn kind_names_round_trip() {
        for name in ["auto", "codex", "anthropic", "openai", "ietf", "none"] {
            let kind: QuotaKind = name.parse().unwrap();
            assert_eq!(kind.to_string(), name);
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<QuotaKind>(&json).unwrap(), kind);
        }
        assert_eq!(" OpenAI ".parse::<QuotaKind>(), Ok(QuotaKind::OpenAi));
        let err = "open-ai".parse::<QuotaKind>().unwrap_err();
        assert!(err.to_string().contains("`open-ai`"));
        assert!(serde_json::from_str::<QuotaKind>("\"OpenAi\"").is_err());
        assert_eq!(QuotaKind::default(), QuotaKind::Auto);
    }

    #[test]
    fn none_reads_nothing_even_a_429() {
        let h = HeaderMap::new();
        assert_eq!(
            from_response(
                QuotaKind::None,
                StatusCode::TOO_MANY_REQUESTS,
                &h,
                None,
                UNIX_EPOCH
            ),
            None
        );
    }

    #[test]
    fn success_body_is_never_read() {
        let body = br#"{"error":{"type":"usage_limit_reached"}}"#;
        let h = HeaderMap::new();
        assert_eq!(
            from_response(QuotaKind::Auto, StatusCode::OK, &h, Some(body), UNIX_EPOCH),
            None
        );
    }
}
