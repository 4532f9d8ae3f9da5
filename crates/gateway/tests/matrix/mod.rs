//! The switch matrix: every way a session changes account, at every position of a
//! conversation, for every client shape, checked against the invariants a user relies on.
//!
//! - [`cell`]: the axes (shape × cause × position) and what applies;
//! - [`setup`]: one simulated provider and one gateway per cell;
//! - [`script`]: the conversation each position plays, and where the cause strikes;
//! - [`check`]: the invariants, read from every request the provider recorded;
//! - [`table`]: the printed matrix.

pub mod cell;
pub mod check;
pub mod script;
pub mod setup;
pub mod table;

pub use cell::{Cause, Cell, Outcome, Position};

/// A small deterministic generator (splitmix64): the matrix is seeded and reproducible.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A hex token of 8 characters.
    pub fn token(&mut self) -> String {
        format!("{:08x}", self.next() as u32)
    }
}
