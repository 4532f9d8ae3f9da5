//! Decoding compressed request bodies (`content-encoding`) under a size cap.
//!
//! The relay reads the session id out of request bodies and rewrites them, so a compressed
//! body (Codex can send zstd; other clients gzip, deflate or br) is decoded first and
//! forwarded uncompressed. The cap is enforced while decoding: every decoder is read through
//! [`Read::take`] with `max_bytes + 1`, so a decompression bomb never makes us allocate more
//! than the cap, and a zstd frame whose header asks for a window or content far above the cap
//! is refused before the decoder reserves it. Only pure-Rust decoders are used.
//!
//! ```
//! use context_relay_core::decode::{decode, DecodeError};
//!
//! assert_eq!(decode("identity", b"{}", 1024).unwrap(), b"{}");
//! assert!(matches!(decode("compress", b"{}", 1024), Err(DecodeError::Unsupported(_))));
//! assert!(matches!(decode("gzip", b"not gzip", 1024), Err(DecodeError::Corrupt { .. })));
//! ```

use std::io::{self, Read};

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A coding other than `zstd`, `gzip`/`x-gzip`, `deflate`, `br` and `identity`.
    #[error(
        "unsupported content-encoding `{0}`: expected zstd, gzip, x-gzip, deflate, br or identity"
    )]
    Unsupported(String),
    /// The stream is not valid for its coding (bad header, bad checksum, truncated…).
    #[error("corrupt {encoding} stream: {reason}")]
    Corrupt {
        /// The coding whose stream was corrupt.
        encoding: String,
        /// What the decoder found.
        reason: String,
    },
    /// The decoded body would exceed the cap.
    #[error("decoded body exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The cap that was passed in.
        limit: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coding {
    Identity,
    Gzip,
    Deflate,
    Zstd,
    Brotli,
}

impl Coding {
    fn parse(token: &str) -> Option<Self> {
        let token = token.trim();
        [
            ("identity", Self::Identity),
            ("gzip", Self::Gzip),
            ("x-gzip", Self::Gzip),
            ("deflate", Self::Deflate),
            ("zstd", Self::Zstd),
            ("br", Self::Brotli),
        ]
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(token))
        .map(|(_, coding)| coding)
    }

    fn name(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Gzip => "gzip",
            Self::Deflate => "deflate",
            Self::Zstd => "zstd",
            Self::Brotli => "br",
        }
    }
}

/// zstd decoders must support windows of at least 8 MiB (RFC 8878 §3.1.1.1.2); larger ones
/// are only accepted up to the body cap.
const ZSTD_MIN_WINDOW: u64 = 8 * 1024 * 1024;

/// Decodes `body` as `content_encoding` says, yielding at most `max_bytes` bytes.
///
/// `content_encoding` is a header value: a comma-separated list of codings in the order they
/// were applied, so they are undone last to first. Names are case-insensitive and trimmed;
/// empty list members are ignored. Every coding is checked before any decoding starts.
pub fn decode(
    content_encoding: &str,
    body: &[u8],
    max_bytes: usize,
) -> Result<Vec<u8>, DecodeError> {
    decode_with(content_encoding, body, max_bytes, Cut::Refused)
}

/// [`decode`] of a body that may have been cut short (an answer whose stream ended early):
/// what decodes before the cut, or before a fault, is given (at most `max_bytes`); an
/// unsupported coding or a stream whose header cannot be read gives an error.
///
/// ```
/// use std::io::Write;
/// use context_relay_core::decode::decode_prefix;
///
/// let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
/// gz.write_all(b"data: {\"usage\":1}\n\n").unwrap();
/// gz.flush().unwrap(); // a sync flush: what was written decodes without the end
/// let cut = gz.get_ref().clone();
/// assert_eq!(decode_prefix("gzip", &cut, 1024).unwrap(), b"data: {\"usage\":1}\n\n");
/// ```
pub fn decode_prefix(
    content_encoding: &str,
    body: &[u8],
    max_bytes: usize,
) -> Result<Vec<u8>, DecodeError> {
    decode_with(content_encoding, body, max_bytes, Cut::Kept)
}

/// What a stream cut short (or corrupt after a good start) gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// An error.
    Refused,
    /// What decoded before it.
    Kept,
}

