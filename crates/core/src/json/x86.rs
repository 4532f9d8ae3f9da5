//! AVX2 and AVX-512 classification of string blocks, and a UTF-8 check in the same pass:
//! the crate's one module with `unsafe` code.
//!
//! Why `unsafe`: the string scan ([`super::string`]) spends its time turning 64-byte blocks
//! into bit masks (quotes, backslashes, raw control bytes), and a body's UTF-8 check is a
//! pass of its own otherwise. The safe vector types the scan uses everywhere else
//! ([`Wide`](super::classify::simd::Wide), from the `wide` crate) are compiled for the
//! baseline x86_64 CPU, that is SSE2 and 16-byte vectors, because their instruction set is
//! fixed when the crate is built; and SSE2 has no byte shuffle, which the UTF-8 check needs
//! for its table lookups. Using the 32-byte AVX2 or 64-byte AVX-512 vectors of the CPU the
//! relay actually runs on needs runtime detection and `std::arch` intrinsics, which Rust
//! exposes only through `unsafe` (raw-pointer loads, and calls into functions compiled for a
//! CPU feature the caller must prove is present).
//!
//! How it stays sound:
//! - [`Avx2`] and [`Avx512`] are zero-sized tokens with a private field; their only
//!   constructors, `detect`, return one only when `is_x86_feature_detected!` reports the
//!   features (AVX2; AVX-512 F and BW). Every `unsafe` block takes a token by value, so the
//!   instructions it runs are known to exist on this CPU.
//! - Loads read exactly the bytes of a borrowed fixed-size array (a 64-byte block, a 16-byte
//!   table, the 32- or 64-byte constant of [`incomplete_max`]) with unaligned loads, so they
//!   stay inside live, initialised memory whatever its alignment.
//! - Table lookups (`shuffle_epi8`) index with nibbles, inside their 16 entries.
//! - Nothing else is unsafe: masks are plain integers, and the scan that uses them
//!   ([`super::string::fast_with`]) is safe code shared with the portable path.
//!
//! The SSE2 baseline is the portable path itself (`wide` compiles to SSE2 on x86_64), and
//! other architectures use it too, with UTF-8 checked in its own pass (`simdutf8`). The
//! vector paths are tested against it with proptest (random bytes with quotes, backslashes,
//! control bytes and every kind of valid and broken UTF-8, lengths up to 300, every
//! alignment) and by the `json_masks` fuzz target in `fuzz/`, which also compares the whole
//! string scan with a byte-at-a-time reference and the one-pass document parse with the
//! two-pass one.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m256i, _mm_loadu_si128, _mm256_alignr_epi8, _mm256_and_si256, _mm256_broadcastsi128_si256,
    _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_max_epu8, _mm256_min_epu8, _mm256_movemask_epi8,
    _mm256_or_si256, _mm256_permute2x128_si256, _mm256_set1_epi8, _mm256_setzero_si256,
    _mm256_shuffle_epi8, _mm256_srli_epi16, _mm256_subs_epu8, _mm256_testz_si256, _mm256_xor_si256,
};

use super::classify::simd::Lanes;

mod avx512;

pub(super) use avx512::Avx512;

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
    pub(super) fn fast<const UTF8: bool>(self, b: &[u8], start: usize) -> Option<usize> {
        // SAFETY: `fast_avx2` only requires AVX2, which `self` proves is present.
        unsafe { fast_avx2::<UTF8>(self, b, start) }
    }
}

/// The string scan with every helper inlined into a function compiled with AVX2 enabled, so
/// the intrinsics become single instructions instead of calls.
#[target_feature(enable = "avx2")]
fn fast_avx2<const UTF8: bool>(avx2: Avx2, b: &[u8], start: usize) -> Option<usize> {
    super::string::fast_with::<_, UTF8>(avx2, b, start)
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

/// UTF-8 validation state between blocks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Utf8 {
    /// The last 32 bytes seen.
    prev: __m256i,
    /// Non-zero where those bytes start a sequence that needs more bytes than they hold.
    incomplete: __m256i,
    /// Non-zero where an error was found.
    error: __m256i,
}

