//! Compressed answers, as providers behind a CDN send them: a JSON answer (success or error)
//! to a request whose `accept-encoding` names `gzip` goes out gzip-compressed, with
//! `content-encoding: gzip`. Event streams are sent as they are (CDNs do not buffer them).
//! Off unless [`SimBuilder::gzip_answers`](crate::SimBuilder::gzip_answers) turns it on.

use std::io::Write;

use axum::body::Body;
use http::{HeaderMap, HeaderValue, Response, header};
use http_body_util::BodyExt;

/// Whether `headers` (a request's) accept gzip.
pub(crate) fn accepted(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|c| c.split(';').next().is_some_and(|c| c.trim() == "gzip"))
}

/// `res` gzip-compressed when it is a JSON answer; any other answer as it is.
pub(crate) async fn compress(res: Response<Body>) -> Response<Body> {
    let json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json || res.headers().contains_key(header::CONTENT_ENCODING) {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = body.collect().await.map(|c| c.to_bytes()) else {
        return Response::from_parts(parts, Body::empty());
    };
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let compressed = encoder.write_all(&bytes).and_then(|()| encoder.finish());
    match compressed {
        Ok(gz) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            parts
                .headers
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            Response::from_parts(parts, Body::from(gz))
        }
        Err(_) => Response::from_parts(parts, Body::from(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_accepted_by_name_whatever_its_weight_or_neighbours() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(v));
            accepted(&h)
        };
        assert!(with("zstd,gzip"));
        assert!(with("gzip, deflate, br, zstd"));
        assert!(with("br;q=1.0, gzip;q=0.5"));
        assert!(!with("identity"));
        assert!(!with("x-gzip2"));
        assert!(!accepted(&HeaderMap::new()));
    }

    #[tokio::test]
    async fn a_json_answer_is_compressed_and_an_event_stream_is_not() {
        let answer = |ct: &'static str, body: &'static str| {
            let mut r = Response::new(Body::from(body));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            r
        };
        let json = compress(answer("application/json", "{\"id\":\"r\"}")).await;
        assert_eq!(json.headers()[header::CONTENT_ENCODING], "gzip");
        let gz = json.into_body().collect().await.unwrap().to_bytes();
        let mut plain = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut plain)
            .unwrap();
        assert_eq!(plain, "{\"id\":\"r\"}");
        let sse = compress(answer("text/event-stream", "data: {}\n\n")).await;
        assert!(!sse.headers().contains_key(header::CONTENT_ENCODING));
    }
}
