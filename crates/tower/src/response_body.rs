//! The response body both layers return: it replays what the relay read ahead, then the
//! inner body, and runs the relay's end-of-stream hook as soon as the inner body reports its
//! end (the consumer may not poll again), or when it fails, or on drop.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use context_relay_engine::{Attempt, Turn};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;

pin_project! {
    /// The response body [`Generation`](crate::Generation) and
    /// [`Injection`](crate::Injection) return: the inner body, with the same data and error
    /// types, `is_end_stream` and `size_hint` forwarded.
    ///
    /// It replays whatever the injection side read ahead (a held-back stream opening, an error
    /// body it classified), then the inner body. When the request carried a claimed handoff or
    /// moves the session's affinity, it watches how the body ends: only a body whose API
    /// terminal success event (or complete JSON) was handed on completes the claim and records
    /// the affinity, also when it is dropped or fails after that event; a failed, cut or
    /// early-dropped body releases the claim. When the
    /// turn qualified for a summary, it captures the reply (bounded) and starts the summary
    /// once the reply is complete.
    pub struct ResponseBody<B: Body> {
        #[pin]
        inner: Inner<B>,
        hook: Option<EndHook>,
    }
}

pin_project! {
    // Small on the pass-through path: responses are moved several times on their way out, and
    // both layers nest their bodies, so every byte here is copied a few times per request.
    #[project = InnerProj]
    enum Inner<B: Body> {
        // The inner body, untouched.
        Plain { #[pin] body: B },
        // The inner body after frames were read ahead of the consumer.
        Ahead {
            body: Pin<Box<B>>,
            prefix: VecDeque<Result<Frame<B::Data>, B::Error>>,
            // The inner body already gave its `None` (read ahead): it is not polled again.
            done: bool,
            // An error read ahead is held back a moment (see `poll_frame`).
            held: Held,
        },
    }
}

/// The phase object that watches the body's end. The attempt is boxed (the turn is a few
/// pointers): the pass-through path has no hook at all, and a hook inline would make every
/// response body (nested once per layer) several hundred bytes larger.
pub(crate) enum EndHook {
    /// The injection side: completes or releases the request's handoff.
    Attempt(Box<Attempt>),
    /// The generation side: starts the summary once the reply is complete (only the rare
    /// qualifying turn watches its reply).
    Turn(Turn),
}

impl EndHook {
    fn push(&mut self, data: &[u8]) {
        match self {
            EndHook::Attempt(a) => a.response_chunk(data),
            EndHook::Turn(t) => t.response_chunk(data),
        }
    }

    fn end(self, errored: bool) {
        match self {
            EndHook::Attempt(a) => a.end(errored),
            EndHook::Turn(t) => t.end(errored),
        }
    }
}

impl<B: Body> ResponseBody<B>
where
    B::Data: AsRef<[u8]>,
{
    pub(crate) fn plain(body: B, hook: Option<EndHook>) -> Self {
        Self::start(Inner::Plain { body }, hook)
    }

    /// `done`: the inner body was read up to its `None` while `prefix` was read ahead.
    pub(crate) fn boxed(
        body: Pin<Box<B>>,
        prefix: VecDeque<Result<Frame<B::Data>, B::Error>>,
        done: bool,
        hook: Option<EndHook>,
    ) -> Self {
        Self::start(
            Inner::Ahead {
                body,
                prefix,
                done,
                held: Held::No,
            },
            hook,
        )
    }

    fn start(inner: Inner<B>, mut hook: Option<EndHook>) -> Self {
        // An empty body may never be polled: judge it now.
        if inner.is_end_stream()
            && let Some(h) = hook.take()
        {
            h.end(false);
        }
        Self { inner, hook }
    }
}

impl<B: Body> Inner<B>
where
    B::Data: AsRef<[u8]>,
{
    fn is_end_stream(&self) -> bool {
        match self {
            Inner::Plain { body } => body.is_end_stream(),
            Inner::Ahead {
                body, prefix, done, ..
            } => prefix.is_empty() && (*done || body.is_end_stream()),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let (body, prefix) = match self {
            Inner::Plain { body } => return body.size_hint(),
            Inner::Ahead {
                done: true, prefix, ..
            } => return SizeHint::with_exact(held(prefix)),
            Inner::Ahead { body, prefix, .. } => (body, prefix),
        };
        let held = held(prefix);
        let inner = body.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(held));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}

/// How long an error read ahead is held back after the data before it (see
/// [`ResponseBody`]'s `poll_frame`).
pub(crate) const ERROR_HOLD: Duration = Duration::from_millis(50);

/// Where the hold of an error read ahead stands.
enum Held {
    /// Not started.
    No,
    /// Until the timer fires.
    Until(Pin<Box<Sleep>>),
    /// Over: the error goes on.
    Over,
}

impl Held {
    /// Whether the error is still held (the task is woken when it is no longer).
    fn pending(&mut self, cx: &mut Context<'_>) -> bool {
        if let Held::No = self {
            *self = Held::Until(Box::pin(tokio::time::sleep(ERROR_HOLD)));
        }
        if let Held::Until(until) = self
            && until.as_mut().poll(cx).is_pending()
        {
            return true;
        }
        *self = Held::Over;
        false
    }
}

/// The data bytes read ahead.
fn held<D: AsRef<[u8]>, E>(prefix: &VecDeque<Result<Frame<D>, E>>) -> u64 {
    prefix
        .iter()
        .filter_map(|f| f.as_ref().ok().and_then(Frame::data_ref))
        .map(|d| d.as_ref().len() as u64)
        .sum()
}

/// What polling a body gives.
type Polled<B> = Poll<Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>>;

/// Feeds what the inner body gave to the hook; ends the hook at the body's end.
fn observe<B: Body>(polled: &Polled<B>, hook: &mut Option<EndHook>, ended: impl FnOnce() -> bool)
where
    B::Data: AsRef<[u8]>,
{
    if hook.is_none() {
        return;
    }
    match polled {
        Poll::Ready(Some(Ok(frame))) => {
            if let Some(h) = hook.as_mut()
                && let Some(data) = frame.data_ref()
            {
                h.push(data.as_ref());
            }
            // The consumer may never poll again after the last frame.
            if ended()
                && let Some(h) = hook.take()
            {
                h.end(false);
            }
        }
        Poll::Ready(None) => {
            if let Some(h) = hook.take() {
                h.end(false);
            }
        }
        Poll::Ready(Some(Err(_))) => {
            if let Some(h) = hook.take() {
                h.end(true);
            }
        }
        Poll::Pending => {}
    }
}

impl<B: Body> Body for ResponseBody<B>
where
    B::Data: AsRef<[u8]>,
{
    type Data = B::Data;
    type Error = B::Error;

    // Inlined into its caller: a server polls a streamed answer about three times per event,
    // through every wrapper (the gateway's docs/performance.md, "The answer's wrappers inlined").
    #[inline(always)]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let hook = this.hook;
        match this.inner.project() {
            InnerProj::Plain { mut body } => {
                let polled = body.as_mut().poll_frame(cx);
                observe::<B>(&polled, hook, || body.is_end_stream());
                polled
            }
            InnerProj::Ahead {
                body,
                prefix,
                done,
                held,
            } => {
                // An error read ahead comes [`ERROR_HOLD`] after what was read before it: a
                // server writes out what it queued (the head too) while the body says "not
                // yet", and an error at once would end the connection (or reset the HTTP/2
                // stream) with all of it unsent.
                if prefix.front().is_some_and(Result::is_err) && held.pending(cx) {
                    return Poll::Pending;
                }
                if let Some(item) = prefix.pop_front() {
                    // Read ahead: already fed to the detector.
                    let failed = item.is_err();
                    if (failed || (prefix.is_empty() && (*done || body.is_end_stream())))
                        && let Some(h) = hook.take()
                    {
                        h.end(failed);
                    }
                    return Poll::Ready(Some(item));
                }
                if *done {
                    if let Some(h) = hook.take() {
                        h.end(false);
                    }
                    return Poll::Ready(None);
                }
                let polled = body.as_mut().poll_frame(cx);
                observe::<B>(&polled, hook, || body.is_end_stream());
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// An inner body already read to its end.
    struct Ended;

    impl Body for Ended {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Ready(None)
        }
    }

    /// A stream opening read ahead and the error that cut it: the error comes
    /// [`ERROR_HOLD`] after the data (the polls between say "not yet"), so that a server writes
    /// the head and the data out before it ends the connection or the stream.
    #[tokio::test(start_paused = true)]
    async fn an_error_read_ahead_comes_a_moment_after_the_data_before_it() {
        let (waker, woken) = context_relay_testkit::waker::CountingWaker::new();
        let mut cx = Context::from_waker(&waker);
        let prefix = VecDeque::from([
            Ok(Frame::data(Bytes::from_static(
                b"event: response.created\n\n",
            ))),
            Err(std::io::Error::other("cut")),
        ]);
        let body = ResponseBody::boxed(Box::pin(Ended), prefix, true, None);
        let mut body = std::pin::pin!(body);
        assert!(matches!(
            body.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert!(body.as_mut().poll_frame(&mut cx).is_pending());
        assert!(
            body.as_mut().poll_frame(&mut cx).is_pending(),
            "held, not for one poll only"
        );
        tokio::time::advance(ERROR_HOLD).await;
        assert_eq!(woken.wakes(), 1, "woken when the hold is over");
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(Err(e))) => assert_eq!(e.to_string(), "cut"),
            _ => panic!("the error comes once the hold is over"),
        }
        assert!(matches!(
            body.as_mut().poll_frame(&mut cx),
            Poll::Ready(None)
        ));
    }
}
