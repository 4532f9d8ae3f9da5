//! The access log: one `INFO` line per request (target `context_relay_gateway::access`),
//! written when the response head is known.
//!
//! The line is an event in a span carrying `method`, `path`, `request_id`, `status`,
//! `latency_ms`, `tenant`, `combo`, `provider`, `account` and `handoff`, so that the JSON
//! format has them under `span` (and `spans`) and the text format reads
//!
//! ```text
//! 2026-12-01T20:14:14.123456Z  INFO request{method=POST path=/v1/responses request_id=… status=200 latency_ms=1.234 tenant="…" combo="codex-relay" provider="codex" account="acct-a" handoff="none"}: context_relay_gateway::access: request status=200 latency_ms=1.234
//! ```
//!
//! It never carries a header value, a key or a body. Fields without a value (a request that
//! was not routed has no `combo`) are left out.
//!
//! Making a span and formatting it through `tracing-subscriber` cost 1.3–4.9 µs of CPU per
//! request in the gateway's measurements, a large share of a small request. The binary's
//! plain-text log without colours therefore writes the line itself, byte for byte what
//! `tracing-subscriber` writes for that span and event
//! ([`write_access_lines_to`]); every other setup (JSON, colours, an embedding application's
//! subscriber) gets the span and the event. Either way the line is written only when the
//! access target is enabled at `INFO` by the subscriber's filter.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use context_relay_tower::{ComboName, FactsExt, ResolvedAccount, Tenant};
use http::{HeaderName, Request, Response};

use crate::LogBuffer;

/// The target of the access log.
pub(crate) const TARGET: &str = "context_relay_gateway::access";

/// The request id header (set by [`ensure_request_id`] when the client sent none, or one that
/// is not kept).
pub(crate) static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Where access lines go when they bypass `tracing` (set once, by the binary).
static DIRECT: OnceLock<LogBuffer> = OnceLock::new();

/// Makes this process write its access lines straight into `log`, in the text that the global
/// subscriber would write for them; `false` when a buffer was already set (the first one
/// stays).
///
/// Call it only when the global subscriber is `tracing_subscriber::fmt()` in its default text
/// format with [`PlainFields`](crate::PlainFields), no colours, the default timer and `log` as
/// its writer, as the `context-relay-gateway` binary sets it up: with any other format the
/// lines would differ from the rest of the log. The subscriber's filter still decides whether
/// access lines are written.
pub fn write_access_lines_to(log: LogBuffer) -> bool {
    DIRECT.set(log).is_ok()
}

/// The longest client `x-request-id` kept (see [`ensure_request_id`]).
pub(crate) const MAX_REQUEST_ID: usize = 128;

/// Gives every request one plain `x-request-id`: a client's id is kept when it is plain (at
/// most [`MAX_REQUEST_ID`] ASCII letters, digits and `-_.:/+=`); one that is empty, longer or
/// holds anything else is dropped, so that a client can neither forge fields of the access line
/// nor make it arbitrarily long; a request without one gets a fresh UUID (v4).
///
/// The id travels in the header only (the access line and the echo on the response read it
/// there, in `telemetry::RequestMetrics`): no request extension is made for it, since every
/// attempt the account resolver sends copies the request's extensions.
pub(crate) fn ensure_request_id<B>(mut req: Request<B>) -> Request<B> {
    let ids = req.headers().get_all(&X_REQUEST_ID);
    let present = ids.iter().next().is_some();
    let plain = ids.iter().all(|v| is_plain_id(v.as_bytes()));
    if !plain {
        req.headers_mut().remove(&X_REQUEST_ID);
    }
    if !present || !plain {
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
        // The value shares the thread's buffer of short values (`crate::slab`), no
        // allocation of its own: the response gets a copy of it (the echo), which a value
        // copied from a `&str` would allocate again. A hyphenated UUID is always a valid
        // header value.
        if let Some(value) = crate::slab::header_value(&text) {
            req.headers_mut().insert(X_REQUEST_ID.clone(), value);
        }
    }
    req
}

/// Whether `id` is a request id the access line can carry as it is.
fn is_plain_id(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID
        && id
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.:/+=".contains(c))
}

/// Who a routed request belongs to, put on its response by ComboService for the access line
/// (one response extension for both) when the response does not carry the request's
/// [`Tenant`] and [`ComboName`] themselves.
#[derive(Debug, Clone, Default)]
pub(crate) struct Routed {
    /// The request's tenant.
    pub(crate) tenant: Option<Tenant>,
    /// The combo it asked for.
    pub(crate) combo: Option<ComboName>,
}

impl Routed {
    /// Whether `ext` (a response's) says the same as `self` without it.
    pub(crate) fn carried_by(&self, ext: &http::Extensions) -> bool {
        ext.get::<Routed>().is_none()
            && ext.fact::<Tenant>() == self.tenant.as_ref()
            && ext.fact::<ComboName>() == self.combo.as_ref()
    }

