//! The reply of a turn as the generation side captures it: compressed replies decoded, never
//! lossy text, and the terminal event seen for streamed replies.

use std::io::Write;

use context_relay_core::ending::Ending;
use context_relay_core::reply::{REPLY_CAP, ReplyCapture, summary_text};
use flate2::Compression;

const CHAT_SSE: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(data).expect("write");
    e.finish().expect("finish")
}

fn brotli(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
        w.write_all(data).expect("write");
    }
    out
}

fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

fn capture(is_sse: bool, encoding: &str, body: &[u8]) -> ReplyCapture {
    let mut c = ReplyCapture::encoded(is_sse, REPLY_CAP, encoding);
    for chunk in body.chunks(7) {
        c.push(chunk);
    }
    c
}

#[test]
fn compressed_replies_are_decoded() {
    let json =
        br#"{"choices":[{"message":{"role":"assistant","content":"Done: the flag parses."}}]}"#;
    for (enc, body) in [
        ("gzip", gzip(json)),
        ("br", brotli(json)),
        ("zstd", zstd(json)),
    ] {
        let mut c = capture(false, enc, &body);
        assert_eq!(c.ending(), Ending::Completed, "{enc}");
        assert_eq!(
            c.finish().as_deref(),
            Some("Done: the flag parses."),
            "{enc}"
        );
    }
    let mut c = capture(true, "gzip", &gzip(CHAT_SSE.as_bytes()));
    assert_eq!(c.ending(), Ending::Completed);
    assert_eq!(c.finish().as_deref(), Some("Hello"));
    // `identity` is no encoding.
    assert_eq!(
        capture(true, "identity", CHAT_SSE.as_bytes())
            .finish()
            .as_deref(),
        Some("Hello")
    );
}

#[test]
fn undecodable_replies_are_no_reply() {
    // Raw compressed bytes must never become replacement characters in a prompt.
    let body = gzip(br#"{"choices":[{"message":{"content":"secret"}}]}"#);
    assert_eq!(
        ReplyCapture::new(false, REPLY_CAP).tap(&body).finish(),
        None
    );
    assert_eq!(summary_text(&body), None);
    let mut cut = capture(false, "gzip", &body[..body.len() / 2]);
    assert_eq!(cut.ending(), Ending::Unfinished);
    assert_eq!(cut.finish(), None);
    assert_eq!(capture(false, "compress", &body).finish(), None);
}

#[test]
fn terminal_event_is_seen_before_the_body_closes() {
    let mut c = ReplyCapture::new(true, REPLY_CAP);
    c.push(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n");
    assert_eq!(c.ending(), Ending::Unfinished);
    c.push(
        CHAT_SSE
            .split_once("\n\n")
            .map(|(_, rest)| rest)
            .unwrap_or("")
            .as_bytes(),
    );
    assert_eq!(c.ending(), Ending::Completed);
    let mut c = ReplyCapture::new(true, REPLY_CAP);
    c.push(b"event: response.failed\ndata: {\"type\":\"response.failed\"}\n\n");
    assert_eq!(c.ending(), Ending::Failed);
}

trait Tap {
    fn tap(self, chunk: &[u8]) -> Self;
}

impl Tap for ReplyCapture {
    fn tap(mut self, chunk: &[u8]) -> Self {
        self.push(chunk);
        self
    }
}
