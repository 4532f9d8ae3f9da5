//! The simulated provider's quota: usage headers on every answer, and the 429 of a used-up
//! account in each API's words.

use axum::body::Body;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use serde_json::json;

use super::{Api, SimBuilder, header_value};

/// Which quota headers the simulated provider sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SimQuotaHeaders {
    /// `x-codex-primary-*` (percent 0..100, window minutes, reset epoch seconds).
    #[default]
    Codex,
    /// `anthropic-ratelimit-unified-5h-*` (fraction 0..1, reset epoch seconds).
    Anthropic,
    /// None (only the 429 tells).
    None,
}

pub(super) fn quota_headers(cfg: &SimBuilder, h: &mut HeaderMap, used: f64, now: u64) {
    let reset = (now + cfg.reset_secs).to_string();
    match cfg.quota_headers {
        SimQuotaHeaders::Codex => {
            h.insert(
                "x-codex-primary-used-percent",
                header_value(&format!("{used:.1}")),
            );
            h.insert(
                "x-codex-primary-window-minutes",
                header_value(&cfg.window_minutes.to_string()),
            );
            h.insert("x-codex-primary-reset-at", header_value(&reset));
        }
        SimQuotaHeaders::Anthropic => {
            h.insert(
                "anthropic-ratelimit-unified-5h-utilization",
                header_value(&format!("{:.3}", used / 100.0)),
            );
            h.insert("anthropic-ratelimit-unified-5h-reset", header_value(&reset));
        }
        SimQuotaHeaders::None => {}
    }
}

pub(super) fn exhausted(cfg: &SimBuilder, api: Api, used: f64, now: u64) -> Response<Body> {
    let body = if api == Api::Messages {
        json!({"type": "error", "error": {"type": "rate_limit_error",
            "message": "This account's rate limit has been reached."}})
    } else {
        json!({"error": {"type": "usage_limit_reached",
            "message": "The usage limit has been reached",
            "resets_in_seconds": cfg.reset_secs}})
    };
    let mut res = Response::new(Body::from(body.to_string()));
    *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    quota_headers(cfg, res.headers_mut(), used, now);
    res
}
