use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use context_relay_core::ending::Ending;
use context_relay_core::reply::ReplyCapture;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::task::Job;

pin_project! {
    /// The request body [`Generation`](super::Generation) hands to the inner service.
    ///
    /// It forwards the client's body frame by frame, keeping a copy of the frames it forwards
    /// (cheap `Bytes` clones, bounded by `max_body_bytes`) when the request may need a
    /// summary later; it never delays a frame. It also carries the bodies of the layer's own
    /// summary requests.
    pub struct RequestBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        // Forwarded as is.
        Passthrough { #[pin] inner: B },
        // Forwarded as is, with a copy kept.
        Tee { #[pin] inner: B, capture: Arc<Capture> },
        // A body the layer made (a summary request).
        Full { data: Option<Bytes> },
    }
}

impl<B> RequestBody<B> {
    pub(crate) fn passthrough(inner: B) -> Self {
        Self {
            kind: Kind::Passthrough { inner },
        }
    }

    pub(crate) fn tee(inner: B, capture: Arc<Capture>) -> Self
    where
        B: Body,
    {
        // An empty body may never be polled (hyper's client checks `is_end_stream` first).
        if inner.is_end_stream() {
            capture.finish();
        }
        Self {
            kind: Kind::Tee { inner, capture },
        }
    }

    /// A complete body made of `data`.
    pub fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
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
            KindProj::Passthrough { inner } => inner.poll_frame(cx),
            KindProj::Tee { mut inner, capture } => {
                let polled = inner.as_mut().poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            capture.push(data);
                        }
                        // hyper's client stops polling once the body says it has ended, so
                        // the trailing `None` may never come.
                        if inner.is_end_stream() {
                            capture.finish();
                        }
                    }
                    Poll::Ready(None) => capture.finish(),
                    Poll::Ready(Some(Err(_))) => capture.fail(),
                    Poll::Pending => {}
                }
                polled
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passthrough { inner } | Kind::Tee { inner, .. } => inner.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passthrough { inner } | Kind::Tee { inner, .. } => inner.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

/// The copy of a request body kept for a later summary.
#[derive(Debug)]
pub(crate) struct Capture {
    limit: usize,
    state: Mutex<CaptureState>,
}

#[derive(Debug, Default)]
struct CaptureState {
    frames: Vec<Bytes>,
    len: usize,
    // Over the limit or failed: nothing usable is kept.
    abandoned: bool,
    complete: bool,
}

impl Capture {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            state: Mutex::new(CaptureState::default()),
        }
    }

    fn with_state<R>(&self, f: impl FnOnce(&mut CaptureState) -> R) -> R {
        match self.state.lock() {
            Ok(mut s) => f(&mut s),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    fn push(&self, data: &Bytes) {
        let limit = self.limit;
        self.with_state(|s| {
            if s.abandoned {
                return;
            }
            if s.len + data.len() > limit {
                s.abandoned = true;
                s.frames = Vec::new();
                return;
            }
            s.len += data.len();
            s.frames.push(data.clone());
        });
    }

    fn finish(&self) {
        self.with_state(|s| s.complete = true);
    }

    fn fail(&self) {
        self.with_state(|s| {
            s.abandoned = true;
            s.frames = Vec::new();
        });
    }

    /// The whole body, once it was forwarded completely within the limit.
    pub(crate) fn bytes(&self) -> Option<Bytes> {
        self.with_state(|s| {
            if s.abandoned || !s.complete {
                return None;
            }
            Some(match s.frames.len() {
                0 => Bytes::new(),
                1 => s.frames[0].clone(),
                _ => {
                    let mut all = BytesMut::with_capacity(s.len);
                    for f in &s.frames {
                        all.extend_from_slice(f);
                    }
                    all.freeze()
                }
            })
        })
    }
}

pin_project! {
    /// The response body [`Generation`](super::Generation) returns.
    ///
    /// When the response qualified for a summary, it captures the assistant's reply of this
    /// turn as it streams by (bounded) and starts the summary as soon as the inner body
    /// reports its end. A streamed reply whose terminal event (`[DONE]` after a finish reason,
    /// `response.completed`, `message_stop`) has been seen is complete even if the client drops
    /// the body before the upstream closes it. A body that failed, ended with an in-band
    /// failure, or was dropped before its terminal event starts nothing and frees the session's
    /// in-flight key.
    pub struct ResponseBody<B> {
        #[pin]
        inner: B,
        trigger: Armed,
    }
}

pub(crate) struct Trigger {
    pub(crate) reply: ReplyCapture,
    pub(crate) job: Job,
}

/// A trigger that fires on drop when the reply was already complete.
pub(crate) struct Armed(Option<Trigger>);

impl Armed {
    fn push(&mut self, data: &[u8]) {
        if let Some(t) = &mut self.0 {
            t.reply.push(data);
        }
    }

    /// The body ended: summarise unless it ended with an in-band failure.
    fn ended(&mut self) {
        if let Some(mut t) = self.0.take()
            && t.reply.ending() != Ending::Failed
        {
            t.job.start(t.reply.finish());
        }
    }

    fn disarm(&mut self) {
        self.0.take();
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let Some(mut t) = self.0.take()
            && t.reply.ending() == Ending::Completed
        {
            t.job.start(t.reply.finish());
        }
    }
}

impl<B: Body> ResponseBody<B> {
    pub(crate) fn new(inner: B, trigger: Option<Trigger>) -> Self {
        let mut trigger = Armed(trigger);
        // An empty body may never be polled: its turn has ended already.
        if inner.is_end_stream() {
            trigger.ended();
        }
        Self { inner, trigger }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.trigger.push(data.as_ref());
                }
                // The consumer may never poll again after the last frame: fire now.
                if this.inner.is_end_stream() {
                    this.trigger.ended();
                }
            }
            Poll::Ready(None) => this.trigger.ended(),
            // A failed stream: the turn did not complete; free the key.
            Poll::Ready(Some(Err(_))) => this.trigger.disarm(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