fn decode_with(
    content_encoding: &str,
    body: &[u8],
    max_bytes: usize,
    cut: Cut,
) -> Result<Vec<u8>, DecodeError> {
    let codings = content_encoding
        .split(',')
        .filter(|t| !t.trim().is_empty())
        .map(|t| Coding::parse(t).ok_or_else(|| DecodeError::Unsupported(t.trim().to_owned())))
        .collect::<Result<Vec<_>, _>>()?;
    let mut current: Option<Vec<u8>> = None;
    for coding in codings.into_iter().rev() {
        let input = current.as_deref().unwrap_or(body);
        if coding == Coding::Identity {
            continue;
        }
        current = Some(decode_one(coding, input, max_bytes, cut)?);
    }
    match current {
        Some(decoded) => Ok(decoded),
        None if body.len() > max_bytes => Err(DecodeError::TooLarge { limit: max_bytes }),
        None => Ok(body.to_vec()),
    }
}

fn decode_one(
    coding: Coding,
    input: &[u8],
    max_bytes: usize,
    cut: Cut,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    let result = match coding {
        Coding::Identity => {
            out.extend_from_slice(input);
            Ok(())
        }
        Coding::Gzip => read_capped(
            flate2::read::MultiGzDecoder::new(input),
            &mut out,
            max_bytes,
        ),
        Coding::Deflate if has_zlib_header(input) => {
            read_capped(flate2::read::ZlibDecoder::new(input), &mut out, max_bytes)
        }
        // Some servers and clients send a raw deflate stream under `deflate`.
        Coding::Deflate => read_capped(
            flate2::read::DeflateDecoder::new(input),
            &mut out,
            max_bytes,
        ),
        Coding::Brotli => read_capped(
            brotli_decompressor::Decompressor::new(input, 4096),
            &mut out,
            max_bytes,
        ),
        Coding::Zstd => return zstd(input, max_bytes, cut),
    };
    finish(coding, result, out, max_bytes, cut)
}

fn finish(
    coding: Coding,
    result: io::Result<()>,
    mut out: Vec<u8>,
    max_bytes: usize,
    cut: Cut,
) -> Result<Vec<u8>, DecodeError> {
    match (result, cut) {
        (Ok(()), _) => {}
        // What a failing read appended is what decoded before the fault.
        (Err(_), Cut::Kept) => out.truncate(max_bytes),
        (Err(e), Cut::Refused) => return Err(corrupt(coding, e)),
    }
    if out.len() > max_bytes {
        return Err(DecodeError::TooLarge { limit: max_bytes });
    }
    Ok(out)
}

fn corrupt(coding: Coding, reason: impl ToString) -> DecodeError {
    DecodeError::Corrupt {
        encoding: coding.name().to_owned(),
        reason: reason.to_string(),
    }
}

/// Appends at most `max_bytes + 1` bytes of `reader` to `out` (the extra byte tells "exactly
/// at the cap" from "over it").
fn read_capped(reader: impl Read, out: &mut Vec<u8>, max_bytes: usize) -> io::Result<()> {
    let room = (max_bytes as u64 + 1).saturating_sub(out.len() as u64);
    reader.take(room).read_to_end(out).map(drop)
}

/// RFC 1950: compression method 8 and a header checksum that is a multiple of 31.
fn has_zlib_header(input: &[u8]) -> bool {
    match input {
        [cmf, flg, ..] => {
            cmf & 0x0f == 8 && cmf >> 4 <= 7 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

/// A zstd body may hold several frames, and skippable frames, one after the other.
fn zstd(mut input: &[u8], max_bytes: usize, cut: Cut) -> Result<Vec<u8>, DecodeError> {
    use ruzstd::decoding::StreamingDecoder;
    use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};

    let mut out = Vec::new();
    if input.is_empty() {
        return Err(corrupt(
            Coding::Zstd,
            "empty stream: expected at least one frame",
        ));
    }
    while !input.is_empty() {
        check_zstd_frame(input, max_bytes)?;
        match StreamingDecoder::new(&mut input) {
            Ok(decoder) => {
                let result = read_capped(decoder, &mut out, max_bytes);
                if result.is_err() && cut == Cut::Kept {
                    out.truncate(max_bytes);
                    return Ok(out);
                }
                finish_zstd(result, &out, max_bytes)?;
            }
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                length,
                ..
            })) => {
                let length = usize::try_from(length).unwrap_or(usize::MAX);
                input = input
                    .get(length..)
                    .ok_or_else(|| corrupt(Coding::Zstd, "skippable frame runs past the end"))?;
            }
            Err(e) => return Err(corrupt(Coding::Zstd, e)),
        }
    }
    Ok(out)
}

