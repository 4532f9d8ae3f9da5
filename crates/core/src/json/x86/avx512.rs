//! The same classification and UTF-8 check with 64-byte AVX-512 vectors: one register per
//! block, and comparisons that give the 64-bit masks directly.

use std::arch::x86_64::{
    __m512i, _mm_loadu_si128, _mm512_alignr_epi8, _mm512_alignr_epi64, _mm512_and_si512,
    _mm512_broadcast_i32x4, _mm512_cmpeq_epi8_mask, _mm512_cmple_epu8_mask, _mm512_loadu_si512,
    _mm512_or_si512, _mm512_set1_epi8, _mm512_setzero_si512, _mm512_shuffle_epi8,
    _mm512_srli_epi16, _mm512_subs_epu8, _mm512_test_epi8_mask, _mm512_xor_si512,
};

use super::super::classify::simd::Lanes;
use super::{FIRST_HIGH, FIRST_LOW, SECOND_HIGH, bits};

/// Proof that the CPU has AVX-512 F and BW (see [`Avx512::detect`]).
#[derive(Debug, Clone, Copy)]
pub(in crate::json) struct Avx512 {
    _detected: (),
}

impl Avx512 {
    /// The token when this CPU has AVX-512 F and BW (cached by the standard library).
    #[inline]
    pub(in crate::json) fn detect() -> Option<Self> {
        (is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw"))
            .then_some(Self { _detected: () })
    }

    /// [`crate::json::string::fast_with`] compiled for AVX-512.
    #[inline]
    pub(in crate::json) fn fast<const UTF8: bool>(self, b: &[u8], start: usize) -> Option<usize> {
        // SAFETY: `fast_avx512` only requires AVX-512 F and BW, which `self` proves.
        unsafe { fast_avx512::<UTF8>(self, b, start) }
    }
}

/// The string scan with every helper inlined into a function compiled with AVX-512 enabled.
#[target_feature(enable = "avx512f,avx512bw")]
fn fast_avx512<const UTF8: bool>(avx512: Avx512, b: &[u8], start: usize) -> Option<usize> {
    crate::json::string::fast_with::<_, UTF8>(avx512, b, start)
}

/// UTF-8 validation state between blocks.
#[derive(Debug, Clone, Copy)]
pub(in crate::json) struct Utf8 {
    /// The last block seen.
    prev: __m512i,
    /// Non-zero where an error was found.
    error: __m512i,
}

/// The invalid bytes of `input` given the block before it: [`super::utf8_errors`] on
/// 64-byte vectors.
#[inline(always)]
fn utf8_errors(avx512: Avx512, input: __m512i, prev: __m512i) -> __m512i {
    let _ = avx512;
    // SAFETY: `avx512` proves AVX-512 F and BW, the only requirement of these intrinsics.
    // They take and return registers, except the table loads, which read exactly the 16
    // bytes of a `[i8; 16]` constant without an alignment requirement. The shuffle indices
    // are nibbles, so every lookup stays inside its 16-entry table.
    unsafe {
        // The 16 bytes before each 16-byte lane: the last lane of `prev`, then the lanes
        // of `input` but its last.
        let before = _mm512_alignr_epi64::<6>(input, prev);
        let prev1 = _mm512_alignr_epi8::<15>(input, before);
        let prev2 = _mm512_alignr_epi8::<14>(input, before);
        let prev3 = _mm512_alignr_epi8::<13>(input, before);
        let low = _mm512_set1_epi8(0x0f);
        let high_nibble = |v| _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
        let table = |t: &[i8; 16]| _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr().cast()));
        let pair = _mm512_and_si512(
            _mm512_and_si512(
                _mm512_shuffle_epi8(table(&FIRST_HIGH), high_nibble(prev1)),
                _mm512_shuffle_epi8(table(&FIRST_LOW), _mm512_and_si512(prev1, low)),
            ),
            _mm512_shuffle_epi8(table(&SECOND_HIGH), high_nibble(input)),
        );
        let third = _mm512_subs_epu8(prev2, _mm512_set1_epi8((0xe0u8 - 0x80) as i8));
        let fourth = _mm512_subs_epu8(prev3, _mm512_set1_epi8((0xf0u8 - 0x80) as i8));
        let must_continue = _mm512_and_si512(
            _mm512_or_si512(third, fourth),
            _mm512_set1_epi8(bits::TWO_CONTS),
        );
        _mm512_xor_si512(must_continue, pair)
    }
}

impl Lanes for Avx512 {
    type Block = __m512i;

    #[inline(always)]
    fn load(self, block: &[u8; 64]) -> __m512i {
        // SAFETY: `self` proves AVX-512 F. The pointer starts 64 readable, initialised bytes
        // (the borrowed array), and `loadu` has no alignment requirement.
        unsafe { _mm512_loadu_si512(block.as_ptr().cast()) }
    }

    #[inline(always)]
    fn eq(self, v: __m512i, byte: u8) -> u64 {
        // SAFETY: `self` proves AVX-512 F and BW; register operations only.
        unsafe { _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(byte as i8)) }
    }

    #[inline(always)]
    fn eq2(self, v: __m512i, a: u8, b: u8) -> u64 {
        self.eq(v, a) | self.eq(v, b)
    }

    #[inline(always)]
    fn any_control(self, v: __m512i) -> bool {
        self.controls(v) != 0
    }

    #[inline(always)]
    fn controls(self, v: __m512i) -> u64 {
        // SAFETY: `self` proves AVX-512 F and BW; register operations only.
        unsafe { _mm512_cmple_epu8_mask(v, _mm512_set1_epi8(0x1f)) }
    }

    type Utf8 = Utf8;

    #[inline(always)]
    fn utf8_start(self) -> Option<Utf8> {
        // SAFETY: `self` proves AVX-512 F; register operations only.
        let zero = unsafe { _mm512_setzero_si512() };
        // Zeros: as after the ASCII opening quote.
        Some(Utf8 {
            prev: zero,
            error: zero,
        })
    }

    #[inline(always)]
    fn utf8_block(self, v: __m512i, state: &mut Utf8) {
        // No shortcut for ASCII blocks: in code and prose with a few non-ASCII characters
        // they alternate with the others unpredictably, and a mispredicted branch costs
        // more than the dozen vector operations it would skip. The check of an ASCII block
        // finds only a sequence the previous block left open.
        let errors = utf8_errors(self, v, state.prev);
        // SAFETY: `self` proves AVX-512 F; register operations only.
        state.error = unsafe { _mm512_or_si512(state.error, errors) };
        state.prev = v;
    }

    #[inline(always)]
    fn utf8_valid(self, state: Utf8) -> bool {
        // SAFETY: `self` proves AVX-512 F and BW; register operations only.
        unsafe { _mm512_test_epi8_mask(state.error, state.error) == 0 }
    }
}
