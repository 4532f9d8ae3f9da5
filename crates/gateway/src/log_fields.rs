//! Log fields as plain `name=value` text, byte for byte what `tracing-subscriber`'s default field
//! formatter writes without colours, at a fraction of its cost.
//!
//! Every request writes an access-log line of about ten fields. The default formatter routes
//! each field name and `=` through ANSI styling even when colours are off, which costs about as
//! much as the rest of the line. [`PlainFields`] writes the same text directly: fields
//! separated by one space, `name=` then the value's `Debug` form, a string in quotes with
//! `Debug`'s escapes (written as is when it has nothing to escape). The `message` field and
//! errors are handed to the default formatter, which also sanitises terminal escapes in them.
//! Use it only where colours are off: with colours the default formatter styles the names.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use context_relay_gateway::PlainFields;
//!
//! #[derive(Clone, Default)]
//! struct Sink(Arc<Mutex<Vec<u8>>>);
//! impl std::io::Write for Sink {
//!     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
//!         self.0.lock().unwrap().extend_from_slice(b);
//!         Ok(b.len())
//!     }
//!     fn flush(&mut self) -> std::io::Result<()> { Ok(()) }
//! }
//!
//! let sink = Sink::default();
//! let writer = sink.clone();
//! let subscriber = tracing_subscriber::fmt()
//!     .with_ansi(false)
//!     .without_time()
//!     .fmt_fields(PlainFields)
//!     .with_writer(move || writer.clone())
//!     .finish();
//! tracing::subscriber::with_default(subscriber, || {
//!     tracing::info!(status = 200u16, tenant = "t-1", path = %"/v1/responses", "request");
//! });
//! let line = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
//! assert!(line.ends_with(r#": request status=200 tenant="t-1" path=/v1/responses
//! "#), "{line}");
//! ```

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

/// Formats log fields as plain `name=value` text, byte for byte what `tracing-subscriber`'s
/// default field formatter writes with colours off, without routing each name through ANSI
/// styling. Messages and errors are handed to the default formatter. Use it only where colours
/// are off: with colours the default formatter styles the names.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainFields;

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = PlainVisitor {
            writer,
            is_empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes the fields of one span or event.
struct PlainVisitor<'w> {
    writer: Writer<'w>,
    /// Nothing written yet: no separating space before the next field.
    is_empty: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// Hands a field to the default formatter (messages and errors, whose escaping it owns).
    fn by_default(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        // What the default formatter writes nothing for must not count as written.
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor);
        self.is_empty = false;
        self.result = visitor.finish();
    }

    /// Writes the separator and `name=`; `false` when the field is not written (an earlier
    /// write failed, or it is `log` crate metadata, already in the line's head).
    fn name(&mut self, field: &Field) -> bool {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return false;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        let sep = if std::mem::take(&mut self.is_empty) {
            ""
        } else {
            " "
        };
        self.result = self
            .writer
            .write_str(sep)
            .and_then(|()| self.writer.write_str(name))
            .and_then(|()| self.writer.write_char('='));
        self.result.is_ok()
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            return self.by_default(field, |v| v.record_str(field, value));
        }
        if !self.name(field) {
            return;
        }
        self.result = write_quoted(&mut self.writer, value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.by_default(field, |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            return self.by_default(field, |v| v.record_debug(field, value));
        }
        if self.name(field) {
            self.result = write!(self.writer, "{value:?}");
        }
    }
}

/// Writes `value` as `Debug` writes a `str`: in quotes, escaped where needed.
pub(crate) fn write_quoted(out: &mut impl fmt::Write, value: &str) -> fmt::Result {
    if needs_escape(value) {
        write!(out, "{value:?}")
    } else {
        out.write_char('"')?;
        out.write_str(value)?;
        out.write_char('"')
    }
}

/// Whether `str`'s `Debug` form differs from the text in quotes: anything but printable ASCII
/// other than `"` and `\`.
fn needs_escape(s: &str) -> bool {
    s.bytes()
        .any(|b| !(b' '..=b'~').contains(&b) || b == b'"' || b == b'\\')
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use proptest::prelude::*;
    use tracing_subscriber::fmt::format::DefaultFields;

    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    /// The log text of `emit`, formatted with `fields` and colours off.
    fn logged<F>(fields: F, emit: impl FnOnce()) -> String
    where
        F: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_max_level(tracing::Level::TRACE)
            .fmt_fields(fields)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        sink.text()
    }

    /// Logs an access-like line (a span with every kind of field, an event in it) and a
    /// warning, with the given values.
    fn emit(text: &str, number: f64, count: u64) {
        let err = std::io::Error::other(text.to_owned());
        let account: Option<&str> = None;
        let span = tracing::info_span!(
            "request",
            method = %"POST",
            path = %text,
            request_id = %"-",
            status = 200u16,
            latency_ms = number,
            tenant = text,
            account,
            r#type = "x",
            handoff = "none",
        );
        span.in_scope(|| {
            tracing::info!(status = count, latency_ms = number, "request");
            tracing::warn!(error = &err as &dyn std::error::Error, what = ?text, "{text}");
            tracing::info!(n = count, flag = true, neg = -3i64);
            // `log.` fields are the `log` bridge's metadata: never written, never separated.
            tracing::info!(
                log.err = &err as &dyn std::error::Error,
                b = 2,
                log.x = "y",
                c = 3
            );
        });
        span.record("account", "acct-a");
        span.in_scope(|| tracing::info!("after"));
    }

    #[test]
    fn writes_what_the_default_formatter_writes() {
        for text in [
            "plain",
            "with \"quotes\" and \\",
            "caf\u{e9}\n\t\u{1b}[31m",
            "",
        ] {
            let plain = logged(PlainFields, || emit(text, 1.5, 7));
            let default = logged(DefaultFields::new(), || emit(text, 1.5, 7));
            assert_eq!(plain, default);
            assert!(plain.contains("account=\"acct-a\""), "{plain}");
        }
    }

    proptest! {
        #[test]
        fn any_text_and_number_write_as_the_default_formatter(
            text in "\\PC{0,24}|[ -~]{0,24}|.{0,8}",
            number in any::<f64>(),
            count in any::<u64>(),
        ) {
            let plain = logged(PlainFields, || emit(&text, number, count));
            let default = logged(DefaultFields::new(), || emit(&text, number, count));
            prop_assert_eq!(plain, default);
        }
    }
}