fn finish_zstd(result: io::Result<()>, out: &[u8], max_bytes: usize) -> Result<(), DecodeError> {
    result.map_err(|e| corrupt(Coding::Zstd, e))?;
    if out.len() > max_bytes {
        return Err(DecodeError::TooLarge { limit: max_bytes });
    }
    Ok(())
}

/// Refuses a zstd frame whose header declares more than we would ever keep, before the
/// decoder reserves its window: ruzstd reserves the declared window (up to 100 MiB) up front.
fn check_zstd_frame(input: &[u8], max_bytes: usize) -> Result<(), DecodeError> {
    const MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();
    let (Some(magic), Some(&descriptor)) = (input.get(..4), input.get(4)) else {
        return Ok(()); // the decoder reports the truncation
    };
    if magic != MAGIC {
        return Ok(());
    }
    let single_segment = descriptor & 0x20 != 0;
    let dict_len = [0usize, 1, 2, 4][usize::from(descriptor & 0x03)];
    let fcs_len = match descriptor >> 6 {
        0 if single_segment => 1,
        0 => 0,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let mut pos = 5;
    let window = if single_segment {
        None
    } else {
        let Some(&wd) = input.get(pos) else {
            return Ok(());
        };
        pos += 1;
        let log = 10 + u64::from(wd >> 3);
        let base = 1u64 << log;
        Some(base + base / 8 * u64::from(wd & 0x07))
    };
    pos += dict_len;
    let content_size = input.get(pos..pos + fcs_len).map(|bytes| {
        let mut buf = [0u8; 8];
        buf[..fcs_len].copy_from_slice(bytes);
        let v = u64::from_le_bytes(buf);
        if fcs_len == 2 { v + 256 } else { v }
    });
    let cap = max_bytes as u64;
    let too_large = match (window, content_size) {
        (_, Some(size)) if fcs_len > 0 && size > cap => true,
        (Some(window), _) => window > cap.max(ZSTD_MIN_WINDOW),
        _ => false,
    };
    if too_large {
        return Err(DecodeError::TooLarge { limit: max_bytes });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_lists_and_cap() {
        assert_eq!(decode("", b"abc", 3).unwrap(), b"abc");
        assert_eq!(decode(" Identity , identity", b"abc", 3).unwrap(), b"abc");
        assert_eq!(
            decode("identity", b"abcd", 3),
            Err(DecodeError::TooLarge { limit: 3 })
        );
    }

    #[test]
    fn unknown_coding_is_reported_before_decoding() {
        assert_eq!(
            decode("gzip, compress", b"", 10),
            Err(DecodeError::Unsupported("compress".into()))
        );
    }

    #[test]
    fn zlib_header_detection() {
        assert!(has_zlib_header(&[0x78, 0x9c]));
        assert!(has_zlib_header(&[0x78, 0x01]));
        assert!(!has_zlib_header(&[0x78, 0x00]));
        assert!(!has_zlib_header(&[0x78]));
    }

    #[test]
    fn zstd_header_declaring_a_huge_content_is_refused_early() {
        // Magic, descriptor: single segment + 8-byte content size, content size 2^40.
        let mut frame = 0xFD2F_B528u32.to_le_bytes().to_vec();
        frame.push(0xE0);
        frame.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(
            decode("zstd", &frame, 1024),
            Err(DecodeError::TooLarge { limit: 1024 })
        );
        // Window descriptor asking for 2^31 bytes.
        let mut frame = 0xFD2F_B528u32.to_le_bytes().to_vec();
        frame.extend_from_slice(&[0x00, 21 << 3]);
        assert_eq!(
            decode("zstd", &frame, 1024),
            Err(DecodeError::TooLarge { limit: 1024 })
        );
    }

    #[test]
    fn zstd_empty_and_skippable() {
        assert!(matches!(
            decode("zstd", b"", 10),
            Err(DecodeError::Corrupt { .. })
        ));
        let mut skip = 0x184D_2A50u32.to_le_bytes().to_vec();
        skip.extend_from_slice(&3u32.to_le_bytes());
        skip.extend_from_slice(b"xyz");
        assert_eq!(decode("zstd", &skip, 10).unwrap(), b"");
        skip.truncate(skip.len() - 1);
        assert!(matches!(
            decode("zstd", &skip, 10),
            Err(DecodeError::Corrupt { .. })
        ));
    }
}
