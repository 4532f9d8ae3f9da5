use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use context_relay_core::ending::{EndDetector, Ending};
use context_relay_core::portable;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::after::After;

pin_project! {
    /// The request body [`Injection`](super::Injection) hands to the inner service.
    pub struct RequestBody<B: Body> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B: Body> {
        // The client's body, untouched (the fast path); the frames may be kept (shared, not
        // copied) so that a request the provider rejects for account-bound state can be sent
        // again.
        Passthrough { #[pin] inner: B, tee: Option<Arc<Tee>> },
        // A body the layer rewrote (or read whole and forwards as it was).
        Full { data: Option<Bytes> },
        // Frames the layer read before giving up on a rewrite (too large, trailers, a body
        // error), then the rest of the client's body, or the error the read stopped at.
        Replay {
            buffered: VecDeque<Frame<Bytes>>,
            rest: Pin<Box<B>>,
            rest_done: bool,
            failed: Option<B::Error>,
        },
    }
}

impl<B: Body> RequestBody<B> {
    pub(crate) fn passthrough(inner: B, tee: Option<Arc<Tee>>) -> Self {
        Self {
            kind: Kind::Passthrough { inner, tee },
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    pub(crate) fn replay(buffered: VecDeque<Frame<Bytes>>, rest: Pin<Box<B>>) -> Self {
        Self {
            kind: Kind::Replay {
                buffered,
                rest,
                rest_done: false,
                failed: None,
            },
        }
    }

    /// The frames read before the client's body failed, then that failure: the inner service
    /// sees the body fail, never a complete, shorter one.
    pub(crate) fn replay_failed(
        buffered: VecDeque<Frame<Bytes>>,
        rest: Pin<Box<B>>,
        error: B::Error,
    ) -> Self {
        Self {
            kind: Kind::Replay {
                buffered,
                rest,
                rest_done: true,
                failed: Some(error),
            },
        }
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Passthrough { inner, tee } => {
                let polled = inner.poll_frame(cx);
                if let Some(tee) = tee {
                    match &polled {
                        Poll::Ready(Some(Ok(frame))) => tee.keep(frame.data_ref()),
                        Poll::Ready(None) => tee.end(),
                        Poll::Ready(Some(Err(_))) => tee.keep(None),
                        Poll::Pending => {}
                    }
                }
                polled
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Replay {
                buffered,
                rest,
                rest_done,
                failed,
            } => {
                if let Some(frame) = buffered.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                if let Some(e) = failed.take() {
                    return Poll::Ready(Some(Err(e)));
                }
                if *rest_done {
                    return Poll::Ready(None);
                }
                let polled = rest.as_mut().poll_frame(cx);
                if let Poll::Ready(None) = polled {
                    *rest_done = true;
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passthrough { inner, tee } => {
                let end = inner.is_end_stream();
                if end && let Some(tee) = tee {
                    tee.end();
                }
                end
            }
            Kind::Full { data } => data.is_none(),
            Kind::Replay {
                buffered,
                rest,
                rest_done,
                failed,
            } => buffered.is_empty() && failed.is_none() && (*rest_done || rest.is_end_stream()),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passthrough { inner, .. } => inner.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Replay {
                buffered,
                rest,
                rest_done,
                ..
            } => {
                let buffered_len: u64 = buffered
                    .iter()
                    .filter_map(|f| f.data_ref())
                    .map(|d| d.len() as u64)
                    .sum();
                if *rest_done {
                    return SizeHint::with_exact(buffered_len);
                }
                let r = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(r.lower().saturating_add(buffered_len));
                if let Some(upper) = r.upper() {
                    hint.set_upper(upper.saturating_add(buffered_len));
                }
                hint
            }
        }
    }
}

/// The frames of a passed-through request body, kept by reference as they go out, up to a
/// limit: what a repair sends again. Trailers, a body error or a body above the limit give up.
#[derive(Debug)]
pub(crate) struct Tee {
    limit: usize,
    state: Mutex<TeeState>,
}

#[derive(Debug, Default)]
struct TeeState {
    frames: Vec<Bytes>,
    len: usize,
    given_up: bool,
    ended: bool,
    /// Account-bound state was seen in the frames kept so far.
    bound: bool,
    /// The last bytes kept (up to a marker's length minus one): a marker split between two
    /// frames is found across them.
    tail: Tail,
}

/// The bytes a marker split between two frames may start with.
const TAIL: usize = portable::BOUND_MARKER_MAX_LEN - 1;

#[derive(Debug, Default)]
struct Tail {
    bytes: [u8; TAIL],
    len: usize,
}

impl Tail {
    fn get(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Whether `data`, following what was kept, makes the body look account-bound.
    fn scan(&mut self, data: &[u8]) -> bool {
        if portable::may_carry_bound_state(data) {
            return true;
        }
        // Across the seam: the tail, then the start of `data`.
        let head = &data[..data.len().min(TAIL)];
        let mut seam = [0u8; 2 * TAIL];
        let tail_len = self.len;
        seam[..tail_len].copy_from_slice(self.get());
        seam[tail_len..tail_len + head.len()].copy_from_slice(head);
        let seam = &seam[..tail_len + head.len()];
        if portable::may_carry_bound_state(seam) {
            return true;
        }
        // The new tail: the last `TAIL` bytes of the seam (which ends where `data` does when
        // `data` is short) or of `data`.
        let last = if data.len() >= TAIL {
            &data[data.len() - TAIL..]
        } else {
            &seam[seam.len().saturating_sub(TAIL)..]
        };
        let mut bytes = [0u8; TAIL];
        bytes[..last.len()].copy_from_slice(last);
        self.bytes = bytes;
        self.len = last.len();
        false
    }
}

impl Tee {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            state: Mutex::default(),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut TeeState) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A data frame (`Some`) went out, or something that cannot be kept (`None`).
    fn keep(&self, data: Option<&Bytes>) {
        self.with(|s| {
            if s.given_up {
                return;
            }
            match data {
                Some(d) if s.len + d.len() <= self.limit => {
                    s.len += d.len();
                    if !s.bound {
                        s.bound = s.tail.scan(d);
                    }
                    s.frames.push(d.clone());
                }
                _ => {
                    s.given_up = true;
                    s.frames = Vec::new();
                }
            }
        });
    }

    fn end(&self) {
        self.with(|s| s.ended = true);
    }

    /// Whether all of the body went out and was kept, and may carry account-bound state
    /// (scanned as it went out: nothing is joined).
    pub(crate) fn may_be_bound(&self) -> bool {
        self.with(|s| s.ended && !s.given_up && s.bound)
    }

    /// The whole body, when all of it went out and was kept (joined once, kept joined).
    pub(crate) fn whole(&self) -> Option<Bytes> {
        self.with(|s| {
            if s.given_up || !s.ended {
                return None;
            }
            let whole = match s.frames.len() {
                0 => Bytes::new(),
                1 => s.frames[0].clone(),
                _ => {
                    let mut all = BytesMut::with_capacity(s.len);
                    for f in &s.frames {
                        all.extend_from_slice(f);
                    }
                    all.freeze()
                }
            };
            s.frames = vec![whole.clone()];
            Some(whole)
        })
    }
}

pin_project! {
    /// The response body [`Injection`](super::Injection) returns.
    ///
    /// It replays whatever the layer read ahead (a held-back stream opening, an error body it
    /// classified), then the inner body. When the request carried a claimed handoff or moves
    /// the session's affinity, it watches how the body ends: only a body that ended with the
    /// API's terminal success event (or a complete JSON body) completes the claim and records
    /// the affinity; a failed, cut or early-dropped body releases the claim.
    pub struct ResponseBody<B: Body> {
        #[pin]
        inner: Inner<B>,
        prefix: VecDeque<Result<Frame<B::Data>, B::Error>>,
        // The inner body already gave its `None` (read ahead): it is not polled again.
        inner_done: bool,
        hook: Option<EndHook>,
    }
}

pin_project! {
    #[project = InnerProj]
    enum Inner<B> {
        Plain { #[pin] body: B },
        Boxed { body: Pin<Box<B>> },
    }
}

/// Watches the body's end for an [`After`].
pub(crate) struct EndHook {
    pub(crate) detector: EndDetector,
    pub(crate) after: After,
}

impl EndHook {
    fn end(mut self, errored: bool) {
        let ending = if errored {
            Ending::Unfinished
        } else {
            self.detector.finish()
        };
        self.after.ended(ending);
    }
}

impl<B: Body> ResponseBody<B>
where
    B::Data: AsRef<[u8]>,
{
    pub(crate) fn plain(body: B, hook: Option<EndHook>) -> Self {
        Self::start(Inner::Plain { body }, VecDeque::new(), false, hook)
    }

    /// `inner_done`: the inner body was read up to its `None` while `prefix` was read ahead.
    pub(crate) fn boxed(
        body: Pin<Box<B>>,
        prefix: VecDeque<Result<Frame<B::Data>, B::Error>>,
        inner_done: bool,
        hook: Option<EndHook>,
    ) -> Self {
        Self::start(Inner::Boxed { body }, prefix, inner_done, hook)
    }

    fn start(
        inner: Inner<B>,
        prefix: VecDeque<Result<Frame<B::Data>, B::Error>>,
        inner_done: bool,
        mut hook: Option<EndHook>,
    ) -> Self {
        // An empty body may never be polled: judge it now.
        if prefix.is_empty()
            && (inner_done || inner.is_end_stream())
            && let Some(h) = hook.take()
        {
            h.end(false);
        }
        Self {
            inner,
            prefix,
            inner_done,
            hook,
        }
    }
}

impl<B: Body> Inner<B> {
    fn is_end_stream(&self) -> bool {
        match self {
            Inner::Plain { body } => body.is_end_stream(),
            Inner::Boxed { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Inner::Plain { body } => body.size_hint(),
            Inner::Boxed { body } => body.size_hint(),
        }
    }
}

impl<B: Body> Body for ResponseBody<B>
where
    B::Data: AsRef<[u8]>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        if let Some(item) = this.prefix.pop_front() {
            // Read ahead: already fed to the detector.
            let failed = item.is_err();
            if (failed
                || (this.prefix.is_empty() && (*this.inner_done || this.inner.is_end_stream())))
                && let Some(h) = this.hook.take()
            {
                h.end(failed);
            }
            return Poll::Ready(Some(item));
        }
        if *this.inner_done {
            if let Some(h) = this.hook.take() {
                h.end(false);
            }
            return Poll::Ready(None);
        }
        let polled = match this.inner.as_mut().project() {
            InnerProj::Plain { body } => body.poll_frame(cx),
            InnerProj::Boxed { body } => body.as_mut().poll_frame(cx),
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(h) = this.hook.as_mut()
                    && let Some(data) = frame.data_ref()
                {
                    h.detector.push(data.as_ref());
                }
                // The consumer may never poll again after the last frame.
                if this.inner.is_end_stream()
                    && let Some(h) = this.hook.take()
                {
                    h.end(false);
                }
            }
            Poll::Ready(None) => {
                if let Some(h) = this.hook.take() {
                    h.end(false);
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(h) = this.hook.take() {
                    h.end(true);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && (self.inner_done || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let held: u64 = self
            .prefix
            .iter()
            .filter_map(|f| f.as_ref().ok().and_then(Frame::data_ref))
            .map(|d| d.as_ref().len() as u64)
            .sum();
        if self.inner_done {
            return SizeHint::with_exact(held);
        }
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(held));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body_with_markers() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..40),
            Just(b"\"encrypted_content\"".to_vec()),
            Just(b"\"previous_response_id\"".to_vec()),
            Just(b"\"signature\"".to_vec()),
            Just(b"\"encrypted_con".to_vec()),
        ];
        prop::collection::vec(piece, 0..6).prop_map(|p| p.concat())
    }

    proptest! {
        /// Scanned frame by frame, a body looks account-bound exactly when it does whole,
        /// wherever the frames split it.
        #[test]
        fn frames_scanned_one_by_one_find_what_the_whole_body_has(
            body in body_with_markers(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
            at.sort_unstable();
            let tee = Tee::new(usize::MAX);
            let mut from = 0;
            for to in at.into_iter().chain([body.len()]) {
                tee.keep(Some(&Bytes::copy_from_slice(&body[from..to])));
                from = to;
            }
            prop_assert!(!tee.may_be_bound() || portable::may_carry_bound_state(&body));
            tee.end();
            prop_assert_eq!(tee.may_be_bound(), portable::may_carry_bound_state(&body));
        }
    }
}
