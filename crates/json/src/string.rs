//! Skipping a JSON string: a fast path that only says "valid, ends here", and the exact path
//! that finds the first error.
//!
//! Long strings are most of a request body, and code-heavy text has an escape every few
//! dozen bytes. The fast path ([`fast`]) classifies 64 bytes at a time into bit masks and
//! resolves escapes with carry arithmetic on the masks (no branch per escape): a backslash
//! run of odd length escapes the byte after it, and an addition over the backslash mask
//! tells odd runs from even ones in one step, across block boundaries too. After two plain
//! blocks in a row the rest of the run is crossed with `memchr2` and checked for control
//! bytes in one vector pass (short runs between escapes stay on the block path). The escaped
//! bytes are checked against the common escape letters in the same masks; the rare ones
//! (`\r`, `\/`, `\b`, `\f`, `\u`, and invalid ones) are looked at one by one. As soon as
//! anything is wrong, the fast path gives up and the exact path ([`exact`]) scans the
//! string again from its start and reports the first error, so errors are the same as when
//! only the exact path existed.
//!
//! The blocks are classified with safe SIMD types (`wide`: SSE2 on x86_64, NEON on
//! aarch64). UTF-8 is not checked here: readers check it once over the bytes they read.

use super::JsonError;
use super::classify::simd::{self, Lanes, Wide};
use super::classify::{control_free, find_special};

/// Skips the string whose opening quote is at `start`; returns the offset past its closing
/// quote. UTF-8 is not checked here.
#[inline]
pub(super) fn skip(b: &[u8], start: usize) -> Result<usize, JsonError> {
    match fast(b, start) {
        Some(end) => Ok(end),
        None => exact(b, start, false),
    }
}

const EVEN_BITS: u64 = 0x5555_5555_5555_5555;

/// The bytes of a block escaped by a backslash (bit `k` for byte `k`), given its backslashes
/// and whether its first byte is escaped by a backslash run that ended the previous block;
/// updates that carry for the next block.
///
/// A backslash that is not itself escaped starts a run; within a run, backslashes alternate
/// between escaping and escaped, and the byte after a run of odd length is escaped. Adding
/// the run starts on odd bits to the backslash mask carries through each such run, which
/// flips the parity of runs starting on odd bits, so one XOR with the even bits marks every
/// escaped byte whatever the lengths of the runs.
#[inline(always)]
fn escaped(backslashes: u64, carry: &mut u64) -> u64 {
    let backslashes = backslashes & !*carry;
    let follows_escape = (backslashes << 1) | *carry;
    let odd_starts = backslashes & !EVEN_BITS & !follows_escape;
    let (even_starts, overflow) = odd_starts.overflowing_add(backslashes);
    *carry = u64::from(overflow);
    (EVEN_BITS ^ (even_starts << 1)) & follows_escape
}

/// The bits below the lowest set bit of `mask` (all bits when it is zero).
#[inline(always)]
fn below_lowest(mask: u64) -> u64 {
    mask.wrapping_sub(1) & !mask
}

/// The end of the string at `start` when it is well-formed; `None` when it is not, or when
/// this path cannot tell (the exact path decides then). UTF-8 is not checked.
#[inline]
pub(super) fn fast(b: &[u8], start: usize) -> Option<usize> {
    fast_with(Wide, b, start)
}

/// [`fast`] with the blocks classified by `l`.
#[inline(always)]
fn fast_with<L: Lanes>(l: L, b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    let mut carry = 0u64;
    // The previous block held no special byte.
    let mut plain = false;
    while let Some(block) = b.get(i..).and_then(<[u8]>::first_chunk::<64>) {
        let v = l.load(block);
        let quotes = l.eq(v, b'"');
        let backslashes = l.eq(v, b'\\');
        // Raw control bytes are rare inside strings (in pretty JSON they follow them): one
        // test for the block, the mask only when it holds any.
        let controls = if l.any_control(v) { l.controls(v) } else { 0 };
        if backslashes | carry == 0 {
            if quotes != 0 {
                if controls & below_lowest(quotes) != 0 {
                    return None;
                }
                return Some(i + quotes.trailing_zeros() as usize + 1);
            }
            if controls != 0 {
                return None;
            }
            i += 64;
            if plain {
                // A long plain run (prose, base64 data): `memchr2` finds its end with the
                // widest vectors the CPU has, then the run is checked for control bytes.
                let rest = b.get(i..)?;
                let k = memchr::memchr2(b'"', b'\\', rest)?;
                if !control_free(&rest[..k]) {
                    return None;
                }
                i += k;
            }
            plain = true;
            continue;
        }
        plain = false;
        let escaped = escaped(backslashes, &mut carry);
        let closing = quotes & !escaped;
        let inside = below_lowest(closing);
        if controls & inside != 0 {
            return None;
        }
        // Escapes of a quote, a backslash, `n` or `t` are valid; the others are looked at.
        let common = quotes | backslashes | l.eq2(v, b'n', b't');
        let mut rare = escaped & !common & inside;
        while rare != 0 {
            let k = rare.trailing_zeros() as usize;
            match ESCAPE_LEN[usize::from(block[k])] {
                2 => {}
                // The backslash is at `i + k - 1` (in the previous block when `k == 0`).
                6 => check_hex(b, i + k - 1, start).ok()?,
                _ => return None,
            }
            rare &= rare - 1;
        }
        if closing != 0 {
            return Some(i + closing.trailing_zeros() as usize + 1);
        }
        i += 64;
    }
    // Fewer than 64 bytes left: one special byte at a time, from the backslash when the last
    // block ended in the middle of an escape.
    exact_from(b, start, i - carry as usize, false).ok()
}

