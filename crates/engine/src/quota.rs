//! Where the quota signal of a response comes from: its headers (per provider dialect), or a
//! source of the application's own.

use std::time::SystemTime;

use context_relay_core::QuotaSignal;
use context_relay_core::quota::{self, QuotaKind};
use http::{HeaderMap, StatusCode};

/// Turns a response's status and headers into a [`QuotaSignal`].
///
/// A [`QuotaSignal`] response extension, set by a service with its own quota pipeline, always
/// wins over the source. Closures `Fn(StatusCode, &HeaderMap, SystemTime) -> Option<QuotaSignal>`
/// are sources too:
///
/// ```
/// use context_relay_engine::{QuotaSignal, QuotaSource};
/// use http::{HeaderMap, StatusCode};
///
/// let source = |status: StatusCode, _: &HeaderMap, _| {
///     (status == StatusCode::TOO_MANY_REQUESTS).then(|| QuotaSignal::used(1.0))
/// };
/// let signal = source.signal(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), std::time::SystemTime::now());
/// assert_eq!(signal.map(|s| s.percent_used), Some(1.0));
/// ```
pub trait QuotaSource: Send + Sync + 'static {
    /// The signal of one response, or `None` when it carries none. Malformed values give
    /// `None`, never an error.
    fn signal(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Option<QuotaSignal>;
}

impl<F> QuotaSource for F
where
    F: Fn(StatusCode, &HeaderMap, SystemTime) -> Option<QuotaSignal> + Send + Sync + 'static,
{
    fn signal(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Option<QuotaSignal> {
        self(status, headers, now)
    }
}

/// The built-in rate-limit header parsers (`auto` tries the Codex usage headers, Anthropic's
/// `anthropic-ratelimit-*`, OpenAI's `x-ratelimit-*`, then the IETF `RateLimit` fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderQuota(pub QuotaKind);

impl Default for HeaderQuota {
    fn default() -> Self {
        Self(QuotaKind::Auto)
    }
}

impl QuotaSource for HeaderQuota {
    fn signal(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Option<QuotaSignal> {
        quota::from_response(self.0, status, headers, None, now)
    }
}
