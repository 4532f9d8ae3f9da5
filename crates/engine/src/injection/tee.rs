//! The chunks of a passed-through request body, kept by reference as they go out: what a
//! repair sends again.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use context_relay_core::portable;

/// The frames of a passed-through request body, kept by reference as they go out, up to a
/// limit: what a repair sends again. Trailers, a body error or a body above the limit give up.
#[derive(Debug)]
pub struct Tee {
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
    /// Keeps at most `limit` bytes.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            state: Mutex::default(),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut TeeState) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A data frame (`Some`) went out, or something that cannot be kept (`None`).
    pub fn keep(&self, data: Option<&Bytes>) {
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

    /// The body ended.
    pub fn end(&self) {
        self.with(|s| s.ended = true);
    }

    /// Whether all of the body went out and was kept, and may carry account-bound state
    /// (scanned as it went out: nothing is joined).
    pub fn may_be_bound(&self) -> bool {
        self.with(|s| s.ended && !s.given_up && s.bound)
    }

    /// The whole body, when all of it went out and was kept (joined once, kept joined).
    pub fn whole(&self) -> Option<Bytes> {
        self.with(|s| {
            if s.given_up || !s.ended {
                return None;
            }
            let whole = crate::join::join(&s.frames, s.len);
            s.frames = vec![whole.clone()];
            Some(whole)
        })
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
