use std::io::Write;

use super::*;

fn encoded(value: &'static str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(value));
    h
}

#[test]
fn only_codings_the_relay_decodes_are_held() {
    assert!(readable(&HeaderMap::new()));
    assert!(readable(&encoded("zstd")));
    assert!(readable(&encoded("GZIP")));
    assert!(readable(&encoded("gzip, br")));
    assert!(!readable(&encoded("compress")));
    assert!(!readable(&encoded("gzip, snappy")));
}

#[test]
fn held_bodies_are_announced_small_enough_or_plain() {
    let mut plain = HeaderMap::new();
    assert!(
        holdable(&plain, 0, 100),
        "chunked, plain: held up to the limit"
    );
    plain.insert(header::CONTENT_LENGTH, HeaderValue::from(100));
    assert!(holdable(&plain, 100, 100));
    assert!(!holdable(&plain, 101, 100), "announced over the limit");
    let chunked_gzip = encoded("gzip");
    assert!(
        !holdable(&chunked_gzip, 0, 100),
        "compressed, length unknown"
    );
    let mut gzip = encoded("gzip");
    gzip.insert(header::CONTENT_LENGTH, HeaderValue::from(50));
    assert!(holdable(&gzip, 50, 100));
    let mut unknown = encoded("compress");
    unknown.insert(header::CONTENT_LENGTH, HeaderValue::from(50));
    assert!(
        !holdable(&unknown, 50, 100),
        "a coding the relay cannot read"
    );
}

#[test]
fn a_body_still_encoded_goes_out_decoded() {
    let json = br#"{"input":"hi"}"#;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(json).unwrap();
    let gz = Bytes::from(e.finish().unwrap());
    assert_eq!(outgoing(&encoded("gzip"), gz, 1024), &json[..]);
    // Already decoded by the decision (the header is gone): as it is.
    let plain = Bytes::from_static(json);
    assert_eq!(outgoing(&HeaderMap::new(), plain.clone(), 1024), plain);
    // Undecodable: as received, the provider answers for it.
    let junk = Bytes::from_static(b"not gzip");
    assert_eq!(outgoing(&encoded("gzip"), junk.clone(), 1024), junk);
}
