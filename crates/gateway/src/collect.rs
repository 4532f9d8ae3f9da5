//! Reading a request body within the gateway's bounds: at most `max_request_bytes`, every
//! chunk's bytes taken from the shared [`ByteBudget`](crate::budget::ByteBudget) as it arrives,
//! and the client body timeout recognised so that it can be answered with a 408.

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;

use crate::budget::BudgetHold;
use crate::combo::BoxError;

/// Why a body could not be read.
pub(crate) enum Collect {
    /// Over the size limit.
    TooLarge,
    /// The budget of buffered bytes is spent.
    Budget,
    /// The body failed (the client went away, or stalled past the body timeout).
    Read(BoxError),
}

/// Reads the whole body, at most `limit` bytes, taking each chunk's bytes from `hold`.
pub(crate) async fn collect_within<B>(
    body: B,
    limit: usize,
    hold: &mut BudgetHold,
) -> Result<Bytes, Collect>
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
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => {
            let mut all = Vec::with_capacity(total);
            for c in &chunks {
                all.extend_from_slice(c);
            }
            Bytes::from(all)
        }
    })
}

/// Whether `e` (or what caused it) is the client body timeout.
pub(crate) fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cur = err.source();
    }
    false
}
