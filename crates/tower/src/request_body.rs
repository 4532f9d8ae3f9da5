//! The request body both layers hand to the service they wrap.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_engine::Capture;
use context_relay_engine::injection::Tee;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The request body [`Generation`](crate::Generation) and [`Injection`](crate::Injection)
    /// hand to the service they wrap: the client's body, forwarded frame by frame (possibly
    /// with a copy kept by reference), or a body the relay made (rewritten, or read and
    /// replayed).
    ///
    /// It is a `Body<Data = Bytes>` with the client body's error type, and forwards
    /// `is_end_stream` and `size_hint`: any client that takes a generic body (hyper-util's
    /// `Client`, `axum::body::Body::new`) accepts it.
    pub struct RequestBody<B: Body> {
        #[pin]
        kind: Kind<B>,
    }
}

/// Who keeps a copy of a forwarded body.
enum Keep {
    /// The generation side, for a later summary.
    Capture(Arc<Capture>),
    /// The injection side, for a repair.
    Tee(Arc<Tee>),
}

pin_project! {
    #[project = KindProj]
    enum Kind<B: Body> {
        // The client's body, untouched; the frames may be kept (shared, not copied).
        Passthrough { #[pin] inner: B, keep: Option<Keep> },
        // A body the relay made (rewritten, read whole, or a summary request).
        Full { data: Option<Bytes> },
        // Frames the relay read before giving up on a rewrite (too large, trailers, a body
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
    /// The client's body, untouched.
    pub(crate) fn passthrough(inner: B) -> Self {
        Self {
            kind: Kind::Passthrough { inner, keep: None },
        }
    }

    /// The client's body, with a copy kept for a summary.
    pub(crate) fn captured(inner: B, capture: Arc<Capture>) -> Self {
        // An empty body may never be polled (hyper's client checks `is_end_stream` first).
        if inner.is_end_stream() {
            capture.finish();
        }
        Self {
            kind: Kind::Passthrough {
                inner,
                keep: Some(Keep::Capture(capture)),
            },
        }
    }

    /// The client's body, with its frames kept for a repair.
    pub(crate) fn teed(inner: B, tee: Option<Arc<Tee>>) -> Self {
        Self {
            kind: Kind::Passthrough {
                inner,
                keep: tee.map(Keep::Tee),
            },
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

impl Keep {
    /// What the inner body gave, after `inner_ended` tells whether it reported its end. `true`
    /// when nothing more is kept (the copy is complete or given up): the body lets go of it.
    fn saw<E>(
        &self,
        polled: &Poll<Option<Result<Frame<Bytes>, E>>>,
        inner_ended: impl Fn() -> bool,
    ) -> bool {
        match self {
            Keep::Capture(capture) => match polled {
                Poll::Ready(Some(Ok(frame))) => {
                    // hyper's client stops polling once the body says it has ended, so the
                    // trailing `None` may never come.
                    let ended = inner_ended();
                    match frame.data_ref() {
                        Some(data) if ended => capture.push_last(data),
                        Some(data) => capture.push(data),
                        None if ended => capture.finish(),
                        None => {}
                    }
                    ended
                }
                Poll::Ready(None) => {
                    capture.finish();
                    true
                }
                Poll::Ready(Some(Err(_))) => {
                    capture.fail();
                    true
                }
                Poll::Pending => false,
            },
            Keep::Tee(tee) => match polled {
                Poll::Ready(Some(Ok(frame))) => {
                    tee.keep(frame.data_ref());
                    // Trailers: given up.
                    frame.data_ref().is_none()
                }
                Poll::Ready(None) => {
                    tee.end();
                    true
                }
                Poll::Ready(Some(Err(_))) => {
                    tee.keep(None);
                    true
                }
                Poll::Pending => false,
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
            KindProj::Passthrough { mut inner, keep } => {
                let polled = inner.as_mut().poll_frame(cx);
                if let Some(k) = keep.as_ref()
                    && k.saw(&polled, || inner.is_end_stream())
                {
                    *keep = None;
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
            Kind::Passthrough { inner, keep } => {
                let end = inner.is_end_stream();
                if end && let Some(Keep::Tee(tee)) = keep {
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
