//! Finding the bytes a JSON string scan stops at (quotes, backslashes, raw control bytes),
//! many bytes at a time.

/// Vector classification of string bytes: the operations the block scans need. [`simd::Wide`]
/// (safe SIMD types) implements them; the trait keeps the scans independent of the vector
/// unit.
pub(super) mod simd {
    use wide::u8x16;

    /// A way to classify 64-byte blocks into bit masks (bit `k` for byte `k`).
    pub(crate) trait Lanes: Copy {
        /// A block loaded into vector registers.
        type Block: Copy;
        /// Loads a block.
        fn load(self, block: &[u8; 64]) -> Self::Block;
        /// The bytes equal to `byte`.
        fn eq(self, v: Self::Block, byte: u8) -> u64;
        /// The bytes equal to `a` or `b`.
        fn eq2(self, v: Self::Block, a: u8, b: u8) -> u64;
        /// Whether any byte is a raw control byte (below 0x20).
        fn any_control(self, v: Self::Block) -> bool;
        /// The raw control bytes.
        fn controls(self, v: Self::Block) -> u64;
    }

    /// Classification through `wide` (safe SIMD types: SSE2 on x86_64, NEON on aarch64,
    /// plain arrays elsewhere): the path every CPU takes.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Wide;

    /// A 64-byte block in four vectors.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Block([u8x16; 4]);

    impl Block {
        /// Bit `k` set for each `k` where `f` marks vector byte `k` (all ones).
        #[inline(always)]
        fn mask(&self, f: impl Fn(u8x16) -> u8x16) -> u64 {
            let mut m = 0u64;
            for (k, v) in self.0.iter().enumerate() {
                m |= u64::from(f(*v).move_mask() as u16) << (16 * k);
            }
            m
        }
    }

    impl Lanes for Wide {
        type Block = Block;

        #[inline(always)]
        fn load(self, block: &[u8; 64]) -> Block {
            let (chunks, _) = block.as_chunks::<16>();
            Block([0, 1, 2, 3].map(|k| u8x16::new(chunks[k])))
        }

        #[inline(always)]
        fn eq(self, v: Block, byte: u8) -> u64 {
            let b = u8x16::splat(byte);
            v.mask(|v| v.cmp_eq(b))
        }

        #[inline(always)]
        fn eq2(self, v: Block, a: u8, b: u8) -> u64 {
            let (a, b) = (u8x16::splat(a), u8x16::splat(b));
            v.mask(|v| v.cmp_eq(a) | v.cmp_eq(b))
        }

        #[inline(always)]
        fn any_control(self, v: Block) -> bool {
            let [a, b, c, d] = v.0;
            let min = a.min(b).min(c.min(d));
            let max = u8x16::splat(0x1f);
            min.max(max).cmp_eq(max).move_mask() != 0
        }

        #[inline(always)]
        fn controls(self, v: Block) -> u64 {
            // Unsigned `c <= 0x1f` as `max(c, 0x1f) == 0x1f`.
            let max = u8x16::splat(0x1f);
            v.mask(|v| v.max(max).cmp_eq(max))
        }
    }

    /// The quotes, backslashes and raw control bytes of `block`, as bit masks (bit `k` for
    /// `block[k]`).
    #[inline(always)]
    pub(crate) fn masks<L: Lanes>(l: L, block: &[u8; 64]) -> (u64, u64, u64) {
        let v = l.load(block);
        (l.eq(v, b'"'), l.eq(v, b'\\'), l.controls(v))
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
/// with word arithmetic (safe code, the same on every CPU), two words per step. When the caller knows there is no raw control byte (`control_free`), only quotes and
/// backslashes matter, and runs longer than one step are left to `memchr2`, which uses the
/// CPU's vector unit.
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
pub(super) fn control_free(b: &[u8]) -> bool {
    let mut chunks = b.chunks_exact(64);
    let mut min = u8::MAX;
    for chunk in &mut chunks {
        min = min.min(chunk.iter().copied().fold(u8::MAX, u8::min));
    }
    min = min.min(chunks.remainder().iter().copied().fold(u8::MAX, u8::min));
    min >= 0x20
}
