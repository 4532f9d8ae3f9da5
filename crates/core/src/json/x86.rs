//! AVX2 classification of string blocks: the crate's one module with `unsafe` code.
//!
//! Why `unsafe`: the string scan ([`super::string`]) spends its time turning 64-byte blocks
//! into bit masks (quotes, backslashes, raw control bytes). The safe vector types it uses
//! otherwise ([`Wide`](super::classify::simd::Wide), from the `wide` crate) are compiled for
//! the baseline x86_64 CPU, that is SSE2 and 16-byte vectors, because their instruction set
//! is fixed when the crate is built. Using the 32-byte AVX2 vectors of the CPU the relay
//! actually runs on needs runtime detection and `std::arch` intrinsics, which Rust exposes
//! only through `unsafe` (a raw-pointer load, and calls into functions compiled for a CPU
//! feature the caller must prove is present).
//!
//! How it stays sound:
//! - [`Avx2`] is a zero-sized token with a private field; its only constructor,
//!   [`Avx2::detect`], returns one only when `is_x86_feature_detected!("avx2")` holds. Every
//!   `unsafe` block below takes that token by value, so the AVX2 instructions it runs are
//!   known to exist on this CPU.
//! - Loads read exactly the 64 bytes of a `&[u8; 64]` with unaligned loads (`loadu`), so
//!   they stay inside a live, initialised borrow whatever its alignment.
//! - Nothing else is unsafe: the masks are plain integers and the scan that uses them
//!   ([`super::string::fast_with`]) is safe code, shared with the portable path.
//!
//! The SSE2 baseline is the portable path itself (`wide` compiles to SSE2 on x86_64), and
//! other architectures use it too. The AVX2 masks are tested against it with proptest (random
//! bytes with quotes, backslashes, control bytes and multi-byte UTF-8, every length up to 300
//! and every alignment) and by the `json_masks` fuzz target in `fuzz/`, which also compares
//! the whole string scan with a byte-at-a-time reference.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_max_epu8, _mm256_min_epu8,
    _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8,
};

use super::classify::simd::Lanes;

/// Proof that the CPU has AVX2 (see [`Avx2::detect`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Avx2 {
    _detected: (),
}

impl Avx2 {
    /// The token when this CPU has AVX2 (the answer is cached by the standard library, so
    /// this is one load and a test after the first call).
    #[inline]
    pub(super) fn detect() -> Option<Self> {
        is_x86_feature_detected!("avx2").then_some(Self { _detected: () })
    }

    /// [`super::string::fast_with`] compiled for AVX2.
    #[inline]
    pub(super) fn fast(self, b: &[u8], start: usize) -> Option<usize> {
        // SAFETY: `fast_avx2` only requires AVX2, which `self` proves is present.
        unsafe { fast_avx2(self, b, start) }
    }
}

/// The string scan with every helper inlined into a function compiled with AVX2 enabled, so
/// the intrinsics become single instructions instead of calls.
#[target_feature(enable = "avx2")]
fn fast_avx2(avx2: Avx2, b: &[u8], start: usize) -> Option<usize> {
    super::string::fast_with(avx2, b, start)
}

/// A 64-byte block in two AVX2 vectors.
#[derive(Debug, Clone, Copy)]
pub(super) struct Block(__m256i, __m256i);

/// The 64-bit mask of the bytes marked (all ones) in `lo` (bytes 0..32) and `hi` (32..64).
#[inline(always)]
fn mask(avx2: Avx2, lo: __m256i, hi: __m256i) -> u64 {
    let _ = avx2;
    // SAFETY: `avx2` proves the CPU has AVX2, the only requirement of `movemask`.
    let (lo, hi) = unsafe { (_mm256_movemask_epi8(lo), _mm256_movemask_epi8(hi)) };
    u64::from(lo as u32) | (u64::from(hi as u32) << 32)
}

/// The bytes of `v` equal to `byte`, as two vectors.
#[inline(always)]
fn cmp(avx2: Avx2, v: Block, byte: u8) -> (__m256i, __m256i) {
    let _ = avx2;
    // SAFETY: `avx2` proves the CPU has AVX2, the only requirement of these intrinsics
    // (they take and return registers, no memory).
    unsafe {
        let b = _mm256_set1_epi8(byte as i8);
        (_mm256_cmpeq_epi8(v.0, b), _mm256_cmpeq_epi8(v.1, b))
    }
}

impl Lanes for Avx2 {
    type Block = Block;

    #[inline(always)]
    fn load(self, block: &[u8; 64]) -> Block {
        let p = block.as_ptr();
        // SAFETY: `self` proves AVX2. `p` and `p + 32` each start 32 readable, initialised
        // bytes of the borrowed 64-byte array, and `loadu` has no alignment requirement.
        unsafe {
            Block(
                _mm256_loadu_si256(p.cast()),
                _mm256_loadu_si256(p.add(32).cast()),
            )
        }
    }

    #[inline(always)]
    fn eq(self, v: Block, byte: u8) -> u64 {
        let (lo, hi) = cmp(self, v, byte);
        mask(self, lo, hi)
    }

    #[inline(always)]
    fn eq2(self, v: Block, a: u8, b: u8) -> u64 {
        let (a_lo, a_hi) = cmp(self, v, a);
        let (b_lo, b_hi) = cmp(self, v, b);
        // SAFETY: `self` proves AVX2; register operations only.
        let (lo, hi) = unsafe { (_mm256_or_si256(a_lo, b_lo), _mm256_or_si256(a_hi, b_hi)) };
        mask(self, lo, hi)
    }

    #[inline(always)]
    fn any_control(self, v: Block) -> bool {
        // SAFETY: `self` proves AVX2; register operations only.
        let (min, max) = unsafe { (_mm256_min_epu8(v.0, v.1), _mm256_set1_epi8(0x1f)) };
        // Some byte is `<= 0x1f` when the smallest one is: `max(min, 0x1f) == 0x1f`.
        // SAFETY: as above.
        let at_most = unsafe { _mm256_cmpeq_epi8(_mm256_max_epu8(min, max), max) };
        // SAFETY: as above.
        unsafe { _mm256_movemask_epi8(at_most) != 0 }
    }

    #[inline(always)]
    fn controls(self, v: Block) -> u64 {
        // Unsigned `c <= 0x1f` as `max(c, 0x1f) == 0x1f`.
        // SAFETY: `self` proves AVX2; register operations only.
        let (lo, hi) = unsafe {
            let max = _mm256_set1_epi8(0x1f);
            (
                _mm256_cmpeq_epi8(_mm256_max_epu8(v.0, max), max),
                _mm256_cmpeq_epi8(_mm256_max_epu8(v.1, max), max),
            )
        };
        mask(self, lo, hi)
    }
}

#[cfg(test)]
mod tests;