/// The string scan in 64-byte blocks that stops at the first error: quotes, backslashes and
/// control bytes become bit masks, and escapes are resolved one at a time on the masks.
/// `control_free`: the caller knows there is no raw control byte from `start` on (then plain
/// runs are crossed with `memchr2`); the scanner passes `false`, and the tests check that
/// both modes give the same answers.
pub(super) fn exact(b: &[u8], start: usize, control_free: bool) -> Result<usize, JsonError> {
    let mut i = start + 1;
    while let Some(block) = b.get(i..).and_then(<[u8]>::first_chunk::<64>) {
        let (quotes, mut backslashes, controls) = simd::masks(Wide, block);
        if quotes | backslashes | controls == 0 && control_free {
            match memchr::memchr2(b'"', b'\\', &b[i + 64..]) {
                Some(k) => i += 64 + k,
                None => return Err(JsonError::UnterminatedString { start }),
            }
            continue;
        }
        let mut escaped = 0u64;
        let mut advance = 64;
        loop {
            let q = (quotes & !escaped).trailing_zeros();
            let e = backslashes.trailing_zeros();
            if q < e {
                // `q < 64`: the closing quote.
                let inside = controls & ((1u64 << q) - 1);
                if inside != 0 {
                    let at = i + inside.trailing_zeros() as usize;
                    return Err(JsonError::ControlCharacter { at, byte: b[at] });
                }
                return Ok(i + q as usize + 1);
            }
            if e >= 63 {
                // No backslash left, or one whose escaped byte is in the next block:
                // start the next block at that backslash.
                if e == 63 {
                    advance = 63;
                }
                break;
            }
            // A raw control byte before this escape is the first error, whatever the escape.
            let before = controls & ((1u64 << e) - 1);
            if before != 0 {
                let at = i + before.trailing_zeros() as usize;
                return Err(JsonError::ControlCharacter { at, byte: b[at] });
            }
            let at = i + e as usize;
            match ESCAPE_LEN[usize::from(block[e as usize + 1])] {
                2 => {}
                6 => check_hex(b, at, start)?,
                _ => return Err(JsonError::InvalidEscape { at }),
            }
            escaped |= 1u64 << (e + 1);
            backslashes &= !(3u64 << e);
        }
        let inside = if advance == 64 {
            controls
        } else {
            controls & ((1u64 << 63) - 1)
        };
        if inside != 0 {
            let at = i + inside.trailing_zeros() as usize;
            return Err(JsonError::ControlCharacter { at, byte: b[at] });
        }
        i += advance;
    }
    exact_from(b, start, i, control_free)
}

/// The string scan from `i` on, one special byte at a time (the last bytes of a body).
fn exact_from(
    b: &[u8],
    start: usize,
    mut i: usize,
    control_free: bool,
) -> Result<usize, JsonError> {
    loop {
        i = find_special(b, i, control_free);
        i = match b.get(i) {
            Some(b'"') => return Ok(i + 1),
            Some(b'\\') => {
                // A table instead of a `match` on the escaped byte: `\n`, `\"`, `\t`
                // alternate unpredictably in code-heavy text, and one well-predicted
                // branch beats a jump table that mispredicts.
                match ESCAPE_LEN[usize::from(b.get(i + 1).copied().unwrap_or(0))] {
                    2 => i + 2,
                    6 => {
                        check_hex(b, i, start)?;
                        i + 6
                    }
                    _ if i + 1 >= b.len() => {
                        return Err(JsonError::UnterminatedString { start });
                    }
                    _ => return Err(JsonError::InvalidEscape { at: i }),
                }
            }
            Some(&byte) => return Err(JsonError::ControlCharacter { at: i, byte }),
            None => return Err(JsonError::UnterminatedString { start }),
        };
    }
}

/// The four hex digits of the `\u` escape whose backslash is at `at`.
#[inline]
fn check_hex(b: &[u8], at: usize, start: usize) -> Result<(), JsonError> {
    match b.get(at + 2..at + 6) {
        Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => Ok(()),
        Some(_) => Err(JsonError::InvalidEscape { at }),
        None => Err(JsonError::UnterminatedString { start }),
    }
}

/// Length of the escape sequence a backslash starts, by the byte after it (0: invalid).
const ESCAPE_LEN: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'"' as usize] = 2;
    t[b'\\' as usize] = 2;
    t[b'/' as usize] = 2;
    t[b'b' as usize] = 2;
    t[b'f' as usize] = 2;
    t[b'n' as usize] = 2;
    t[b'r' as usize] = 2;
    t[b't' as usize] = 2;
    t[b'u' as usize] = 6;
    t
};

#[cfg(test)]
mod tests;
