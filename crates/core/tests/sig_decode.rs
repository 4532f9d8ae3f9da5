//! Content decoding: round trips with real encoders, the size cap, corrupt and unknown input.

use std::io::Write;

use context_relay_core::decode::{DecodeError, decode};
use flate2::Compression;
use proptest::prelude::*;

const MIB: usize = 1024 * 1024;

fn sample() -> Vec<u8> {
    let mut body = br#"{"model":"gpt-5.5","input":["#.to_vec();
    for i in 0..2000 {
        body.extend_from_slice(format!(r#"{{"role":"user","content":"turn {i}"}},"#).as_bytes());
    }
    body.extend_from_slice(b"{}]}");
    body
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn brotli(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
        w.write_all(data).unwrap();
    }
    out
}

fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

#[test]
fn round_trips() {
    let body = sample();
    let cases: [(&str, Vec<u8>); 7] = [
        ("gzip", gzip(&body)),
        ("x-gzip", gzip(&body)),
        ("deflate", zlib(&body)),
        ("deflate", raw_deflate(&body)),
        ("br", brotli(&body)),
        ("zstd", zstd(&body)),
        ("identity", body.clone()),
    ];
    for (encoding, encoded) in cases {
        assert_eq!(decode(encoding, &encoded, MIB).unwrap(), body, "{encoding}");
        let shouted = format!("  {}  ", encoding.to_uppercase());
        assert_eq!(decode(&shouted, &encoded, MIB).unwrap(), body, "{shouted}");
    }
}

#[test]
fn stacked_codings_are_undone_in_reverse() {
    let body = sample();
    let encoded = brotli(&gzip(&body));
    assert_eq!(decode("gzip, br", &encoded, MIB).unwrap(), body);
    assert!(decode("br, gzip", &encoded, MIB).is_err());
    let encoded = zstd(&zlib(&body));
    assert_eq!(
        decode("deflate,identity ,zstd", &encoded, MIB).unwrap(),
        body
    );
}

#[test]
fn concatenated_members_and_frames() {
    let mut two = gzip(b"hello ");
    two.extend(gzip(b"world"));
    assert_eq!(decode("gzip", &two, MIB).unwrap(), b"hello world");
    let mut two = zstd(b"hello ");
    two.extend(zstd(b"world"));
    assert_eq!(decode("zstd", &two, MIB).unwrap(), b"hello world");
    // Each frame fits the cap, their sum does not: the cap holds across frames.
    let mut frames = zstd(&[b'a'; 3000]);
    frames.extend(zstd(&[b'b'; 3000]));
    assert_eq!(decode("zstd", &frames, 6000).unwrap().len(), 6000);
    assert_eq!(
        decode("zstd", &frames, 4095),
        Err(DecodeError::TooLarge { limit: 4095 })
    );
}

#[test]
fn exactly_at_the_cap_is_fine() {
    let body = vec![b'x'; 4096];
    for (encoding, encoded) in [
        ("gzip", gzip(&body)),
        ("br", brotli(&body)),
        ("zstd", zstd(&body)),
    ] {
        assert_eq!(decode(encoding, &encoded, 4096).unwrap().len(), 4096);
        assert_eq!(
            decode(encoding, &encoded, 4095),
            Err(DecodeError::TooLarge { limit: 4095 }),
            "{encoding}"
        );
    }
}

#[test]
fn bombs_stop_at_the_cap() {
    let zeros = vec![0u8; 10 * MIB];
    for (encoding, encoded) in [
        ("gzip", gzip(&zeros)),
        ("deflate", zlib(&zeros)),
        ("deflate", raw_deflate(&zeros)),
        ("br", brotli(&zeros)),
        ("zstd", zstd(&zeros)),
    ] {
        assert!(encoded.len() < MIB, "{encoding} compresses the bomb");
        assert_eq!(
            decode(encoding, &encoded, MIB),
            Err(DecodeError::TooLarge { limit: MIB }),
            "{encoding}"
        );
    }
}

#[test]
fn corrupt_streams() {
    let body = sample();
    let mut truncated_gzip = gzip(&body);
    truncated_gzip.truncate(truncated_gzip.len() / 2);
    let mut flipped_gzip = gzip(&body);
    let n = flipped_gzip.len();
    flipped_gzip[n - 6] ^= 0xff; // the CRC32 trailer
    let mut truncated_zstd = zstd(&body);
    truncated_zstd.truncate(truncated_zstd.len() / 2);
    let mut truncated_br = brotli(&body);
    truncated_br.truncate(truncated_br.len() / 2);
    for (encoding, data) in [
        ("gzip", truncated_gzip),
        ("gzip", flipped_gzip),
        ("gzip", b"plain text, not gzip".to_vec()),
        ("zstd", truncated_zstd),
        ("zstd", b"plain text, not zstd".to_vec()),
        ("br", truncated_br),
        ("deflate", vec![0xff; 32]),
    ] {
        match decode(encoding, &data, MIB) {
            Err(DecodeError::Corrupt {
                encoding: e,
                reason,
            }) => {
                assert_eq!(e, encoding.to_lowercase());
                assert!(!reason.is_empty());
            }
            other => panic!("{encoding}: expected Corrupt, got {other:?}"),
        }
    }
}

#[test]
fn unknown_codings() {
    for encoding in ["compress", "lzma", "gzip;q=1", "br, snappy"] {
        assert!(
            matches!(
                decode(encoding, b"x", MIB),
                Err(DecodeError::Unsupported(_))
            ),
            "{encoding}"
        );
    }
    let err = decode("compress", b"x", MIB).unwrap_err();
    assert!(err.to_string().contains("`compress`"));
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(
        encoding in prop_oneof![
            Just("gzip".to_owned()), Just("deflate".to_owned()), Just("br".to_owned()),
            Just("zstd".to_owned()), Just("identity".to_owned()), "[a-z, -]{0,16}",
        ],
        body in proptest::collection::vec(any::<u8>(), 0..512),
        cap in 0usize..4096,
    ) {
        if let Ok(out) = decode(&encoding, &body, cap) {
            prop_assert!(out.len() <= cap);
        }
    }

    #[test]
    fn never_panics_on_damaged_streams(
        data in proptest::collection::vec(any::<u8>(), 0..2048),
        which in 0usize..4,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cap in 0usize..4096,
    ) {
        let (encoding, mut encoded) = match which {
            0 => ("gzip", gzip(&data)),
            1 => ("deflate", zlib(&data)),
            2 => ("br", brotli(&data)),
            _ => ("zstd", zstd(&data)),
        };
        for (at, byte) in flips {
            let i = at.index(encoded.len());
            encoded[i] ^= byte;
        }
        if let Ok(out) = decode(encoding, &encoded, cap) {
            prop_assert!(out.len() <= cap);
        }
    }

    #[test]
    fn round_trip_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        for (encoding, encoded) in [("gzip", gzip(&data)), ("br", brotli(&data)), ("zstd", zstd(&data)), ("deflate", raw_deflate(&data))] {
            prop_assert_eq!(decode(encoding, &encoded, data.len()).unwrap(), data.clone());
        }
    }
}
