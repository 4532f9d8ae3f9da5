//! Reading a request body within the gateway's bounds: at most `max_request_bytes`, every
//! chunk's bytes taken from the shared [`ByteBudget`](crate::budget::ByteBudget) as it arrives,
//! and the client body timeout recognised so that it can be answered with a 408.
//!
//! A body of one chunk is kept as it came. A body of several chunks is copied once into one
//! buffer, with [`HEADROOM`] spare bytes in front: the gateway rewrites `model`, a value near
//! the start, and a new name up to that much longer fits by moving the few bytes before it
//! instead of copying the whole body again (see [`model`](crate::model)).

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;

use crate::budget::BudgetHold;
use crate::combo::BoxError;
use crate::idle::IdleTimeout;

/// Why a body could not be read.
pub(crate) enum Collect {
    /// Over the size limit.
    TooLarge,
    /// The budget of buffered bytes is spent.
    Budget,
    /// The body failed (the client went away, or stalled past the body timeout).
    Read(BoxError),
}

/// Spare bytes in front of a body joined from several chunks.
pub(crate) const HEADROOM: usize = 64;

/// A request body read whole.
#[derive(Debug)]
pub(crate) enum Buffered {
    /// The body's only chunk (or a decoded body), not copied.
    Chunk(Bytes),
    /// The chunks copied into one buffer behind [`HEADROOM`] spare bytes: the body is
    /// `buf[HEADROOM..]`.
    Joined(Vec<u8>),
}

impl Buffered {
    /// The body's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Buffered::Chunk(b) => b,
            Buffered::Joined(buf) => buf.get(HEADROOM..).unwrap_or_default(),
        }
    }

    /// The body as `Bytes`, without copying it.
    pub(crate) fn into_bytes(self) -> Bytes {
        match self {
            Buffered::Chunk(b) => b,
            Buffered::Joined(buf) if buf.len() >= HEADROOM => Bytes::from(buf).slice(HEADROOM..),
            Buffered::Joined(_) => Bytes::new(),
        }
    }
}

/// Reads the whole body, at most `limit` bytes, taking each chunk's bytes from `hold`.
pub(crate) async fn collect_within<B>(
    body: B,
    limit: usize,
    hold: &mut BudgetHold,
) -> Result<Buffered, Collect>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut body = std::pin::pin!(body);
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Collect::Read(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if total > limit {
            return Err(Collect::TooLarge);
        }
        if !hold.take(data.len()) {
            return Err(Collect::Budget);
        }
        chunks.push(data);
    }
    Ok(match chunks.len() {
        0 => Buffered::Chunk(Bytes::new()),
        1 => Buffered::Chunk(chunks.swap_remove(0)),
        _ => {
            let mut all = Vec::with_capacity(HEADROOM + total);
            all.resize(HEADROOM, b' ');
            for c in &chunks {
                all.extend_from_slice(c);
            }
            Buffered::Joined(all)
        }
    })
}

/// Whether `e` (or what caused it) is the client body timeout.
pub(crate) fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<IdleTimeout>() {
            return true;
        }
        cur = err.source();
    }
    false
}