/// Bits naming what a pair of bytes (a byte and the one before it) can get wrong, for the
/// table lookups of [`utf8_errors`].
mod bits {
    /// A lead byte not followed by a continuation byte.
    pub(super) const TOO_SHORT: i8 = 1 << 0;
    /// A continuation byte after an ASCII byte.
    pub(super) const TOO_LONG: i8 = 1 << 1;
    /// `E0` then `80..9F`: a 3-byte form of a 2-byte code point.
    pub(super) const OVERLONG_3: i8 = 1 << 2;
    /// `F4` then `90..BF`, or `F5..FF` then a continuation: above U+10FFFF.
    pub(super) const TOO_LARGE: i8 = 1 << 3;
    /// `ED` then `A0..BF`: a UTF-16 surrogate.
    pub(super) const SURROGATE: i8 = 1 << 4;
    /// `C0` or `C1`: a 2-byte form of an ASCII code point.
    pub(super) const OVERLONG_2: i8 = 1 << 5;
    /// `F5..FF` then `80..8F` (the part of too-large `TOO_LARGE` misses).
    pub(super) const TOO_LARGE_1000: i8 = 1 << 6;
    /// `F0` then `80..8F`: a 4-byte form of a 3-byte code point (shares a bit with
    /// `TOO_LARGE_1000`: they cannot both hold for one pair).
    pub(super) const OVERLONG_4: i8 = 1 << 6;
    /// A continuation byte after a continuation byte: an error unless the byte two or three
    /// back is a lead that asks for it.
    pub(super) const TWO_CONTS: i8 = 1 << 7;
    /// The errors that do not depend on the low nibble of the first byte.
    pub(super) const CARRY: i8 = TOO_SHORT | TOO_LONG | TWO_CONTS;
}

use bits::*;

/// Errors allowed by the high nibble of the first byte of a pair.
const FIRST_HIGH: [i8; 16] = [
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TOO_LONG,
    TWO_CONTS,
    TWO_CONTS,
    TWO_CONTS,
    TWO_CONTS,
    TOO_SHORT | OVERLONG_2,
    TOO_SHORT,
    TOO_SHORT | OVERLONG_3 | SURROGATE,
    TOO_SHORT | TOO_LARGE | TOO_LARGE_1000 | OVERLONG_4,
];

/// The errors of `F5..FF` leads and of the leads that carry no nibble-specific error.
const LARGE: i8 = CARRY | TOO_LARGE | TOO_LARGE_1000;

/// Errors allowed by the low nibble of the first byte of a pair.
const FIRST_LOW: [i8; 16] = [
    CARRY | OVERLONG_3 | OVERLONG_2 | OVERLONG_4,
    CARRY | OVERLONG_2,
    CARRY,
    CARRY,
    CARRY | TOO_LARGE,
    LARGE,
    LARGE,
    LARGE,
    LARGE,
    LARGE,
    LARGE,
    LARGE,
    LARGE,
    LARGE | SURROGATE,
    LARGE,
    LARGE,
];

/// Errors allowed by the high nibble of the second byte of a pair.
const SECOND_HIGH: [i8; 16] = [
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE_1000 | OVERLONG_4,
    TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE,
    TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE,
    TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
    TOO_SHORT,
];

/// Subtracted (saturating) from the last bytes of a block: non-zero where a lead byte
/// starts a sequence longer than what is left (a 4-byte lead in the last 3 bytes, a 3-byte
/// lead in the last 2, a 2-byte lead last).
const fn incomplete_max<const N: usize>() -> [i8; N] {
    let mut max = [-1i8; N];
    max[N - 3] = (0xf0u8 - 1) as i8;
    max[N - 2] = (0xe0u8 - 1) as i8;
    max[N - 1] = (0xc0u8 - 1) as i8;
    max
}

