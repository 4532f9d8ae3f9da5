//! What can go wrong in a store, named for what went wrong.

use std::path::PathBuf;
use std::time::Duration;

/// An error returned by a [`HandoffStore`](crate::HandoffStore) operation.
///
/// The layers fail open on every variant: a store problem is logged and counted, and the request
/// passes through as if the relay were absent: the relay never fails a user's request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be opened at `path`.
    #[error("cannot open the handoff store at {path}: {reason}")]
    Open {
        /// The file the store was asked to open.
        path: PathBuf,
        /// What is wrong with it (locked by another process, not a redb file, permission …).
        reason: String,
    },
    /// The storage engine failed while doing `op` (disk I/O, a failed commit).
    #[error("handoff store {op} failed: {reason}")]
    Io {
        /// The operation that failed.
        op: &'static str,
        /// What the storage engine reported.
        reason: String,
    },
    /// A stored record could not be read back.
    #[error("stored handoff {key} is corrupt: expected {expected}, found {found}")]
    Corrupt {
        /// The key of the record.
        key: String,
        /// What the store expected to read.
        expected: &'static str,
        /// What it found instead.
        found: String,
    },
    /// A record could not be serialized.
    #[error("cannot serialize handoff record: {0}")]
    Serialize(#[from] serde_json::Error),
    /// The Redis server refused or failed `op`.
    #[error("redis {op} failed: {reason}")]
    Redis {
        /// The operation that failed.
        op: &'static str,
        /// What the client or server reported.
        reason: String,
    },
    /// `op` did not finish within the configured time limit.
    #[error("handoff store {op} did not answer within {after:?}")]
    Timeout {
        /// The operation that timed out.
        op: &'static str,
        /// The time limit that ran out.
        after: Duration,
    },
    /// The store is known to be unreachable (its circuit breaker is open): `op` was not tried.
    #[error("handoff store unreachable: {op} not tried for another {retry_in:?}")]
    Unavailable {
        /// The operation that was skipped.
        op: &'static str,
        /// Until the next attempt.
        retry_in: Duration,
    },
    /// The store's writer has stopped (the store is shutting down or its writer thread died).
    #[error("handoff store is closed: its writer thread is no longer running")]
    Closed,
}
