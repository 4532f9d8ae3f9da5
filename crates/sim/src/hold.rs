//! Holding SSE streams after their first output event ([`SimProvider::hold_streams`]), to
//! prove that a proxy forwards events without buffering them.

use tokio::sync::watch;

use super::{SimProvider, lock};

/// Holds SSE streams after their first event until released (or dropped).
#[derive(Debug)]
pub struct StreamHold {
    tx: watch::Sender<bool>,
}

impl StreamHold {
    /// Lets held streams continue.
    pub fn release(self) {
        // Drop does it.
    }
}

impl Drop for StreamHold {
    fn drop(&mut self) {
        let _ = self.tx.send(true);
    }
}

impl SimProvider {
    /// Holds every SSE stream started from now on after its first output event (the opening
    /// events before it go out too), until the returned guard is released or dropped.
    pub fn hold_streams(&self) -> StreamHold {
        let (tx, rx) = watch::channel(false);
        *lock(&self.state.hold) = Some(rx);
        StreamHold { tx }
    }
}
