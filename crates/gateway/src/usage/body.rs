//! The response body wrapper that reads an answer's usage as it streams by.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_core::usage::UsageReader;
use http_body::{Body, Frame, SizeHint};

use super::{Labels, UsageLedger};
use crate::resolver::InBandQuota;

/// What a metered body counts, and where.
struct Meter {
    reader: UsageReader,
    ledger: UsageLedger,
    labels: Labels,
    /// The account, told of a quota failure the stream ended with.
    in_band: Option<InBandQuota>,
}

pin_project_lite::pin_project! {
    /// A response body that feeds every data frame to a [`UsageReader`] and counts the usage
    /// once: as soon as the inner body reports its end, or when the body is dropped (a cut
    /// stream, a client that went away), with what arrived. Without a meter it only forwards.
    pub(crate) struct MeteredBody<B> {
        #[pin]
        inner: B,
        // Inline: the upstream boxes this body whole (hyper's body and the idle timer with
        // it), once; a box of its own would be one more allocation per answer.
        meter: Option<Meter>,
    }

    impl<B> PinnedDrop for MeteredBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            count(this.meter);
        }
    }
}

impl<B> MeteredBody<B> {
    /// `inner`, its usage counted in `ledger` under `labels`; `encoding` is the body's
    /// `content-encoding`; `in_band` is told of the last failure event the stream carried
    /// (read in the same pass as the usage), when the body ends.
    pub(crate) fn new(
        inner: B,
        ledger: UsageLedger,
        labels: Labels,
        encoding: &str,
        in_band: Option<InBandQuota>,
    ) -> Self {
        Self {
            inner,
            meter: Some(Meter {
                reader: UsageReader::new(encoding),
                ledger,
                labels,
                in_band,
            }),
        }
    }

    /// `inner`, not metered.
    pub(crate) fn plain(inner: B) -> Self {
        Self { inner, meter: None }
    }
}

/// Counts the usage read so far, once, and tells the account of a failure the stream ended
/// with.
fn count(meter: &mut Option<Meter>) {
    let Some(mut m) = meter.take() else {
        return;
    };
    let usage = m.reader.finish();
    tell(&mut m);
    if let Some(usage) = usage {
        m.ledger.record(m.labels, &usage);
    }
}

/// Tells the account of the failure the stream carried, once.
fn tell(m: &mut Meter) {
    if let (Some(failure), Some(in_band)) = (m.reader.failure(), m.in_band.take()) {
        in_band.failed(failure);
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    // Inlined into its caller, as every wrapper of an answer's body is: hyper polls a stream's
    // body about three times per event (docs/performance.md, "The answer's wrappers inlined").
    #[inline(always)]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = std::task::ready!(this.inner.as_mut().poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let (Some(m), Some(data)) = (this.meter.as_mut(), f.data_ref()) {
                    m.reader.push_bytes(data);
                    // Told as soon as read: the client may retry before the provider closes
                    // the failed stream, and the retry must find the account out.
                    if m.in_band.is_some() && m.reader.failure().is_some() {
                        tell(m);
                    }
                }
                // The consumer may not poll again once the body says it ended.
                if this.inner.is_end_stream() {
                    count(this.meter);
                }
            }
            None => count(this.meter),
            // A failed body is cut: what arrived is counted when it is dropped.
            Some(Err(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
