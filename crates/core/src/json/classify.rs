//! Finding the bytes a JSON string scan stops at (quotes, backslashes, raw control bytes),
//! many bytes at a time.

/// Vector classification of string bytes, through `wide` (safe SIMD types: SSE2 on x86_64,
/// NEON on aarch64, plain arrays elsewhere).
pub(super) mod simd {
    use wide::u8x16;

    /// Bit masks (bit `k` for `block[k]`) of what a string scan looks at in a block.
    #[derive(Debug, Clone, Copy)]
    pub(in crate::json) struct Masks {
        /// Quotes.
        pub(in crate::json) quotes: u64,
        /// `\`
        pub(in crate::json) backslashes: u64,
        /// Raw control bytes (below 0x20).
        pub(in crate::json) controls: u64,
        /// The bytes most escapes are made of: `"`, `\`, `n`, `t`.
        pub(in crate::json) common: u64,
    }

    /// The [`Masks`] of `block`.
    #[inline(always)]
    pub(in crate::json) fn masks(block: &[u8; 64]) -> Masks {
        let quote = u8x16::splat(b'"');
        let backslash = u8x16::splat(b'\\');
        let n = u8x16::splat(b'n');
        let t = u8x16::splat(b't');
        let control_max = u8x16::splat(0x1f);
        let bits = |v: u8x16| u64::from(v.move_mask() as u16);
        let mut m = Masks {
            quotes: 0,
            backslashes: 0,
            controls: 0,
            common: 0,
        };
        let (chunks, _) = block.as_chunks::<16>();
        for (k, chunk) in chunks.iter().enumerate() {
            let v = u8x16::new(*chunk);
            let shift = 16 * k;
            let (q, bs) = (v.cmp_eq(quote), v.cmp_eq(backslash));
            m.quotes |= bits(q) << shift;
            m.backslashes |= bits(bs) << shift;
            // Unsigned `c <= 0x1f` as `max(c, 0x1f) == 0x1f`.
            m.controls |= bits(v.max(control_max).cmp_eq(control_max)) << shift;
            m.common |= bits(q | bs | v.cmp_eq(n) | v.cmp_eq(t)) << shift;
        }
        m
    }
}

/// Whether a string byte needs attention: a quote, a backslash or a raw control character.
#[inline(always)]
fn is_special(c: u8) -> bool {
    c == b'"' || c == b'\\' || c < 0x20
}

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// Flags (high bit of each byte) the bytes of `x` that are a quote, a backslash or below
/// 0x20. A flag can be wrong only above a correct one (a borrow runs upwards), so the lowest
/// flag is exact, which is all the caller reads.
#[inline(always)]
fn special_flags(x: u64) -> u64 {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let quote = zero(x ^ (ONES * u64::from(b'"')));
    let backslash = zero(x ^ (ONES * u64::from(b'\\')));
    let control = x.wrapping_sub(ONES * 0x20) & !x & HIGHS;
    quote | backslash | control
}

/// The offset of the first special byte at or after `i` (`b.len()` when there is none).
///
/// Long runs of plain text dominate real bodies, so they are classified 8 bytes at a time
/// with word arithmetic (this crate forbids `unsafe`, so no vector intrinsics), two words per
/// step. In bodies without any raw control byte (compact JSON, checked once up front by
/// the scanner's constructor) only quotes and backslashes matter, and runs longer than one step are
/// left to `memchr2`, which uses the CPU's vector unit.
#[inline]
pub(super) fn find_special(b: &[u8], mut i: usize, control_free: bool) -> usize {
    // Most runs in code-heavy text are short (an escape every few dozen bytes): look at
    // the next 32 bytes inline before paying for a `memchr2` call.
    for _ in 0..2 {
        match b.get(i..).and_then(<[u8]>::first_chunk::<16>) {
            Some(chunk) => match first_special16(chunk) {
                Some(hit) => return i + hit,
                None => i += 16,
            },
            None => break,
        }
    }
    if control_free {
        return memchr::memchr2(b'"', b'\\', &b[i.min(b.len())..]).map_or(b.len(), |k| i + k);
    }
    while let Some(chunk) = b.get(i..).and_then(<[u8]>::first_chunk::<16>) {
        if let Some(hit) = first_special16(chunk) {
            return i + hit;
        }
        i += 16;
    }
    while b.get(i).is_some_and(|&c| !is_special(c)) {
        i += 1;
    }
    i
}

#[inline(always)]
fn first_special16(chunk: &[u8; 16]) -> Option<usize> {
    let (lo, hi) = chunk.split_at(8);
    let lo = special_flags(u64::from_le_bytes(lo.try_into().ok()?));
    let hi = special_flags(u64::from_le_bytes(hi.try_into().ok()?));
    if lo != 0 {
        Some((lo.trailing_zeros() / 8) as usize)
    } else if hi != 0 {
        Some(8 + (hi.trailing_zeros() / 8) as usize)
    } else {
        None
    }
}

/// Whether `b` holds no byte below 0x20 (vectorised by the compiler: a min reduction).
#[cfg(test)]
pub(super) fn control_free(b: &[u8]) -> bool {
    let mut chunks = b.chunks_exact(64);
    let mut min = u8::MAX;
    for chunk in &mut chunks {
        min = min.min(chunk.iter().copied().fold(u8::MAX, u8::min));
    }
    min = min.min(chunks.remainder().iter().copied().fold(u8::MAX, u8::min));
    min >= 0x20
}
