//! Entry points for the `json_masks` fuzz target (`crates/json/fuzz/`), behind the
//! `fuzzing` feature: the string scan's internals are private, and the target compares them
//! with its own byte-at-a-time reference.

use super::JsonError;
use super::classify::simd::{Lanes, Wide, masks};
use super::string;

/// The masks of one 64-byte block: quotes, backslashes, raw control bytes, `n`-or-`t` bytes,
/// and whether any control byte is present.
pub fn block_masks(block: &[u8; 64]) -> (u64, u64, u64, u64, bool) {
    let (quotes, backslashes, controls) = masks(Wide, block);
    let v = Wide.load(block);
    (
        quotes,
        backslashes,
        controls,
        Wide.eq2(v, b'n', b't'),
        Wide.any_control(v),
    )
}

/// The fast string scan of the string whose opening quote is at `start`; `None` where it
/// leaves the answer to the exact scan.
pub fn fast_scan(b: &[u8], start: usize) -> Option<usize> {
    string::fast(b, start)
}

/// The scanner's answer for the string whose opening quote is at `start`: the offset past its
/// closing quote, or its first error (UTF-8 is not checked here).
pub fn skip_string(b: &[u8], start: usize) -> Result<usize, JsonError> {
    string::skip(b, start)
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
