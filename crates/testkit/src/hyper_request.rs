//! Requests shaped as hyper's HTTP/1 server hands them on, shared by tower's layers bench and
//! its `profile_passthrough` example.

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::Full;

/// The headers of a client's turn, as the bench sends them.
pub const HEADERS: [(&str, &str); 3] = [
    ("x-session-id", "bench-session"),
    ("authorization", "Bearer sk-bench"),
    ("content-type", "application/json"),
];

/// A `POST` of `body` to `path` with `headers`, as hyper's HTTP/1 server hands it on: the
/// path and the header values are slices of one shared buffer (the connection's read buffer),
/// so that cloning one costs a reference count, not an allocation. The bare service and the
/// layers get the same requests.
pub fn post(
    path: &str,
    headers: &[(&'static str, &str)],
    body: &'static str,
) -> Request<Full<Bytes>> {
    let mut read = BytesMut::with_capacity(256);
    read.extend_from_slice(path.as_bytes());
    for (_, value) in headers {
        read.extend_from_slice(value.as_bytes());
    }
    let len = read.len();
    let head = read.split_to(len).freeze();
    let mut req = Request::new(Full::new(Bytes::from_static(body.as_bytes())));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = Uri::from_maybe_shared(head.slice(..path.len())).expect("path");
    let mut at = path.len();
    for (name, value) in headers {
        let value = head.slice(at..at + value.len());
        at += value.len();
        req.headers_mut().insert(
            HeaderName::from_static(name),
            HeaderValue::from_maybe_shared(value).expect("value"),
        );
    }
    req
}
