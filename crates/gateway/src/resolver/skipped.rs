//! The targets a route skipped because they cannot serve the request's API shape, as the
//! client is told of them: a header on a provider's error, a note in the gateway's own.

use http::{HeaderName, HeaderValue};

/// The header naming the targets skipped for their API shape on an error the provider wrote
/// (its body is forwarded untouched).
pub(super) const SKIPPED_HEADER: HeaderName = HeaderName::from_static("x-context-relay-skipped");

pub(super) fn skipped_header(skipped: &[String]) -> Option<HeaderValue> {
    if skipped.is_empty() {
        return None;
    }
    HeaderValue::from_str(&skipped.join(", ")).ok()
}

/// What the gateway's own error adds about targets skipped for their API shape: without it,
/// "every account is exhausted" would hide that a later target was never tried.
pub(super) fn skipped_note(skipped: &[String], path: &str) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    format!(
        "; skipped because they cannot serve {path}: {}",
        skipped.join(", ")
    )
}