    /// The tenant and combo of the request `ext` (a response's) answers.
    fn of(ext: &http::Extensions) -> (Option<&Tenant>, Option<&ComboName>) {
        match ext.get::<Routed>() {
            Some(r) => (r.tenant.as_ref(), r.combo.as_ref()),
            None => (ext.fact(), ext.fact()),
        }
    }
}

/// What the access line needs of the request, taken only when the line is enabled.
pub(crate) struct AccessRequest {
    method: http::Method,
    uri: http::Uri,
}

impl AccessRequest {
    /// `None` when the subscriber would drop the line.
    pub(crate) fn of<B>(req: &Request<B>) -> Option<Self> {
        tracing::enabled!(target: TARGET, tracing::Level::INFO).then(|| Self {
            method: req.method().clone(),
            uri: req.uri().clone(),
        })
    }

    /// Logs the line of `res`, answered to the request with the id `request_id`.
    pub(crate) fn log<B>(
        &self,
        res: &Response<B>,
        latency: Duration,
        request_id: Option<&http::HeaderValue>,
    ) {
        let line = self.line(res, latency, request_id);
        match DIRECT.get() {
            Some(log) => line.write_to(log),
            None => line.emit(),
        }
    }

    /// The line of `res` (see [`log`](Self::log)).
    fn line<'a, B>(
        &'a self,
        res: &'a Response<B>,
        latency: Duration,
        request_id: Option<&'a http::HeaderValue>,
    ) -> AccessLine<'a> {
        let ext = res.extensions();
        let account = ext.fact::<ResolvedAccount>();
        let (tenant, combo) = Routed::of(ext);
        AccessLine {
            method: self.method.as_str(),
            path: self.uri.path(),
            request_id: request_id.and_then(|v| v.to_str().ok()).unwrap_or("-"),
            status: res.status().as_u16(),
            latency_us: latency_us(latency),
            tenant: tenant.map(|t| &*t.0),
            // A direct route names the client's model, of any length.
            combo: combo.map(|c| context_relay_core::parse::clamp_logged(&c.0)),
            provider: account.map(|a| &**a.provider()),
            account: account.map(|a| &**a.account()),
            // What the relay did (`injected`, `scrubbed`, `repaired`, comma-joined), or `none`.
            handoff: res
                .headers()
                .get(context_relay_tower::RELAY_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none"),
        }
    }
}

/// The longest latency an access line tells, in microseconds (about 31 years): below 2^53, so
/// that `latency_us / 1000` as an `f64` is exactly the decimal the direct line writes.
const MAX_LATENCY_US: u64 = 1_000_000_000_000_000;

/// `latency` in whole microseconds, at most [`MAX_LATENCY_US`].
fn latency_us(latency: Duration) -> u64 {
    u64::try_from(latency.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_LATENCY_US)
}

/// The fields of one access line.
#[derive(Debug, Clone, Copy)]
struct AccessLine<'a> {
    method: &'a str,
    path: &'a str,
    request_id: &'a str,
    status: u16,
    /// Whole microseconds (at most [`MAX_LATENCY_US`]); logged as `latency_ms`.
    latency_us: u64,
    tenant: Option<&'a str>,
    combo: Option<&'a str>,
    provider: Option<&'a str>,
    account: Option<&'a str>,
    handoff: &'a str,
}

