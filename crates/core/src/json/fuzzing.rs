//! Entry points for the `json_masks` fuzz target (`fuzz/` at the repository root), behind the
//! `fuzzing` feature: the string scan's internals are private, and the target compares them
//! with each other and with its own byte-at-a-time reference.

use super::JsonError;
use super::classify::simd::{Lanes, Wide, masks};
use super::string;

/// The masks of one 64-byte block on every path this CPU can run: quotes, backslashes, raw
/// control bytes, `n`-or-`t` bytes, and whether any control byte is present. The first entry
/// is the portable path; AVX2 and AVX-512 follow when the CPU has them.
pub fn block_masks(block: &[u8; 64]) -> Vec<(u64, u64, u64, u64, bool)> {
    fn one<L: Lanes>(l: L, block: &[u8; 64]) -> (u64, u64, u64, u64, bool) {
        let (quotes, backslashes, controls) = masks(l, block);
        let v = l.load(block);
        (
            quotes,
            backslashes,
            controls,
            l.eq2(v, b'n', b't'),
            l.any_control(v),
        )
    }
    #[allow(unused_mut)]
    let mut all = vec![one(Wide, block)];
    #[cfg(target_arch = "x86_64")]
    if let Some(avx2) = super::x86::Avx2::detect() {
        all.push(one(avx2, block));
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(avx512) = super::x86::Avx512::detect() {
        all.push(one(avx512, block));
    }
    all
}

/// The fast string scan of the string whose opening quote is at `start`, on every path this
/// CPU can run (portable first); `None` where the path leaves the answer to the exact scan.
pub fn fast_scans(b: &[u8], start: usize) -> Vec<Option<usize>> {
    #[allow(unused_mut)]
    let mut all = vec![string::fast_with::<_, false>(Wide, b, start)];
    #[cfg(target_arch = "x86_64")]
    if let Some(avx2) = super::x86::Avx2::detect() {
        all.push(avx2.fast::<false>(b, start));
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(avx512) = super::x86::Avx512::detect() {
        all.push(avx512.fast::<false>(b, start));
    }
    all
}

/// The scanner's answer for the string whose opening quote is at `start`: the offset past its
/// closing quote, or its first error (UTF-8 is not checked here).
pub fn skip_string(b: &[u8], start: usize) -> Result<usize, JsonError> {
    string::skip(b, start)
}

/// The one-pass scan (UTF-8 checked in the scan) of the string whose opening quote is at
/// `start`, on every vector path this CPU has (the widest one is the one the parser uses).
pub fn fast_utf8_scans(b: &[u8], start: usize) -> Vec<Option<usize>> {
    #[allow(unused_mut)]
    let mut all = Vec::new();
    #[cfg(target_arch = "x86_64")]
    if let Some(avx2) = super::x86::Avx2::detect() {
        all.push(avx2.fast::<true>(b, start));
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(avx512) = super::x86::Avx512::detect() {
        all.push(avx512.fast::<true>(b, start));
    }
    let _ = (b, start);
    all
}

/// [`super::parse_object`] (one pass when the CPU allows it) and the two-pass parse, which
/// checks UTF-8 over the whole body first: they must give the same answer.
pub fn parse_object_both(body: &[u8]) -> [Result<super::Object<'_>, JsonError>; 2] {
    [
        super::parse_object(body),
        super::parse_object_two_pass(body),
    ]
}

/// The string scan, one byte at a time, independent of the scanner: the end of the string
/// opened at `start`, or its first error in string order (what the tests and the fuzz target
/// compare every path with).
pub fn reference_skip(b: &[u8], start: usize) -> Result<usize, JsonError> {
    let mut i = start + 1;
    loop {
        match b.get(i) {
            None => return Err(JsonError::UnterminatedString { start }),
            Some(b'"') => return Ok(i + 1),
            Some(b'\\') => match b.get(i + 1) {
                None => return Err(JsonError::UnterminatedString { start }),
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                Some(b'u') => match b.get(i + 2..i + 6) {
                    None => return Err(JsonError::UnterminatedString { start }),
                    Some(h) if h.iter().all(u8::is_ascii_hexdigit) => i += 6,
                    Some(_) => return Err(JsonError::InvalidEscape { at: i }),
                },
                Some(_) => return Err(JsonError::InvalidEscape { at: i }),
            },
            Some(&c) if c < 0x20 => return Err(JsonError::ControlCharacter { at: i, byte: c }),
            Some(_) => i += 1,
        }
    }
}
