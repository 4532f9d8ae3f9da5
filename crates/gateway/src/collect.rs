//! Reading a request body within the gateway's bounds: at most `max_request_bytes`, every
//! chunk's bytes taken from the shared [`ByteBudget`](crate::budget::ByteBudget) as it arrives,
//! and the client body timeout recognised so that it can be answered with a 408.
//!
//! A body of one chunk is kept as it came. A body of several chunks is copied into one buffer
//! as its chunks arrive (so it is never held twice), with [`HEADROOM`] spare bytes in front: the gateway rewrites `model`, a value near
//! the start, and a new name up to that much longer fits by moving the few bytes before it
//! instead of copying the whole body again (see [`model`](crate::model)).
//!
//! Each chunk copied in is also searched for the caller's literals ([`Pieces`]) while it is
//! still in the CPU's cache: on the perf harness's 1 MiB agent turn, a search of the whole
//! joined body afterwards, most of it no longer cached, took about four times as long.
//!
//! Asked to (a large body whose head names the session, see [`chunks`](crate::chunks)), it keeps
//! the chunks as they came instead, each given to the search as it arrives, and joins them only
//! if there are too many ([`MAX_KEPT_CHUNKS`]) or a reader needs the body in one piece
//! ([`join_kept`]).
//!
//! Further down the stack, [`whole`] and [`chunks`] read a body already bounded this way.

use bytes::{Bytes, BytesMut};
use context_relay_core::json::Pieces;
use http_body::Body;
use http_body_util::BodyExt;

use crate::budget::BudgetHold;
use crate::chunks::Chunks;
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

/// A request body read whole, and what was searched of it as it arrived.
#[derive(Debug)]
pub(crate) enum Collected<'n> {
    /// The body in one piece.
    Whole {
        /// The body.
        body: Buffered,
        /// The search given to [`collect_within`], fed with every byte of a joined body but
        /// its last few (a literal may continue past a chunk's end): [`Pieces::finish`]
        /// completes it. `None` for a body of one chunk, which is left to be searched whole.
        searched: Option<Pieces<'n>>,
    },
    /// The body in the chunks it came in (see [`chunks`](crate::chunks)), as the caller
    /// asked: each was given to [`Pieces::push`] as it arrived.
    Kept {
        /// The body.
        body: Chunks,
        /// The search, to be ended with [`Pieces::finish_pushed`].
        searched: Pieces<'n>,
    },
}

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

/// The most chunks a body is kept in: one sent in more (a slow client's, or one cut small on
/// purpose) is joined, so that the list of chunks stays short and each chunk's share of the
/// buffer hyper read it into stays small.
const MAX_KEPT_CHUNKS: usize = 64;

/// What [`collect_within`] holds of the body so far.
enum Held {
    Nothing,
    One(Bytes),
    Kept(Chunks),
    Joined(Vec<u8>),
}

/// Reads the whole body, at most `limit` bytes, taking its bytes from `hold` as they arrive.
///
/// A body that comes in one chunk is kept as it is. Otherwise the chunks are copied into one
/// buffer as they arrive and dropped, so the body is held once, never twice: at its declared
/// length (`content-length`) when there is one, else in a buffer that grows. The hold counts
/// the buffer's capacity, which is what the process really holds. `search`, when given, is
/// fed with the joined body as it grows. With `keep_chunks` (and a `search`), the chunks are
/// kept as they came instead, up to [`MAX_KEPT_CHUNKS`] of them, each given to the search.
/// The hold counts a kept chunk's bytes; the read buffer it is a slice of may be larger (a
/// read that did not fill hyper's buffer leaves the rest of it unused while the chunk lives):
/// at most one read buffer more per chunk (a quarter more than the bytes in a measured
/// 630 KB turn, see `docs/security.md`, "Measured attacks").
pub(crate) async fn collect_within<'n, B>(
    body: B,
    declared: Option<u64>,
    limit: usize,
    hold: &mut BudgetHold,
    mut search: Option<Pieces<'n>>,
    keep_chunks: bool,
) -> Result<Collected<'n>, Collect>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let keep_chunks = keep_chunks && search.is_some();
    let mut body = std::pin::pin!(body);
    let mut held = Held::Nothing;
    let mut total = 0usize;
    // The buffer a body is joined into: at its declared length when that is right.
    let expected = |total: usize| {
        declared
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n >= total && n <= limit)
            .unwrap_or(total)
    };
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Collect::Read(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if total > limit {
            return Err(Collect::TooLarge);
        }
        held = match std::mem::replace(&mut held, Held::Nothing) {
            Held::Joined(mut buf) => {
                append(&mut buf, &data, limit, hold)?;
                grown(&mut search, &buf);
                Held::Joined(buf)
            }
            Held::Nothing => {
                if !hold.take(data.len()) {
                    return Err(Collect::Budget);
                }
                Held::One(data)
            }
            Held::One(head) if keep_chunks => {
                if let Some(search) = &mut search {
                    search.push(&head);
                }
                let mut chunks = Chunks::from(head);
                keep(&mut chunks, data, hold, &mut search)?;
                Held::Kept(chunks)
            }
            Held::Kept(mut chunks) if chunks.count() < MAX_KEPT_CHUNKS => {
                keep(&mut chunks, data, hold, &mut search)?;
                Held::Kept(chunks)
            }
            // A second chunk, or one chunk too many to keep: from now on the body is joined.
            // The bytes held so far move into the buffer, whose capacity is taken before they do.
            Held::One(head) => {
                let mut buf = joined(&Chunks::from(head), expected(total), hold)?;
                append(&mut buf, &data, limit, hold)?;
                grown(&mut search, &buf);
                Held::Joined(buf)
            }
            Held::Kept(chunks) => {
                let mut buf = joined(&chunks, expected(total), hold)?;
                drop(chunks);
                append(&mut buf, &data, limit, hold)?;
                grown(&mut search, &buf);
                Held::Joined(buf)
            }
        };
    }
    Ok(match (held, search) {
        (Held::Kept(body), Some(searched)) => Collected::Kept { body, searched },
        (Held::Kept(chunks), None) => Collected::Whole {
            body: Buffered::Chunk(chunks.to_bytes()),
            searched: None,
        },
        (Held::Joined(buf), searched) => Collected::Whole {
            body: Buffered::Joined(buf),
            searched,
        },
        (Held::One(one), _) => Collected::Whole {
            body: Buffered::Chunk(one),
            searched: None,
        },
        (Held::Nothing, _) => Collected::Whole {
            body: Buffered::Chunk(Bytes::new()),
            searched: None,
        },
    })
}