/// The invalid bytes of `input` given the 32 bytes before it (non-zero bytes of the result).
///
/// Three 16-entry table lookups classify each byte with the one before it (the high nibble
/// of the first, its low nibble, the high nibble of the second: each table gives the errors
/// the nibble allows, and an error is there when all three allow it); a byte two or three
/// places after a 3- or 4-byte lead must be a continuation, which flips the
/// continuation-after-continuation bit. This is the lookup algorithm of Keiser and Lemire,
/// "Validating UTF-8 in less than one instruction per byte" (2021).
#[inline(always)]
fn utf8_errors(avx2: Avx2, input: __m256i, prev: __m256i) -> __m256i {
    let _ = avx2;
    // SAFETY: `avx2` proves the CPU has AVX2, the only requirement of these intrinsics.
    // They take and return registers, except the table loads, which read exactly the 16
    // bytes of a `[i8; 16]` constant without an alignment requirement. The shuffle indices
    // are nibbles, so every lookup stays inside its 16-entry table.
    unsafe {
        // The 16 bytes before each lane: the last lane of `prev`, then the first of `input`.
        let before = _mm256_permute2x128_si256::<0x21>(prev, input);
        let prev1 = _mm256_alignr_epi8::<15>(input, before);
        let prev2 = _mm256_alignr_epi8::<14>(input, before);
        let prev3 = _mm256_alignr_epi8::<13>(input, before);
        let low = _mm256_set1_epi8(0x0f);
        let high_nibble = |v| _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
        let table = |t: &[i8; 16]| _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast()));
        let (first_high, first_low, second_high) =
            (table(&FIRST_HIGH), table(&FIRST_LOW), table(&SECOND_HIGH));
        let pair = _mm256_and_si256(
            _mm256_and_si256(
                _mm256_shuffle_epi8(first_high, high_nibble(prev1)),
                _mm256_shuffle_epi8(first_low, _mm256_and_si256(prev1, low)),
            ),
            _mm256_shuffle_epi8(second_high, high_nibble(input)),
        );
        // Bytes `E0..FF` two back and `F0..FF` three back keep bit 7 after these
        // saturating subtractions: the byte must then be a continuation.
        let third = _mm256_subs_epu8(prev2, _mm256_set1_epi8((0xe0u8 - 0x80) as i8));
        let fourth = _mm256_subs_epu8(prev3, _mm256_set1_epi8((0xf0u8 - 0x80) as i8));
        let must_continue =
            _mm256_and_si256(_mm256_or_si256(third, fourth), _mm256_set1_epi8(TWO_CONTS));
        _mm256_xor_si256(must_continue, pair)
    }
}

/// Non-zero where the last bytes of `input` start a sequence longer than what is left.
#[inline(always)]
fn utf8_incomplete(avx2: Avx2, input: __m256i) -> __m256i {
    let _ = avx2;
    let max: [i8; 32] = incomplete_max();
    // SAFETY: `avx2` proves AVX2; `max` is a live 32-byte array read with an unaligned load.
    unsafe { _mm256_subs_epu8(input, _mm256_loadu_si256(max.as_ptr().cast())) }
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

    type Utf8 = Utf8;

    #[inline(always)]
    fn utf8_start(self) -> Option<Utf8> {
        // SAFETY: `self` proves AVX2; register operations only.
        let zero = unsafe { _mm256_setzero_si256() };
        Some(Utf8 {
            prev: zero,
            incomplete: zero,
            error: zero,
        })
    }

    #[inline(always)]
    fn utf8_block(self, v: Block, state: &mut Utf8) {
        // SAFETY: `self` proves AVX2; register operations only.
        let ascii = unsafe { _mm256_movemask_epi8(_mm256_or_si256(v.0, v.1)) == 0 };
        if ascii {
            // An ASCII block is valid on its own; only a sequence the previous block left
            // open is an error.
            // SAFETY: as above.
            state.error = unsafe { _mm256_or_si256(state.error, state.incomplete) };
            // SAFETY: as above.
            state.incomplete = unsafe { _mm256_setzero_si256() };
        } else {
            let errors = [
                utf8_errors(self, v.0, state.prev),
                utf8_errors(self, v.1, v.0),
            ];
            // SAFETY: as above.
            state.error =
                unsafe { _mm256_or_si256(state.error, _mm256_or_si256(errors[0], errors[1])) };
            state.incomplete = utf8_incomplete(self, v.1);
        }
        state.prev = v.1;
    }

    #[inline(always)]
    fn utf8_valid(self, state: Utf8) -> bool {
        // SAFETY: `self` proves AVX2; register operations only.
        unsafe { _mm256_testz_si256(state.error, state.error) == 1 }
    }
}

/// [`super::string::fast_with`] on the widest vector unit this CPU has: AVX-512, AVX2, or
/// `None` when it has neither (the caller takes the portable path).
#[inline]
pub(super) fn fast<const UTF8: bool>(b: &[u8], start: usize) -> Option<Option<usize>> {
    if let Some(avx512) = Avx512::detect() {
        return Some(avx512.fast::<UTF8>(b, start));
    }
    Avx2::detect().map(|avx2| avx2.fast::<UTF8>(b, start))
}

#[cfg(test)]
mod tests;
