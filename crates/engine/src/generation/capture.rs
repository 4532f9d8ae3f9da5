//! The copy of a request body kept for a later summary, and the watch on the reply of a turn
//! that qualified for one.

use std::sync::Mutex;

use bytes::Bytes;
use context_relay_core::ending::Ending;
use context_relay_core::reply::ReplyCapture;
use smallvec::SmallVec;

use crate::summary::job::Job;

/// The copy of a request body kept for a later summary: the adapter pushes every chunk it
/// forwards (cheap `Bytes` clones, bounded), then says how the body ended.
///
/// ```
/// use bytes::Bytes;
/// use context_relay_engine::Capture;
///
/// let capture = Capture::new(16);
/// capture.push(&Bytes::from_static(b"{\"a\":"));
/// assert_eq!(capture.bytes(), None, "not complete yet");
/// capture.push(&Bytes::from_static(b"1}"));
/// capture.finish();
/// assert_eq!(capture.bytes().as_deref(), Some(&b"{\"a\":1}"[..]));
///
/// let last = Capture::new(16);
/// last.push_last(&Bytes::from_static(b"{}"));
/// assert_eq!(last.bytes().as_deref(), Some(&b"{}"[..]), "complete with its last chunk");
///
/// let over = Capture::new(4);
/// over.push(&Bytes::from_static(b"too long"));
/// over.finish();
/// assert_eq!(over.bytes(), None, "over the limit: nothing is kept");
/// ```
#[derive(Debug)]
pub struct Capture {
    limit: usize,
    state: Mutex<CaptureState>,
}

#[derive(Debug, Default)]
struct CaptureState {
    // Inline: most bodies arrive whole (buffered by the gateway) or in a couple of frames, and
    // this is on every relayed request.
    frames: SmallVec<[Bytes; 2]>,
    len: usize,
    // Over the limit or failed: nothing usable is kept.
    abandoned: bool,
    complete: bool,
}

impl CaptureState {
    fn push(&mut self, data: &Bytes, limit: usize) {
        if self.abandoned {
            return;
        }
        if self.len + data.len() > limit {
            self.abandoned = true;
            self.frames = SmallVec::new();
            return;
        }
        self.len += data.len();
        self.frames.push(data.clone());
    }
}

impl Capture {
    /// An empty copy keeping at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
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

    /// A chunk of the body went out. Past the limit, the copy is given up.
    pub fn push(&self, data: &Bytes) {
        self.with_state(|s| s.push(data, self.limit));
    }

    /// The last chunk of the body went out: [`push`](Self::push) then
    /// [`finish`](Self::finish), under one lock.
    pub fn push_last(&self, data: &Bytes) {
        self.with_state(|s| {
            s.push(data, self.limit);
            s.complete = true;
        });
    }

    /// The body ended: the copy is complete.
    pub fn finish(&self) {
        self.with_state(|s| s.complete = true);
    }

    /// The body failed (or had trailers): the copy is given up.
    pub fn fail(&self) {
        self.with_state(|s| {
            s.abandoned = true;
            s.frames = SmallVec::new();
        });
    }

    /// The whole body, once it was forwarded completely within the limit.
    pub fn bytes(&self) -> Option<Bytes> {
        self.with_state(|s| {
            if s.abandoned || !s.complete {
                return None;
            }
            Some(crate::join::join(&s.frames, s.len))
        })
    }
}

/// The reply of a turn that qualified for a summary, watched as it streams by.
///
/// The adapter pushes every reply chunk, then calls [`ended`](Self::ended) when the body ends
/// (or [`failed`](Self::failed) when it fails). The summary job starts once the reply is
/// complete: at the end of the body, unless it ended with an in-band failure; or, for a
/// stream whose terminal success event (`[DONE]` after a finish reason, `response.completed`,
/// `message_stop`) was seen, on drop, even if the client dropped the body before the upstream
/// closed it, or failed after that event. A failed, cut or early-dropped reply starts nothing
/// and frees the session's in-flight key.
pub(crate) struct ReplyWatch {
    trigger: Option<Trigger>,
}

pub(crate) struct Trigger {
    pub(crate) reply: ReplyCapture,
    pub(crate) job: Job,
}

impl std::fmt::Debug for ReplyWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyWatch")
            .field("armed", &self.trigger.is_some())
            .finish()
    }
}

impl ReplyWatch {
    pub(crate) fn new(trigger: Trigger) -> Self {
        Self {
            trigger: Some(trigger),
        }
    }

    /// A chunk of the reply body.
    pub(crate) fn push(&mut self, data: &[u8]) {
        if let Some(t) = &mut self.trigger {
            t.reply.push(data);
        }
    }

    /// The body ended: the summary starts unless the reply ended with an in-band failure.
    pub(crate) fn ended(&mut self) {
        if let Some(mut t) = self.trigger.take()
            && t.reply.ending() != Ending::Failed
        {
            t.job.start(t.reply.finish());
        }
    }

    /// The body failed: nothing starts, unless its success event came before the fault (the
    /// client has the whole turn).
    pub(crate) fn failed(&mut self) {
        if let Some(mut t) = self.trigger.take()
            && t.reply.ending() == Ending::Completed
        {
            t.job.start(t.reply.finish());
        }
    }
}

impl Drop for ReplyWatch {
    fn drop(&mut self) {
        if let Some(mut t) = self.trigger.take()
            && t.reply.ending() == Ending::Completed
        {
            t.job.start(t.reply.finish());
        }
    }
}
