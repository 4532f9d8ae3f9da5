//! A buffered request body held as the chunks it arrived in.
//!
//! ComboService buffers every body it routes. A large body whose head names the session (an
//! agent client's late turn: a megabyte of history, sent with a session header) needs nothing
//! from its bytes but `model`, near its start, and the search for a second `model`, made as the
//! chunks arrive: it is kept as hyper read it, not copied into one buffer (on the perf
//! harness's 1 MiB turn that copy was about a tenth of the gateway's time per request), and
//! forwarded chunk by chunk. `model` is written by replacing the few bytes of its literal (for
//! a later target too); a reader that needs the body in one piece (the relay rewriting a
//! switched session's request, a translation, a summary) joins it.
//!
//! [`Chunks`] is that body: cheap to clone (each chunk is shared), and a [`Body`] that yields
//! its chunks in order.

use std::borrow::Cow;
use std::convert::Infallible;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use smallvec::SmallVec;

/// A body in chunks, none of them empty (see the module docs). A body of one chunk, the rule,
/// is as small as the chunk itself (it is moved through every layer of the stack); more go
/// behind one box.
#[derive(Debug, Clone, Default)]
pub(crate) struct Chunks(Repr);

/// No chunk is `One` of an empty `Bytes` (which allocates nothing): a third variant would make
/// the enum larger than a `Bytes`.
#[derive(Debug, Clone)]
enum Repr {
    One(Bytes),
    Many(Box<Many>),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::One(Bytes::new())
    }
}

#[derive(Debug, Clone)]
struct Many {
    parts: Vec<Bytes>,
    /// The first chunk not yet yielded as a [`Body`].
    next: usize,
    /// The bytes of the chunks not yet yielded.
    len: usize,
}

impl From<Bytes> for Chunks {
    fn from(bytes: Bytes) -> Self {
        // An empty `Bytes` is no chunk already.
        Chunks(Repr::One(bytes))
    }
}

