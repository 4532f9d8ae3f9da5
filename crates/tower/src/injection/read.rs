//! Reading a request body whole for the slow path, or giving up on it without losing a byte.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use http_body_util::BodyExt;

use crate::request_body::RequestBody;

/// The body as read: whole (within the limit) or given up on.
pub(crate) enum Read<B: Body> {
    Whole(Bytes),
    Partial(RequestBody<B>),
}

/// Reads the body whole when it fits in `limit` and has no trailers; otherwise gives back a
/// body that replays what was read, then the rest.
pub(crate) async fn read_body<B>(body: B, limit: usize) -> Read<B>
where
    B: Body<Data = Bytes>,
{
    // Boxed so that any body (not only `Unpin` ones) can be read here and replayed later.
    let mut body = Box::pin(body);
    if body.size_hint().lower() > limit as u64 {
        return Read::Partial(RequestBody::replay(VecDeque::new(), body));
    }
    let mut frames: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut len = 0usize;
    loop {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                let give_up = match frame.data_ref() {
                    Some(d) => {
                        len += d.len();
                        len > limit
                    }
                    None => true, // trailers: not ours to rewrite around
                };
                frames.push_back(frame);
                if give_up {
                    return Read::Partial(RequestBody::replay(frames, body));
                }
            }
            Some(Err(e)) => {
                // The client's body failed: forward what was read, then the failure itself (the
                // body may well end cleanly if polled again).
                return Read::Partial(RequestBody::replay_failed(frames, body, e));
            }
        }
    }
    Read::Whole(concat(frames, len))
}

fn concat(frames: VecDeque<Frame<Bytes>>, len: usize) -> Bytes {
    let mut datas = frames.into_iter().filter_map(|f| f.into_data().ok());
    match (datas.next(), datas.next()) {
        (None, _) => Bytes::new(),
        (Some(one), None) => one,
        (Some(a), Some(b)) => {
            let mut all = BytesMut::with_capacity(len);
            all.extend_from_slice(&a);
            all.extend_from_slice(&b);
            for d in datas {
                all.extend_from_slice(&d);
            }
            all.freeze()
        }
    }
}