/// Keeps `data` as a chunk of `chunks`, its bytes taken from `hold`, and searches it.
fn keep(
    chunks: &mut Chunks,
    data: Bytes,
    hold: &mut BudgetHold,
    search: &mut Option<Pieces<'_>>,
) -> Result<(), Collect> {
    if !hold.take(data.len()) {
        return Err(Collect::Budget);
    }
    if let Some(search) = search {
        search.push(&data);
    }
    chunks.push(data);
    Ok(())
}

/// `chunks` copied into a buffer of `expected` bytes behind [`HEADROOM`], its capacity taken
/// from `hold` before the chunks' own bytes go back to it.
fn joined(chunks: &Chunks, expected: usize, hold: &mut BudgetHold) -> Result<Vec<u8>, Collect> {
    let mut buf = Vec::new();
    reserve(&mut buf, HEADROOM + expected.max(chunks.len()), hold)?;
    buf.resize(HEADROOM, b' ');
    for chunk in chunks.iter() {
        buf.extend_from_slice(chunk);
    }
    hold.release(chunks.len());
    Ok(buf)
}

/// A body [`collect_within`] kept in chunks, joined after all (a reader needs it in one
/// piece), the chunks' bytes given back to `hold` for the buffer's.
pub(crate) fn join_kept(chunks: Chunks, hold: &mut BudgetHold) -> Result<Buffered, Collect> {
    joined(&chunks, chunks.len(), hold).map(Buffered::Joined)
}

/// How many new bytes wait for the search at least: a body sent in tiny chunks costs one call
/// of the search per this many bytes, not one per chunk, and that many bytes are still in the
/// core's cache when it runs.
const SEARCH_STEP: usize = 16 << 10;

/// Feeds `search` with the joined body so far (the bytes behind the headroom), once
/// [`SEARCH_STEP`] bytes have come since it last ran.
fn grown(search: &mut Option<Pieces<'_>>, buf: &[u8]) {
    if let (Some(search), Some(body)) = (search, buf.get(HEADROOM..))
        && body.len().saturating_sub(search.searched_to()) >= SEARCH_STEP
    {
        search.grown(body);
    }
}

/// Appends `data` to `buf`, taking what its capacity grows by from `hold`; its capacity never
/// grows past what a body of `limit` bytes needs (a body sent without its length, doubling its
/// way up, would otherwise hold up to twice the limit).
fn append(
    buf: &mut Vec<u8>,
    data: &[u8],
    limit: usize,
    hold: &mut BudgetHold,
) -> Result<(), Collect> {
    if buf.capacity() - buf.len() < data.len() {
        // Grows by doubling, as `Vec` would, but counted.
        let needed = buf.len() + data.len();
        let wanted = needed.max((buf.capacity() * 2).min(HEADROOM + limit));
        reserve(buf, wanted, hold)?;
    }
    buf.extend_from_slice(data);
    Ok(())
}

/// Grows `buf` to a capacity of exactly `capacity`, taking the difference from `hold`.
fn reserve(buf: &mut Vec<u8>, capacity: usize, hold: &mut BudgetHold) -> Result<(), Collect> {
    let more = capacity.saturating_sub(buf.capacity());
    if !hold.take(more) {
        return Err(Collect::Budget);
    }
    buf.reserve_exact(capacity - buf.len());
    Ok(())
}

/// Reads a body the gateway already bounded and buffered (what ComboService hands on, one
/// chunk as a rule): its only chunk as it came, without copying it and without the frame list
/// `http_body_util`'s `collect` allocates for it; several chunks joined into one buffer.
/// Empty chunks and trailers are skipped, as `collect().to_bytes()` skips them.
pub(crate) async fn whole<B>(body: B) -> Result<Bytes, B::Error>
where
    B: Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        match (&mut joined, first.take()) {
            (Some(buf), _) => buf.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(head)) => {
                let mut buf = BytesMut::with_capacity(head.len() + data.len());
                buf.extend_from_slice(&head);
                buf.extend_from_slice(&data);
                joined = Some(buf);
            }
        }
    }
    Ok(joined.map_or_else(|| first.unwrap_or_default(), BytesMut::freeze))
}

/// [`whole`] without joining: the chunks of a body the gateway already bounded and buffered
/// (one as a rule; a large body kept in its chunks), as they come. Empty chunks and trailers
/// are skipped.
pub(crate) async fn chunks<B>(body: B) -> Result<Chunks, B::Error>
where
    B: Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    let mut chunks = Chunks::default();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            chunks.push(data);
        }
    }
    Ok(chunks)
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

#[cfg(test)]
mod tests;
