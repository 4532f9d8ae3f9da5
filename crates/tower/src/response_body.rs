//! The response body both layers return: it replays what the relay read ahead, then the
//! inner body, and runs the relay's end-of-stream hook as soon as the inner body reports its
//! end (the consumer may not poll again), or when it fails, or on drop.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use context_relay_engine::{EndWatch, ReplyWatch};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The response body [`Generation`](crate::Generation) and
    /// [`Injection`](crate::Injection) return: the inner body, with the same data and error
    /// types, `is_end_stream` and `size_hint` forwarded.
    ///
    /// It replays whatever the injection side read ahead (a held-back stream opening, an error
    /// body it classified), then the inner body. When the request carried a claimed handoff or
    /// moves the session's affinity, it watches how the body ends: only a body that ended with
    /// the API's terminal success event (or a complete JSON body) completes the claim and
    /// records the affinity; a failed, cut or early-dropped body releases the claim. When the
    /// turn qualified for a summary, it captures the reply (bounded) and starts the summary
    /// once the reply is complete.
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

/// What watches the body's end.
// The ticket stays inline: it is on the fast path of every relayed request, where an
// allocation costs more than the bytes moved.
#[allow(clippy::large_enum_variant)]
pub(crate) enum EndHook {
    /// The injection side: completes or releases the request's ticket.
    Ticket(EndWatch),
    /// The generation side: starts the summary once the reply is complete (boxed: it holds
    /// the reply capture, and only the rare qualifying turn has one).
    Reply(Box<ReplyWatch>),
}

impl EndHook {
    fn push(&mut self, data: &[u8]) {
        match self {
            EndHook::Ticket(w) => w.push(data),
            EndHook::Reply(w) => w.push(data),
        }
    }

    fn end(self, errored: bool) {
        match self {
            EndHook::Ticket(w) => w.finish(errored),
            EndHook::Reply(mut w) if errored => w.failed(),
            EndHook::Reply(mut w) => w.ended(),
        }
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
                    h.push(data.as_ref());
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
