//! Log lines for stderr, with the access log written in batches.
//!
//! Every request writes one access-log line. Written through one by one, that is one `write`
//! system call per request, which on a small request costs about as much as forwarding it.
//! [`LogBuffer`] keeps access-log lines (target `context_relay_gateway::access`, level INFO or
//! below) in memory and writes them together: when 64 KiB are waiting, when the flusher thread
//! wakes (every 100 ms by default), before any other line, and when the last handle is dropped.
//! Every other line (start-up, warnings, errors) is written at once, after the access lines
//! before it, so the order of the lines logged through `tracing` is kept (a line written to
//! stderr by other means, such as a panic message, may come before access lines still waiting). A process killed with `SIGKILL` loses at most
//! the access lines of its last flush interval.
//!
//! ```
//! use std::io::Write;
//! use std::sync::{Arc, Mutex};
//! use context_relay_gateway::LogBuffer;
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! #[derive(Clone, Default)]
//! struct Sink(Arc<Mutex<Vec<u8>>>);
//! impl Write for Sink {
//!     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
//!         self.0.lock().unwrap().extend_from_slice(b);
//!         Ok(b.len())
//!     }
//!     fn flush(&mut self) -> std::io::Result<()> { Ok(()) }
//! }
//!
//! let sink = Sink::default();
//! let log = LogBuffer::new(sink.clone());
//! let fmt = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(log.clone());
//! tracing::subscriber::with_default(tracing_subscriber::registry().with(fmt), || {
//!     tracing::info!(target: "context_relay_gateway::access", "request");
//! });
//! assert!(sink.0.lock().unwrap().is_empty()); // batched
//! log.flush();
//! assert!(String::from_utf8_lossy(&sink.0.lock().unwrap()).contains("request"));
//! ```

use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// Waiting bytes beyond which a batch is written at once.
const FLUSH_AT: usize = 64 * 1024;

/// A [`MakeWriter`] for `tracing-subscriber`'s fmt layer that batches the access log (see the
/// module docs). Clones share one buffer.
#[derive(Clone)]
pub struct LogBuffer {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
}

struct State {
    pending: Vec<u8>,
    out: Box<dyn Write + Send>,
}

impl State {
    /// Writes what is pending. A failing stderr cannot be reported anywhere: the batch is
    /// dropped, so the buffer never grows without bound.
    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let _ = self.out.write_all(&self.pending);
            self.pending.clear();
        }
        let _ = self.out.flush();
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.flush();
    }
}

impl std::fmt::Debug for LogBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBuffer").finish_non_exhaustive()
    }
}

impl LogBuffer {
    /// Lines for `out`, with no flusher thread: access lines wait for the next other line,
    /// [`flush`](Self::flush), 64 KiB, or the drop of the last handle.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    pending: Vec::with_capacity(FLUSH_AT),
                    out: Box::new(out),
                }),
            }),
        }
    }

    /// Lines for stderr, with a thread that writes the waiting access lines every `every`. The
    /// thread holds no handle: it ends once every [`LogBuffer`] is dropped.
    pub fn stderr(every: Duration) -> io::Result<Self> {
        let log = Self::new(io::stderr());
        let weak: Weak<Shared> = Arc::downgrade(&log.shared);
        thread::Builder::new()
            .name("log-flush".into())
            .spawn(move || {
                loop {
                    thread::sleep(every);
                    match weak.upgrade() {
                        Some(shared) => lock(&shared).flush(),
                        None => break,
                    }
                }
            })?;
        Ok(log)
    }

    /// Writes the waiting lines now.
    pub fn flush(&self) {
        lock(&self.shared).flush();
    }

    /// Adds one access-log line (batched like those written through `tracing`).
    pub(crate) fn write_access_line(&self, line: &[u8]) {
        let mut writer = self.writer(true);
        writer.state.pending.extend_from_slice(line);
    }

    fn writer(&self, batched: bool) -> LineWriter<'_> {
        LineWriter {
            state: lock(&self.shared),
            batched,
        }
    }
}

/// A poisoned lock only means a thread panicked while holding it; the bytes are still valid.
fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The writer of one line: it holds the lock for the line, so lines never interleave.
pub struct LineWriter<'a> {
    state: MutexGuard<'a, State>,
    batched: bool,
}

impl std::fmt::Debug for LineWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineWriter")
            .field("batched", &self.batched)
            .finish_non_exhaustive()
    }
}

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.state.pending.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter<'_> {
    fn drop(&mut self) {
        if !self.batched || self.state.pending.len() >= FLUSH_AT {
            self.state.flush();
        }
    }
}

impl<'a> MakeWriter<'a> for LogBuffer {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        self.writer(false)
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        // `Level` orders by verbosity: INFO and below are at least as verbose as INFO.
        self.writer(meta.target() == crate::access_log::TARGET && *meta.level() >= Level::INFO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Logs `line` as an access-log event through a fmt layer writing to `log`.
    fn access(log: &LogBuffer, line: &str) {
        emit(
            log,
            || tracing::info!(target: "context_relay_gateway::access", "{line}"),
        );
    }

    fn emit(log: &LogBuffer, f: impl FnOnce()) {
        use tracing_subscriber::layer::SubscriberExt;
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .without_time()
            .with_level(false)
            .with_target(false)
            .with_writer(log.clone());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(fmt), f);
    }

    fn written(s: &Sink) -> String {
        String::from_utf8(s.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn other_lines_go_out_at_once_after_the_access_lines_before_them() {
        let sink = Sink::default();
        let log = LogBuffer::new(sink.clone());
        access(&log, "a1");
        access(&log, "a2");
        assert_eq!(written(&sink), "");
        emit(&log, || tracing::warn!("warn"));
        assert_eq!(written(&sink), "a1\na2\nwarn\n");
    }

    #[test]
    fn a_full_batch_is_written_and_the_last_handle_flushes() {
        let sink = Sink::default();
        let log = LogBuffer::new(sink.clone());
        let line = "x".repeat(1023);
        for _ in 0..63 {
            access(&log, &line);
        }
        assert_eq!(written(&sink).len(), 0);
        access(&log, &line);
        assert_eq!(written(&sink).len(), FLUSH_AT);
        access(&log, "tail");
        drop(log);
        assert!(written(&sink).ends_with("tail\n"));
    }

    #[test]
    fn through_tracing_only_the_access_target_at_info_is_batched() {
        use tracing_subscriber::layer::SubscriberExt;
        let sink = Sink::default();
        let log = LogBuffer::new(sink.clone());
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(log.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "context_relay_gateway::access", "req one");
            assert_eq!(written(&sink), "");
            tracing::warn!(target: "context_relay_gateway::access", "access warning");
            let out = written(&sink);
            assert!(
                out.contains("req one") && out.contains("access warning"),
                "{out}"
            );
            tracing::info!(target: "context_relay_gateway::access", "req two");
            tracing::info!("listening");
            let out = written(&sink);
            let two = out.find("req two").expect("batched line flushed first");
            assert!(
                two < out.find("listening").expect("other line written"),
                "{out}"
            );
        });
    }
}
