//! Decoding compressed request bodies, and reading large ones, off the async workers.
//!
//! A small body can decode to `max_request_bytes` (a brotli or zstd bomb of a few hundred
//! bytes), and decoding it is pure CPU: on an async worker it would stall every connection
//! that worker serves, `/healthz` included. Bodies are decoded on tokio's blocking pool
//! instead, at most one per CPU at a time (the others wait, asynchronously, for a turn), so
//! that the workers keep their share of the CPU whatever arrives. The same goes for reading
//! the session of a body of [`OFF_WORKERS_BYTES`] or more (hashing a first message of
//! megabytes takes milliseconds).

use std::sync::{Arc, LazyLock};

use context_relay_core::decode::{DecodeError, decode};
use tokio::sync::Semaphore;

use crate::collect::Buffered;

/// Decodes running at once: one per CPU.
static DECODERS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    Arc::new(Semaphore::new(cpus))
});

/// Bodies from this size on are read (their session derived) off the async workers.
pub(crate) const OFF_WORKERS_BYTES: usize = 256 << 10;

/// Runs `work` on the blocking pool when it is its turn (one job per CPU at a time); `Err`
/// with the reason when it could not finish (the runtime is shutting down, or it panicked).
pub(crate) async fn off_workers<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    // The semaphore is never closed; a failure to acquire runs without a turn.
    let turn = DECODERS.clone().acquire_owned().await.ok();
    let job = tokio::task::spawn_blocking(move || {
        let out = work();
        drop(turn);
        out
    });
    job.await.map_err(|e| e.to_string())
}

/// `raw` decoded as `encoding` says, at most `limit` bytes, on the blocking pool.
pub(crate) async fn decode_off_workers(
    encoding: String,
    raw: Buffered,
    limit: usize,
) -> Result<Vec<u8>, DecodeError> {
    off_workers(move || decode(&encoding, raw.as_slice(), limit))
        .await
        .unwrap_or_else(|e| {
            // The body is refused.
            Err(DecodeError::Corrupt {
                encoding: "request".to_owned(),
                reason: format!("decoding did not finish: {e}"),
            })
        })
}
