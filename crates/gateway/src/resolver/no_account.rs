//! The gateway's own answers when no account is left for a request: every account refused
//! (a 502) or exhausted (a 429 that says when one comes back).

use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Either;

use super::own_error;
use super::skipped::skipped_note;
use crate::error::{ErrorKind, ErrorShape, error_response_as, with_retry_info};
use crate::peek::Peeked;
use crate::pool::ProviderPool;

/// The longest wait for an account (seconds) the gateway's own 429 calls a rate limit: a
/// per-minute limit resets within it, and clients retry through it; a longer one is a used-up
/// quota window ([`ErrorKind::UsageLimit`]).
pub(super) const RETRY_REACH_SECS: u64 = 60;

/// The 429 of a request every account of `providers_seen` is exhausted for, with the wait for
/// the first to come back in `retry-after` and the message.
pub(super) fn exhausted_everywhere<B>(
    client_path: &str,
    providers_seen: &[Arc<ProviderPool>],
    skipped_shape: &[String],
) -> Response<Either<B, Peeked<B>>> {
    let now = SystemTime::now();
    let names: Vec<&str> = providers_seen.iter().map(|p| &**p.name()).collect();
    let next = providers_seen
        .iter()
        .filter_map(|p| p.next_reset(now))
        .min();
    let wait = next
        .and_then(|t| t.duration_since(now).ok())
        .map_or(60, |d| d.as_secs().max(1));
    // A wait past what a client's retries reach is a used-up quota window, not a rate limit.
    let kind = match wait > RETRY_REACH_SECS {
        true => ErrorKind::UsageLimit,
        false => ErrorKind::RateLimited,
    };
    let shape = ErrorShape::for_path(client_path);
    let mut res = error_response_as(
        shape,
        StatusCode::TOO_MANY_REQUESTS,
        kind.name(shape),
        &format!(
            "every account of {} is exhausted; the next one becomes available in about {wait} s{}",
            if names.is_empty() {
                "the route".to_owned()
            } else {
                names.join(", ")
            },
            skipped_note(skipped_shape, client_path)
        ),
        |body| {
            let body = match shape {
                ErrorShape::Gemini => with_retry_info(body, wait),
                _ => body,
            };
            Either::Right(Peeked::full(body))
        },
    );
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(wait));
    res
}

/// The 502 of a request no account could serve because the provider refused every one's
/// credential, or no login could be refreshed. Relaying the provider's 401/403 would tell the
/// client its own key is wrong.
pub(super) fn refused_everywhere<B>(
    client_path: &str,
    skipped_shape: &[String],
) -> Response<Either<B, Peeked<B>>> {
    own_error(
        client_path,
        StatusCode::BAD_GATEWAY,
        ErrorKind::Upstream,
        &format!(
            "no account that could serve this request has a credential the provider accepts: refused keys, or logins refused or failing to refresh; the gateway's operator must check the account keys and logins (the gateway's log names each){}",
            skipped_note(skipped_shape, client_path)
        ),
    )
}
