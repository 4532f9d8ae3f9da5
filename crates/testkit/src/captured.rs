//! A writer a test's `tracing` subscriber writes to, read back by the test.

use std::sync::{Arc, Mutex, PoisonError};

/// Shares what is written to it between its clones: give one to the subscriber's
/// `with_writer`, read the text from another.
///
/// ```
/// use std::io::Write;
/// let captured = context_relay_testkit::captured::Captured::default();
/// let mut writer = captured.clone();
/// writer.write_all(b"INFO line").unwrap();
/// assert_eq!(captured.text(), "INFO line");
/// ```
#[derive(Debug, Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Installs the process's global `tracing` subscriber (plain text, no colours) writing
    /// to a new `Captured`, which it returns: for a test binary of its own (one per process).
    pub fn install() -> Self {
        let captured = Self::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .init();
        captured
    }

    /// What was written so far, as text.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