impl AccessLine<'_> {
    /// The line through `tracing`: an `INFO` event in a span carrying every field, both made
    /// here at once, so that a request costs one span and one event and no field recorded
    /// later.
    fn emit(&self) {
        let (status, latency_ms) = (self.status, self.latency_ms());
        let span = tracing::info_span!(
            target: TARGET,
            "request",
            method = %self.method,
            path = %self.path,
            request_id = %self.request_id,
            status,
            latency_ms,
            tenant = self.tenant,
            combo = self.combo,
            provider = self.provider,
            account = self.account,
            handoff = self.handoff,
        );
        // Inside the span, not `parent:` it: JSON's `spans` list is built from the entered spans.
        span.in_scope(|| tracing::info!(target: TARGET, status, latency_ms, "request"));
    }

    /// The line written into `log` directly, with the time of the call.
    fn write_to(&self, log: &LogBuffer) {
        let since_epoch = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
        let written = since_epoch.is_ok_and(|since_epoch| {
            LINE.with_borrow_mut(|buf| {
                buf.line.clear();
                if !buf.clock.timestamp(since_epoch, &mut buf.line) {
                    return false;
                }
                buf.line.push(' ');
                self.text(&mut buf.line);
                log.write_access_line(buf.line.as_bytes());
                true
            })
        });
        if !written {
            // A clock before 1970 or past 9999: the subscriber knows how to show it.
            self.emit();
        }
    }

    /// What the fmt layer writes after the timestamp (and its space): level, span, target,
    /// event fields, newline.
    fn text(&self, out: &mut String) {
        // Writing to a `String` does not fail: the `fmt::Result`s are `Ok`.
        out.push_str(" INFO request{method=");
        out.push_str(self.method);
        out.push_str(" path=");
        out.push_str(self.path);
        out.push_str(" request_id=");
        out.push_str(self.request_id);
        // Numbers as the field formatter writes them (with `Debug`): formatted once, written
        // twice (the span's fields, then the event's); a float costs more to format than to copy.
        let mut numbers = [0u8; 64];
        let numbers = self.numbers(&mut numbers);
        out.push_str(numbers);
        let strings = [
            (" tenant=", self.tenant),
            (" combo=", self.combo),
            (" provider=", self.provider),
            (" account=", self.account),
            (" handoff=", Some(self.handoff)),
        ];
        for (name, value) in strings {
            if let Some(value) = value {
                out.push_str(name);
                let _ = crate::log_fields::write_quoted(out, value);
            }
        }
        out.push_str("}: ");
        out.push_str(TARGET);
        out.push_str(": request");
        out.push_str(numbers);
        out.push('\n');
    }

    /// The latency in milliseconds, as the `tracing` fields carry it.
    fn latency_ms(&self) -> f64 {
        self.latency_us as f64 / 1000.0
    }

    /// ` status=200 latency_ms=1.5`, written into `buf` as the field formatter writes the
    /// numbers (`Debug`) but without formatting a float: the latency is a whole number of
    /// microseconds, so its `f64` in milliseconds prints as that number with the decimal point
    /// three digits in, trailing zeros dropped (`.0` when none is left).
    fn numbers<'b>(&self, buf: &'b mut [u8; 64]) -> &'b str {
        use std::io::Write;
        let room = buf.len();
        let mut cursor = &mut buf[..];
        let (ms, fraction) = (self.latency_us / 1000, self.latency_us % 1000);
        let digits = padded::<3>(fraction);
        let kept = match fraction {
            0 => &b"0"[..],
            _ if fraction % 100 == 0 => &digits[..1],
            _ if fraction % 10 == 0 => &digits[..2],
            _ => &digits[..],
        };
        let written = cursor
            .write_all(b" status=")
            .and_then(|()| cursor.write_all(itoa::Buffer::new().format(self.status).as_bytes()))
            .and_then(|()| cursor.write_all(b" latency_ms="))
            .and_then(|()| cursor.write_all(itoa::Buffer::new().format(ms).as_bytes()))
            .and_then(|()| cursor.write_all(b"."))
            .and_then(|()| cursor.write_all(kept));
        let len = room - cursor.len();
        match written {
            Ok(()) => std::str::from_utf8(&buf[..len]).unwrap_or(""),
            // Longer than any `u16` and latency can be written; never taken.
            Err(_) => "",
        }
    }
}

/// Each thread's line buffer and clock.
struct LineBuf {
    line: String,
    clock: Clock,
}

thread_local! {
    static LINE: RefCell<LineBuf> = const {
        RefCell::new(LineBuf {
            line: String::new(),
            clock: Clock::new(),
        })
    };
}

/// The timestamp `tracing-subscriber`'s default timer writes (RFC 3339 in UTC with
/// microseconds, `2026-12-01T20:14:14.123456Z`), its date and time of day made once a second.
struct Clock {
    second: u64,
    /// `2026-12-01T20:14:14` for `second`.
    prefix: String,
}

impl Clock {
    const fn new() -> Self {
        Self {
            second: u64::MAX,
            prefix: String::new(),
        }
    }

    /// Writes the timestamp `since_epoch` after 1970; `false` (nothing written) past the last
    /// timestamp `jiff` holds, late in the year 9999.
    fn timestamp(&mut self, since_epoch: Duration, out: &mut String) -> bool {
        let second = since_epoch.as_secs();
        if second != self.second {
            let Some(time) = i64::try_from(second)
                .ok()
                .and_then(|s| jiff::Timestamp::from_second(s).ok())
            else {
                return false;
            };
            self.prefix.clear();
            let _ = write!(self.prefix, "{}", time.strftime("%Y-%m-%dT%H:%M:%S"));
            self.second = second;
        }
        out.push_str(&self.prefix);
        out.push('.');
        let micros = padded::<6>(u64::from(since_epoch.subsec_micros()));
        out.push_str(std::str::from_utf8(&micros).unwrap_or("000000"));
        out.push('Z');
        true
    }
}

/// The last `N` decimal digits of `n`, zero-padded: what `{:0N}` writes for an `n` below
/// `10^N`, without the formatting machinery (the access line writes two per request).
fn padded<const N: usize>(mut n: u64) -> [u8; N] {
    let mut digits = [b'0'; N];
    for d in digits.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    digits
}

#[cfg(test)]
mod tests;
