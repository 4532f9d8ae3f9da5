use std::io;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

use super::*;
use crate::PlainFields;

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| io::ErrorKind::Other)?
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Sink {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("sink")).into_owned()
    }
}

/// What the binary's subscriber (plain text, no colours, `PlainFields`) writes for `line`
/// through `tracing`, without the timestamp.
fn through_tracing(line: &AccessLine<'_>) -> String {
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .fmt_fields(PlainFields)
        .without_time()
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || line.emit());
    sink.text()
}

fn direct(line: &AccessLine<'_>) -> String {
    let mut out = String::new();
    line.text(&mut out);
    out
}

const ROUTED: AccessLine<'static> = AccessLine {
    method: "POST",
    path: "/v1/chat/completions",
    request_id: "rid-42",
    status: 200,
    latency_us: 1234,
    tenant: Some("alice"),
    combo: Some("codex-relay"),
    provider: Some("codex"),
    account: Some("acct-a"),
    handoff: "none",
};

#[test]
fn the_direct_line_is_the_subscribers() {
    let expected = " INFO request{method=POST path=/v1/chat/completions request_id=rid-42 \
                    status=200 latency_ms=1.234 tenant=\"alice\" combo=\"codex-relay\" \
                    provider=\"codex\" account=\"acct-a\" handoff=\"none\"}: \
                    context_relay_gateway::access: request status=200 latency_ms=1.234\n";
    assert_eq!(through_tracing(&ROUTED), expected);
    assert_eq!(direct(&ROUTED), expected);

    // Not routed: the absent fields are left out; odd values are escaped alike.
    let unrouted = AccessLine {
        method: "GET",
        path: "/healthz",
        request_id: "-",
        status: 404,
        latency_us: 0,
        tenant: Some("t \"quoted\"\n\u{1b}[31m"),
        combo: None,
        provider: None,
        account: None,
        handoff: "injected,scrubbed",
    };
    assert_eq!(direct(&unrouted), through_tracing(&unrouted));
    for latency_us in [
        1,
        10,
        100,
        1000,
        1001,
        1010,
        1100,
        123_456_789_500,
        MAX_LATENCY_US,
    ] {
        let line = AccessLine {
            latency_us,
            ..ROUTED
        };
        assert_eq!(direct(&line), through_tracing(&line));
    }
}

#[test]
fn latencies_are_whole_microseconds_up_to_the_longest_told() {
    assert_eq!(latency_us(Duration::from_nanos(1_234_567)), 1234);
    assert_eq!(latency_us(Duration::from_nanos(999)), 0);
    assert_eq!(
        latency_us(Duration::from_micros(MAX_LATENCY_US)),
        MAX_LATENCY_US
    );
    assert_eq!(latency_us(Duration::MAX), MAX_LATENCY_US);
}

#[test]
fn the_direct_line_goes_into_the_buffer_with_a_timestamp() {
    let sink = Sink::default();
    let log = LogBuffer::new(sink.clone());
    ROUTED.write_to(&log);
    // Batched like the access lines written through `tracing`.
    assert!(sink.text().is_empty());
    log.flush();
    let text = sink.text();
    let (time, rest) = text.split_at("2026-12-01T20:14:14.123456Z".len());
    assert_eq!(rest, format!(" {}", direct(&ROUTED)), "{text}");
    assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T', "{time}");
    assert!(time.parse::<jiff::Timestamp>().is_ok(), "{time}");
}

#[test]
fn the_timestamp_is_the_default_timers() {
    let mut clock = Clock::new();
    let now = || {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
    };
    for _ in 0..3 {
        let mut before = String::new();
        assert!(clock.timestamp(now(), &mut before));
        let mut theirs = String::new();
        tracing_subscriber::fmt::time::SystemTime
            .format_time(&mut Writer::new(&mut theirs))
            .expect("format");
        let mut after = String::new();
        assert!(clock.timestamp(now(), &mut after));
        assert_eq!(before.len(), theirs.len(), "{before} {theirs}");
        assert!(
            before <= theirs && theirs <= after,
            "{before} {theirs} {after}"
        );
    }
}

