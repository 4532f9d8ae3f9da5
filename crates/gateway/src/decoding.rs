//! Decoding compressed request bodies off the async workers.
//!
//! A small body can decode to `max_request_bytes` (a brotli or zstd bomb of a few hundred
//! bytes), and decoding it is pure CPU: on an async worker it would stall every connection
//! that worker serves, `/healthz` included. Bodies are decoded on tokio's blocking pool
//! instead, at most one per CPU at a time (the others wait, asynchronously, for a turn), so
//! that the workers keep their share of the CPU whatever arrives.

use std::sync::{Arc, LazyLock};

use context_relay_core::decode::{DecodeError, decode};
use tokio::sync::Semaphore;

use crate::collect::Buffered;

/// Decodes running at once: one per CPU.
static DECODERS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    Arc::new(Semaphore::new(cpus))
});

/// `raw` decoded as `encoding` says, at most `limit` bytes, on the blocking pool.
pub(crate) async fn decode_off_workers(
    encoding: String,
    raw: Buffered,
    limit: usize,
) -> Result<Vec<u8>, DecodeError> {
    // The semaphore is never closed; a failure to acquire decodes without a turn.
    let turn = DECODERS.clone().acquire_owned().await.ok();
    let job = tokio::task::spawn_blocking(move || {
        let decoded = decode(&encoding, raw.as_slice(), limit);
        drop(turn);
        decoded
    });
    match job.await {
        Ok(decoded) => decoded,
        // The blocking pool is shutting down (or the decoder panicked): the body is refused.
        Err(e) => Err(DecodeError::Corrupt {
            encoding: "request".to_owned(),
            reason: format!("decoding did not finish: {e}"),
        }),
    }
}
