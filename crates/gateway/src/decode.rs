//! Decoding of compressed request bodies (`content-encoding: zstd | gzip | deflate | br`).
//!
//! Codex CLI compresses its request bodies with zstd; the gateway must read `model` and forward
//! the body uncompressed (DESIGN §7). The output is capped so that a small compressed body cannot
//! expand into gigabytes in memory.
//!
//! This file is deliberately self-contained: it is meant to be replaced by
//! `context_relay_core::decode` once that exists.
//!
//! ```
//! use context_relay_gateway::decode::{decode, DecodeError};
//! let plain = b"{\"model\":\"m\"}";
//! assert_eq!(decode("identity", plain, 1024).unwrap(), &plain[..]);
//! assert!(matches!(decode("lz4", plain, 1024), Err(DecodeError::Unsupported(_))));
//! ```

use std::io::Read;

use bytes::Bytes;

/// Why a body could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The encoding is not one of zstd, gzip, deflate, br, identity.
    #[error("expected content-encoding zstd, gzip, deflate, br or identity, found {0:?}")]
    Unsupported(String),
    /// The compressed stream is corrupt.
    #[error("the {encoding} body could not be decoded: {message}")]
    Corrupt {
        /// The encoding.
        encoding: &'static str,
        /// What the decoder said.
        message: String,
    },
    /// The decoded body is larger than the limit.
    #[error("the decoded body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// Decodes `body` sent with `content-encoding: encoding` (a comma-separated list is applied in
/// reverse order, as HTTP says), producing at most `limit` bytes.
pub fn decode(encoding: &str, body: &[u8], limit: usize) -> Result<Bytes, DecodeError> {
    let codings: Vec<String> = encoding
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty())
        .collect();
    let mut current = Bytes::copy_from_slice(body);
    for coding in codings.iter().rev() {
        current = match coding.as_str() {
            "identity" => current,
            "zstd" => zstd(&current, limit)?,
            "gzip" | "x-gzip" => read_capped(
                "gzip",
                flate2::read::MultiGzDecoder::new(&current[..]),
                limit,
            )?,
            "deflate" => deflate(&current, limit)?,
            "br" => read_capped(
                "br",
                brotli_decompressor::Decompressor::new(&current[..], 4096),
                limit,
            )?,
            other => return Err(DecodeError::Unsupported(other.to_owned())),
        };
    }
    if current.len() > limit {
        return Err(DecodeError::TooLarge { limit });
    }
    Ok(current)
}

/// HTTP's `deflate` is zlib-wrapped (RFC 9110 §8.4.1.2), but some clients send raw deflate:
/// accept both.
fn deflate(body: &[u8], limit: usize) -> Result<Bytes, DecodeError> {
    match read_capped("deflate", flate2::read::ZlibDecoder::new(body), limit) {
        Err(DecodeError::Corrupt { .. }) => {
            read_capped("deflate", flate2::read::DeflateDecoder::new(body), limit)
        }
        other => other,
    }
}

fn zstd(body: &[u8], limit: usize) -> Result<Bytes, DecodeError> {
    // A zstd body may hold several frames back to back; decode them all.
    let mut input = body;
    let mut out = Vec::new();
    while !input.is_empty() {
        let decoder = ruzstd::decoding::StreamingDecoder::new(&mut input).map_err(|e| {
            DecodeError::Corrupt {
                encoding: "zstd",
                message: e.to_string(),
            }
        })?;
        let room = limit.saturating_sub(out.len());
        let chunk = read_capped("zstd", decoder, room)?;
        out.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(out))
}

fn read_capped(
    encoding: &'static str,
    reader: impl Read,
    limit: usize,
) -> Result<Bytes, DecodeError> {
    let mut out = Vec::new();
    // One byte more than the limit tells "exactly at the limit" from "over it".
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Corrupt {
            encoding,
            message: e.to_string(),
        })?;
    if out.len() > limit {
        return Err(DecodeError::TooLarge { limit });
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use proptest::prelude::*;

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn raw_deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zstd_enc(data: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
    }

    const BODY: &[u8] = br#"{"model":"codex-relay","input":"hello hello hello hello"}"#;

    #[test]
    fn every_encoding_round_trips() {
        assert_eq!(decode("gzip", &gzip(BODY), 1 << 20).unwrap(), BODY);
        assert_eq!(decode("deflate", &zlib(BODY), 1 << 20).unwrap(), BODY);
        assert_eq!(
            decode("deflate", &raw_deflate(BODY), 1 << 20).unwrap(),
            BODY
        );
        assert_eq!(decode("zstd", &zstd_enc(BODY), 1 << 20).unwrap(), BODY);
        assert_eq!(decode(" ZSTD ", &zstd_enc(BODY), 1 << 20).unwrap(), BODY);
        assert_eq!(decode("", BODY, 1 << 20).unwrap(), BODY);
    }

    #[test]
    fn stacked_codings_apply_in_reverse() {
        let twice = zstd_enc(&gzip(BODY));
        assert_eq!(decode("gzip, zstd", &twice, 1 << 20).unwrap(), BODY);
    }

    #[test]
    fn concatenated_zstd_frames() {
        let mut two = zstd_enc(b"{\"model\":");
        two.extend(zstd_enc(b"\"m\"}"));
        assert_eq!(
            decode("zstd", &two, 1 << 20).unwrap(),
            &b"{\"model\":\"m\"}"[..]
        );
    }

    #[test]
    fn bombs_are_capped() {
        let big = vec![b'a'; 100_000];
        for (enc, data) in [("gzip", gzip(&big)), ("zstd", zstd_enc(&big))] {
            assert!(matches!(
                decode(enc, &data, 1000),
                Err(DecodeError::TooLarge { limit: 1000 })
            ));
            assert_eq!(decode(enc, &data, 100_000).unwrap().len(), 100_000);
        }
    }

    #[test]
    fn corrupt_and_unknown() {
        assert!(matches!(
            decode("gzip", b"not gzip", 1000),
            Err(DecodeError::Corrupt {
                encoding: "gzip",
                ..
            })
        ));
        assert!(matches!(
            decode("zstd", b"nope", 1000),
            Err(DecodeError::Corrupt { .. })
        ));
        let e = decode("compress", BODY, 1000).unwrap_err().to_string();
        assert!(e.contains("compress"), "{e}");
    }

    proptest! {
        #[test]
        fn never_panics_on_garbage(data in proptest::collection::vec(any::<u8>(), 0..512),
                                   enc in prop::sample::select(vec!["zstd", "gzip", "deflate", "br"])) {
            let _ = decode(enc, &data, 4096);
        }

        #[test]
        fn gzip_and_zstd_round_trip(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            prop_assert_eq!(decode("gzip", &gzip(&data), 4096).unwrap(), &data[..]);
            prop_assert_eq!(decode("zstd", &zstd_enc(&data), 4096).unwrap(), &data[..]);
        }
    }
}