proptest! {
    #[test]
    fn any_line_is_the_subscribers(
        path in "/[ -~]{0,40}",
        request_id in "[!-~]{0,20}",
        status in any::<u16>(),
        latency_us in 0..=MAX_LATENCY_US,
        tenant in proptest::option::of(any::<String>()),
        combo in proptest::option::of("[ -~]{0,12}"),
        account in proptest::option::of(any::<String>()),
        handoff in any::<String>(),
    ) {
        let line = AccessLine {
            method: "POST",
            path: &path,
            request_id: &request_id,
            status,
            latency_us,
            tenant: tenant.as_deref(),
            combo: combo.as_deref(),
            provider: Some("codex"),
            account: account.as_deref(),
            handoff: &handoff,
        };
        prop_assert_eq!(direct(&line), through_tracing(&line));
    }
}

#[test]
fn timestamps_at_the_edges() {
    let mut clock = Clock::new();
    // In order: the second entry repeats the second before it, whose date is reused. Past the
    // last timestamp `jiff` holds nothing is written: the line goes through the subscriber.
    let cases = [
        (0, 7, Some("1970-01-01T00:00:00.000007Z")),
        (951_782_400, 999_999, Some("2000-02-29T00:00:00.999999Z")),
        (951_782_400, 0, Some("2000-02-29T00:00:00.000000Z")),
        (253_402_207_200, 0, Some("9999-12-30T22:00:00.000000Z")),
        (253_402_300_799, 0, None),
        (u64::MAX, 0, None),
    ];
    for (second, micros, expected) in cases {
        let mut s = String::new();
        let since_epoch = Duration::from_secs(second) + Duration::from_micros(micros);
        let written = clock.timestamp(since_epoch, &mut s);
        assert_eq!(written.then_some(s.as_str()), expected, "{second}");
    }
}

/// The access line's tenant and combo: from `Routed` when the combo put one on the answer,
/// from the answer's own values when it carries its request's (and then no `Routed` is put).
#[test]
fn tenant_and_combo_come_from_routed_or_from_the_answer() {
    let routed = Routed {
        tenant: Some(Tenant::new("alice")),
        combo: Some(ComboName::new("codex-relay")),
    };
    let mut carried = http::Extensions::new();
    carried.insert(Tenant::new("alice"));
    carried.insert(ComboName::new("codex-relay"));
    assert!(routed.carried_by(&carried));
    assert_eq!(
        Routed::of(&carried),
        (routed.tenant.as_ref(), routed.combo.as_ref())
    );

    // An answer the gateway made itself carries neither; one of another combo is not this one.
    assert!(!routed.carried_by(&http::Extensions::new()));
    let mut other = carried.clone();
    other.insert(ComboName::new("claude-relay"));
    assert!(!routed.carried_by(&other));
    let mut labelled = http::Extensions::new();
    labelled.insert(routed.clone());
    assert_eq!(
        Routed::of(&labelled),
        (routed.tenant.as_ref(), routed.combo.as_ref())
    );
    assert_eq!(Routed::of(&http::Extensions::new()), (None, None));
}

/// A direct route names the client's model, of any length: the line writes at most
/// `LOGGED_NAME_MAX_CHARS` of it, so that a request cannot make its own line a megabyte long.
#[test]
fn a_long_route_is_cut_in_the_line() {
    use context_relay_core::parse::LOGGED_NAME_MAX_CHARS;
    let long = format!("oa/{}", "M".repeat(1 << 20));
    let mut res = Response::new(());
    res.extensions_mut().insert(Routed {
        tenant: Some(Tenant::new("alice")),
        combo: Some(ComboName::new(long.as_str())),
    });
    let req = Request::post("/v1/chat/completions").body(()).unwrap();
    let pending = AccessRequest {
        method: req.method().clone(),
        uri: req.uri().clone(),
    };
    let line = pending.line(&res, Duration::from_millis(1), None);
    assert_eq!(
        line.combo.map(|c| c.chars().count()),
        Some(LOGGED_NAME_MAX_CHARS)
    );
    assert!(direct(&line).len() < 1024, "{}", direct(&line).len());
}
