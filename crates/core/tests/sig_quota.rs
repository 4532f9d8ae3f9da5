//! Quota signals from realistic provider header sets and 429 / quota error responses.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use context_relay_core::quota::{self, QuotaKind, QuotaSignal};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use proptest::prelude::*;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_790_000_000)
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            )
        })
        .collect()
}

fn at(secs: u64) -> Option<SystemTime> {
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

fn codex_headers() -> HeaderMap {
    headers(&[
        ("x-codex-primary-used-percent", "88"),
        ("x-codex-primary-window-minutes", "300"),
        ("x-codex-primary-reset-at", "1790003600"),
        ("x-codex-primary-reset-after-seconds", "3600"),
        ("x-codex-secondary-used-percent", "20"),
        ("x-codex-secondary-window-minutes", "10080"),
        ("x-codex-secondary-reset-at", "1790400000"),
        ("x-codex-primary-over-secondary-limit-percent", "0"),
    ])
}

#[test]
fn codex_primary_most_used_wins() {
    for kind in [QuotaKind::Auto, QuotaKind::Codex] {
        let s = quota::from_headers(kind, &codex_headers(), now()).unwrap();
        assert_eq!(s.percent_used, 0.88);
        assert_eq!(s.resets_at, at(1_790_003_600));
        assert_eq!(s.window, Some(Duration::from_secs(300 * 60)));
    }
    // The other parsers do not read Codex headers.
    assert_eq!(
        quota::from_headers(QuotaKind::OpenAi, &codex_headers(), now()),
        None
    );
}

#[test]
fn codex_relative_reset_when_no_absolute_one() {
    let h = headers(&[
        ("x-codex-primary-used-percent", "50"),
        ("x-codex-primary-reset-after-seconds", "90"),
    ]);
    let s = quota::from_headers(QuotaKind::Codex, &h, now()).unwrap();
    assert_eq!(s.resets_at, Some(now() + Duration::from_secs(90)));
}

#[test]
fn openai_tokens_dimension() {
    let h = headers(&[
        ("x-ratelimit-limit-requests", "500"),
        ("x-ratelimit-remaining-requests", "499"),
        ("x-ratelimit-reset-requests", "120ms"),
        ("x-ratelimit-limit-tokens", "1000"),
        ("x-ratelimit-remaining-tokens", "100"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ]);
    for kind in [QuotaKind::Auto, QuotaKind::OpenAi] {
        let s = quota::from_headers(kind, &h, now()).unwrap();
        assert!((s.percent_used - 0.9).abs() < 1e-12);
        assert_eq!(s.resets_at, Some(now() + Duration::from_secs(360)));
        assert_eq!(s.window, None);
    }
}

#[test]
fn anthropic_unified_subscription() {
    let h = headers(&[
        ("anthropic-ratelimit-unified-status", "allowed_warning"),
        ("anthropic-ratelimit-unified-5h-status", "allowed_warning"),
        ("anthropic-ratelimit-unified-5h-utilization", "0.91"),
        ("anthropic-ratelimit-unified-5h-reset", "1790010000"),
        ("anthropic-ratelimit-unified-7d-status", "allowed"),
        ("anthropic-ratelimit-unified-7d-utilization", "0.35"),
        ("anthropic-ratelimit-unified-7d-reset", "1790500000"),
        (
            "anthropic-ratelimit-unified-representative-claim",
            "five_hour",
        ),
        ("anthropic-ratelimit-unified-reset", "1790010000"),
    ]);
    for kind in [QuotaKind::Auto, QuotaKind::Anthropic] {
        let s = quota::from_headers(kind, &h, now()).unwrap();
        assert_eq!(s.percent_used, 0.91);
        assert_eq!(s.resets_at, at(1_790_010_000));
        assert_eq!(s.window, Some(Duration::from_secs(5 * 3600)));
    }
}

#[test]
fn anthropic_unified_rfc3339_reset_and_overdraw() {
    let h = headers(&[
        ("anthropic-ratelimit-unified-5h-utilization", "0.2"),
        ("anthropic-ratelimit-unified-7d-utilization", "1.07"),
        (
            "anthropic-ratelimit-unified-7d-reset",
            "2026-09-21T10:00:00Z",
        ),
    ]);
    let s = quota::from_headers(QuotaKind::Anthropic, &h, now()).unwrap();
    assert_eq!(s.percent_used, 1.07);
    assert_eq!(s.resets_at, at(1_789_984_800));
}

#[test]
fn anthropic_api_key_worst_dimension() {
    let h = headers(&[
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "49"),
        ("anthropic-ratelimit-requests-reset", "2026-09-21T10:00:01Z"),
        ("anthropic-ratelimit-tokens-limit", "100000"),
        ("anthropic-ratelimit-tokens-remaining", "40000"),
        ("anthropic-ratelimit-tokens-reset", "2026-09-21T10:00:30Z"),
        ("anthropic-ratelimit-input-tokens-limit", "80000"),
        ("anthropic-ratelimit-input-tokens-remaining", "20000"),
        (
            "anthropic-ratelimit-input-tokens-reset",
            "2026-09-21T10:00:20Z",
        ),
        ("anthropic-ratelimit-output-tokens-limit", "20000"),
        ("anthropic-ratelimit-output-tokens-remaining", "19000"),
        (
            "anthropic-ratelimit-output-tokens-reset",
            "2026-09-21T10:00:05Z",
        ),
    ]);
    let s = quota::from_headers(QuotaKind::Auto, &h, now()).unwrap();
    assert_eq!(s.percent_used, 0.75);
    assert_eq!(s.resets_at, at(1_789_984_820));
}

#[test]
fn ietf_structured_and_dictionary_forms() {
    let structured = headers(&[
        ("ratelimit", r#""default";r=50;t=30"#),
        ("ratelimit-policy", r#""default";q=100;w=60"#),
    ]);
    let dictionary = headers(&[("ratelimit", "limit=100, remaining=50, reset=30")]);
    for h in [structured, dictionary] {
        for kind in [QuotaKind::Auto, QuotaKind::Ietf] {
            let s = quota::from_headers(kind, &h, now()).unwrap();
            assert_eq!(s.percent_used, 0.5);
            assert_eq!(s.resets_at, Some(now() + Duration::from_secs(30)));
        }
    }
    let s = quota::from_headers(
        QuotaKind::Ietf,
        &headers(&[
            ("ratelimit", r#""default";r=50;t=30"#),
            ("ratelimit-policy", r#""default";q=100;w=60"#),
        ]),
        now(),
    )
    .unwrap();
    assert_eq!(s.window, Some(Duration::from_secs(60)));
}

#[test]
fn ietf_separate_headers() {
    let h = headers(&[
        ("RateLimit-Limit", "10"),
        ("RateLimit-Remaining", "1"),
        ("RateLimit-Reset", "7"),
    ]);
    let s = quota::from_headers(QuotaKind::Auto, &h, now()).unwrap();
    assert!((s.percent_used - 0.9).abs() < 1e-12);
    assert_eq!(s.resets_at, Some(now() + Duration::from_secs(7)));
}

#[test]
fn auto_takes_the_first_family_that_answers() {
    let mut h = codex_headers();
    h.extend(headers(&[
        ("x-ratelimit-limit-tokens", "10"),
        ("x-ratelimit-remaining-tokens", "0"),
    ]));
    assert_eq!(
        quota::from_headers(QuotaKind::Auto, &h, now())
            .unwrap()
            .percent_used,
        0.88
    );
    assert_eq!(
        quota::from_headers(QuotaKind::OpenAi, &h, now())
            .unwrap()
            .percent_used,
        1.0
    );
}

#[test]
fn malformed_values_give_no_signal() {
    let sets: Vec<HeaderMap> = vec![
        headers(&[("x-codex-primary-used-percent", "eighty")]),
        headers(&[("x-codex-primary-used-percent", "NaN")]),
        headers(&[("x-codex-primary-used-percent", "inf")]),
        headers(&[("x-codex-secondary-used-percent", "-5")]),
        headers(&[("anthropic-ratelimit-unified-5h-utilization", "")]),
        headers(&[
            ("x-ratelimit-limit-tokens", "-1"),
            ("x-ratelimit-remaining-tokens", "-1"),
        ]),
        headers(&[
            ("x-ratelimit-limit-tokens", "1000"),
            ("x-ratelimit-remaining-tokens", "lots"),
        ]),
        headers(&[("ratelimit", "garbage;;;==,,\"")]),
        headers(&[("ratelimit-limit", "0"), ("ratelimit-remaining", "0")]),
        HeaderMap::new(),
    ];
    for h in &sets {
        assert_eq!(
            quota::from_headers(QuotaKind::Auto, h, now()),
            None,
            "{h:?}"
        );
    }
    let mut opaque = HeaderMap::new();
    opaque.insert(
        "x-codex-primary-used-percent",
        HeaderValue::from_bytes(b"\xff\xfe90").unwrap(),
    );
    assert_eq!(quota::from_headers(QuotaKind::Auto, &opaque, now()), None);
}

#[test]
fn a_429_means_used_up() {
    let s = quota::from_response(
        QuotaKind::Auto,
        StatusCode::TOO_MANY_REQUESTS,
        &HeaderMap::new(),
        None,
        now(),
    )
    .unwrap();
    assert_eq!(s, QuotaSignal::used(1.0));

    let h = headers(&[("retry-after", "42")]);
    let s = quota::from_response(
        QuotaKind::Auto,
        StatusCode::TOO_MANY_REQUESTS,
        &h,
        None,
        now(),
    )
    .unwrap();
    assert_eq!(s.percent_used, 1.0);
    assert_eq!(s.resets_at, Some(now() + Duration::from_secs(42)));

    let h = headers(&[("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT")]);
    let s = quota::from_response(
        QuotaKind::Auto,
        StatusCode::TOO_MANY_REQUESTS,
        &h,
        None,
        now(),
    )
    .unwrap();
    assert_eq!(s.resets_at, at(1_792_567_680));

    // Headers above 1 are kept; their window and reset are used when nothing better is known.
    let h = headers(&[
        ("anthropic-ratelimit-unified-5h-utilization", "1.3"),
        ("anthropic-ratelimit-unified-5h-reset", "1790010000"),
    ]);
    let s = quota::from_response(
        QuotaKind::Auto,
        StatusCode::TOO_MANY_REQUESTS,
        &h,
        Some(br#"{"type":"error","error":{"type":"rate_limit_error","message":"x"}}"#),
        now(),
    )
    .unwrap();
    assert_eq!(s.percent_used, 1.3);
    assert_eq!(s.resets_at, at(1_790_010_000));
    assert_eq!(s.window, Some(Duration::from_secs(5 * 3600)));

    // Below 1 in the headers still means 1 on a 429.
    let s = quota::from_response(
        QuotaKind::Codex,
        StatusCode::TOO_MANY_REQUESTS,
        &codex_headers(),
        None,
        now(),
    )
    .unwrap();
    assert_eq!(s.percent_used, 1.0);
    assert_eq!(s.resets_at, at(1_790_003_600));
}

#[test]
fn codex_usage_limit_reached_body() {
    let body = br#"{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"plus","resets_at":1790050000,"resets_in_seconds":50000}}"#;
    for status in [StatusCode::TOO_MANY_REQUESTS, StatusCode::FORBIDDEN] {
        let s = quota::from_response(
            QuotaKind::Auto,
            status,
            &HeaderMap::new(),
            Some(body),
            now(),
        )
        .unwrap();
        assert_eq!(s.percent_used, 1.0);
        assert_eq!(s.resets_at, Some(now() + Duration::from_secs(50_000)));
    }
    // retry-after wins over the body.
    let s = quota::from_response(
        QuotaKind::Auto,
        StatusCode::TOO_MANY_REQUESTS,
        &headers(&[("retry-after", "5")]),
        Some(body),
        now(),
    )
    .unwrap();
    assert_eq!(s.resets_at, Some(now() + Duration::from_secs(5)));
    // Other errors keep the header signal (or none).
    let other = br#"{"error":{"type":"invalid_request_error","message":"bad"}}"#;
    assert_eq!(
        quota::from_response(
            QuotaKind::Auto,
            StatusCode::BAD_REQUEST,
            &HeaderMap::new(),
            Some(other),
            now()
        ),
        None
    );
    let s = quota::from_response(
        QuotaKind::Auto,
        StatusCode::OK,
        &codex_headers(),
        None,
        now(),
    )
    .unwrap();
    assert_eq!(s.percent_used, 0.88);
}

const NAMES: &[&str] = &[
    "x-codex-primary-used-percent",
    "x-codex-secondary-used-percent",
    "x-codex-primary-window-minutes",
    "x-codex-primary-reset-at",
    "x-codex-secondary-reset-after-seconds",
    "anthropic-ratelimit-unified-5h-utilization",
    "anthropic-ratelimit-unified-7d-reset",
    "anthropic-ratelimit-unified-reset",
    "anthropic-ratelimit-unified-status",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "retry-after",
    "retry-after-ms",
];

fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        "[0-9.eE+-]{0,25}".prop_map(String::into_bytes),
        r#"[a-z0-9";=, .:-]{0,60}"#.prop_map(String::into_bytes),
        Just(b"1e308".to_vec()),
        Just(b"18446744073709551616".to_vec()),
        Just(b"99999999999999999999h".to_vec()),
    ]
}

fn header_map_strategy() -> impl Strategy<Value = HeaderMap> {
    proptest::collection::vec((0..NAMES.len(), value_strategy()), 0..12).prop_map(|pairs| {
        let mut map = HeaderMap::new();
        for (i, value) in pairs {
            if let Ok(v) = HeaderValue::from_bytes(&value) {
                map.append(NAMES[i], v);
            }
        }
        map
    })
}

fn check(signal: Option<QuotaSignal>) {
    if let Some(s) = signal {
        assert!(s.percent_used.is_finite() && s.percent_used >= 0.0, "{s:?}");
    }
}

proptest! {
    #[test]
    fn never_panics_and_stays_finite(
        h in header_map_strategy(),
        body in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
        status in 100u16..600,
        now_secs in 0u64..4_000_000_000,
    ) {
        let now = UNIX_EPOCH + Duration::from_secs(now_secs);
        let status = StatusCode::from_u16(status).unwrap();
        for kind in [QuotaKind::Auto, QuotaKind::Codex, QuotaKind::Anthropic, QuotaKind::OpenAi, QuotaKind::Ietf, QuotaKind::None] {
            check(quota::from_headers(kind, &h, now));
            check(quota::from_response(kind, status, &h, body.as_deref(), now));
        }
        // The one-pass family scan of `auto` must not change what the parsers find.
        let chained = quota::from_headers(QuotaKind::Codex, &h, now)
            .or_else(|| quota::from_headers(QuotaKind::Anthropic, &h, now))
            .or_else(|| quota::from_headers(QuotaKind::OpenAi, &h, now))
            .or_else(|| quota::from_headers(QuotaKind::Ietf, &h, now));
        prop_assert_eq!(quota::from_headers(QuotaKind::Auto, &h, now), chained);
        if status == StatusCode::TOO_MANY_REQUESTS {
            let s = quota::from_response(QuotaKind::Auto, status, &h, body.as_deref(), now).unwrap();
            prop_assert!(s.percent_used >= 1.0);
        }
    }

    #[test]
    fn error_bodies_never_panic(
        kind in "[a-z_]{0,24}",
        resets_at in any::<f64>(),
        resets_in in any::<i64>(),
    ) {
        let body = format!(
            r#"{{"error":{{"type":"{kind}","resets_at":{},"resets_in_seconds":{resets_in}}}}}"#,
            if resets_at.is_finite() { resets_at.to_string() } else { "null".into() }
        );
        check(quota::from_response(QuotaKind::Auto, StatusCode::BAD_REQUEST, &HeaderMap::new(), Some(body.as_bytes()), now()));
    }
}