impl Chunks {
    /// Appends `chunk` (an empty one adds nothing).
    pub(crate) fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.0 = match std::mem::take(&mut self.0) {
            Repr::One(first) if first.is_empty() => Repr::One(chunk),
            Repr::One(first) => Repr::Many(Box::new(Many {
                len: first.len() + chunk.len(),
                parts: vec![first, chunk],
                next: 0,
            })),
            Repr::Many(mut many) => {
                many.len += chunk.len();
                many.parts.push(chunk);
                Repr::Many(many)
            }
        };
    }

    /// The body's length in bytes.
    pub(crate) fn len(&self) -> usize {
        match &self.0 {
            Repr::One(one) => one.len(),
            Repr::Many(many) => many.len,
        }
    }

    /// How many chunks the body is in.
    pub(crate) fn count(&self) -> usize {
        self.as_slice().len()
    }

    /// The chunks, in order.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Bytes> {
        self.as_slice().iter()
    }

    fn as_slice(&self) -> &[Bytes] {
        match &self.0 {
            Repr::One(one) if one.is_empty() => &[],
            Repr::One(one) => std::slice::from_ref(one),
            Repr::Many(many) => many.parts.get(many.next..).unwrap_or_default(),
        }
    }

    /// The body in one piece: its only chunk as it is, several joined (copied) into one.
    pub(crate) fn to_bytes(&self) -> Bytes {
        match self.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            _ => Bytes::from(self.bytes_in(0..self.len()).into_owned()),
        }
    }

    /// The bytes at `range` (cut to the body's end): borrowed from the chunk that holds them
    /// all, copied when they cross from one chunk to the next.
    pub(crate) fn bytes_in(&self, range: Range<usize>) -> Cow<'_, [u8]> {
        let range = range.start.min(self.len())..range.end.min(self.len());
        if let Some((_, at, chunk)) = self.chunk_of(&range) {
            return Cow::Borrowed(&chunk[range.start - at..range.end - at]);
        }
        let mut bytes = Vec::with_capacity(range.len());
        let mut at = 0;
        for chunk in self.iter() {
            let (from, to) = (range.start.max(at), range.end.min(at + chunk.len()));
            if from < to {
                bytes.extend_from_slice(&chunk[from - at..to - at]);
            }
            at += chunk.len();
        }
        Cow::Owned(bytes)
    }

    /// The chunk that holds all of `span` (positions in the whole body): its index among
    /// [`Chunks::iter`]'s, where it starts, and the chunk; `None` when the span crosses a
    /// chunk's end or lies past the body.
    pub(crate) fn chunk_of(&self, span: &Range<usize>) -> Option<(usize, usize, &Bytes)> {
        let mut start = 0;
        for (index, chunk) in self.iter().enumerate() {
            let end = start + chunk.len();
            if span.start < end || span.end <= end {
                return (span.start >= start && span.start <= span.end && span.end <= end)
                    .then_some((index, start, chunk));
            }
            start = end;
        }
        None
    }

    /// The body with the chunk that holds `span` replaced by the pieces `edit` makes of it
    /// (given the chunk and the span within it); the other chunks are shared, not copied.
    /// `None` when no chunk holds all of `span`, or `edit` gives `None`.
    pub(crate) fn edit_chunk(
        &self,
        span: &Range<usize>,
        edit: impl FnOnce(&Bytes, Range<usize>) -> Option<SmallVec<[Bytes; 3]>>,
    ) -> Option<Chunks> {
        let (index, at, chunk) = self.chunk_of(span)?;
        let made = edit(chunk, span.start - at..span.end - at)?;
        let mut out = Chunks::default();
        for (i, chunk) in self.iter().enumerate() {
            if i == index {
                made.iter().for_each(|piece| out.push(piece.clone()));
            } else {
                out.push(chunk.clone());
            }
        }
        Some(out)
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let chunk = match &mut this.0 {
            Repr::One(one) => Some(std::mem::take(one)).filter(|one| !one.is_empty()),
            Repr::Many(many) => many.parts.get_mut(many.next).map(|slot| {
                let chunk = std::mem::take(slot);
                many.next += 1;
                many.len -= chunk.len();
                chunk
            }),
        };
        Poll::Ready(chunk.map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.as_slice().is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;
    use proptest::prelude::*;

    use super::*;

    fn chunked(pieces: &[Vec<u8>]) -> Chunks {
        let mut chunks = Chunks::default();
        for piece in pieces {
            chunks.push(Bytes::from(piece.clone()));
        }
        chunks
    }

    proptest! {
        /// Read as a body or joined, the chunks are the bytes pushed, in order; the body
        /// tells its exact length and its end as it is read.
        #[test]
        fn a_body_of_chunks_is_its_bytes_in_order(
            pieces in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..6),
        ) {
            let whole: Vec<u8> = pieces.concat();
            let chunks = chunked(&pieces);
            prop_assert_eq!(chunks.len(), whole.len());
            prop_assert_eq!(&chunks.to_bytes()[..], &whole[..]);
            prop_assert_eq!(chunks.count(), pieces.iter().filter(|p| !p.is_empty()).count());
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let mut body = chunks.clone();
            let mut read = Vec::new();
            rt.block_on(async {
                while let Some(frame) = body.frame().await {
                    assert_eq!(body.size_hint().exact(), Some((whole.len() - read.len() - frame.as_ref().unwrap().data_ref().unwrap().len()) as u64));
                    read.extend_from_slice(frame.unwrap().data_ref().unwrap());
                }
            });
            prop_assert_eq!(&read[..], &whole[..]);
            prop_assert!(body.is_end_stream());
            prop_assert_eq!(body.size_hint().exact(), Some(0));
        }

        /// Any stretch of the body is its bytes, borrowed when one chunk holds it.
        #[test]
        fn a_stretch_of_chunks_is_those_bytes_of_the_whole(
            pieces in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 0..5),
            from in 0usize..110,
            len in 0usize..40,
        ) {
            let whole: Vec<u8> = pieces.concat();
            let chunks = chunked(&pieces);
            let got = chunks.bytes_in(from..from + len);
            let (from, to) = (from.min(whole.len()), (from + len).min(whole.len()));
            prop_assert_eq!(&got[..], &whole[from..to]);
            let one = chunks.chunk_of(&(from..to)).is_some();
            prop_assert_eq!(matches!(got, Cow::Borrowed(_)), one);
        }

        /// An edit of a span replaces exactly that span of the whole body, wherever the chunks
        /// are cut; a span across a cut is refused.
        #[test]
        fn an_edit_replaces_its_span_of_the_whole(
            pieces in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..20), 1..5),
            span in (0usize..100, 0usize..10),
            new in prop::collection::vec(any::<u8>(), 0..8),
        ) {
            let whole: Vec<u8> = pieces.concat();
            let chunks = chunked(&pieces);
            let span = span.0..span.0 + span.1;
            let mut cuts = vec![0];
            for p in &pieces {
                cuts.push(cuts.last().unwrap() + p.len());
            }
            let inside = cuts.windows(2).any(|w| span.start >= w[0] && span.end <= w[1]);
            let edited = chunks.edit_chunk(&span, |chunk, local| {
                let mut out = SmallVec::new();
                out.push(chunk.slice(..local.start));
                out.push(Bytes::from(new.clone()));
                out.push(chunk.slice(local.end..));
                Some(out)
            });
            match edited {
                Some(edited) => {
                    prop_assert!(inside);
                    let mut expected = whole[..span.start].to_vec();
                    expected.extend_from_slice(&new);
                    expected.extend_from_slice(&whole[span.end..]);
                    prop_assert_eq!(&edited.to_bytes()[..], &expected[..]);
                    prop_assert_eq!(edited.len(), expected.len());
                }
                None => prop_assert!(!inside),
            }
        }
    }

    /// One chunk is held as it is, in no more room than a `Bytes`, and handed on without a
    /// copy.
    #[test]
    fn one_chunk_is_not_copied() {
        assert_eq!(std::mem::size_of::<Chunks>(), std::mem::size_of::<Bytes>());
        let bytes = Bytes::from_static(b"{\"model\":\"m\"}");
        let chunks = Chunks::from(bytes.clone());
        assert!(matches!(chunks.0, Repr::One(_)));
        assert_eq!(chunks.to_bytes().as_ptr(), bytes.as_ptr());
        assert_eq!(Chunks::from(Bytes::new()).count(), 0);
    }
}
