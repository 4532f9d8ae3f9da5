use proptest::prelude::*;

use super::*;

fn usage(input: u64, cached: u64, write: u64, output: u64, reasoning: u64) -> Usage {
    Usage {
        input,
        cached_input: cached,
        cache_write_input: write,
        output,
        reasoning_output: reasoning,
    }
}

const CHAT_JSON: &str = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"usage: none"},"finish_reason":"stop"}],
 "usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,
  "prompt_tokens_details":{"cached_tokens":100,"audio_tokens":0},
  "completion_tokens_details":{"reasoning_tokens":20,"audio_tokens":0}}}"#;

const CHAT_SSE: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":1}}}\n\n\
data: [DONE]\n\n";

const RESPONSES_SSE: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null,\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"properties\":{\"usage\":{\"type\":\"string\"}}}}]}}\n\n\
event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"the usage is\"}\n\n\
event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"{\\\"usage\\\":{\\\"input_tokens\\\":999}}\"}]}],\"usage\":{\"input_tokens\":500,\"input_tokens_details\":{\"cached_tokens\":400},\"output_tokens\":60,\"output_tokens_details\":{\"reasoning_tokens\":45},\"total_tokens\":560}}}\n\n";

const MESSAGES_SSE: &str = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":90,\"cache_creation_input_tokens\":5,\"output_tokens\":1}}}\r\n\r\n\
event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\r\n\r\n\
event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":42}}\r\n\r\n\
event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n";

const GEMINI_SSE: &str = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}],\"usageMetadata\":{\"promptTokenCount\":50,\"candidatesTokenCount\":2,\"totalTokenCount\":52}}\n\n\
data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":50,\"cachedContentTokenCount\":20,\"candidatesTokenCount\":7,\"thoughtsTokenCount\":3,\"totalTokenCount\":60}}\n\n";

#[test]
fn every_api_shape_as_json_and_as_a_stream() {
    assert_eq!(
        UsageReader::of(CHAT_JSON.as_bytes()),
        Some(usage(120, 100, 0, 30, 20))
    );
    assert_eq!(
        UsageReader::of(CHAT_SSE.as_bytes()),
        Some(usage(9, 0, 0, 4, 1))
    );
    // Nested `usage` keys elsewhere (a tool's parameters, text that quotes one) are not it.
    assert_eq!(
        UsageReader::of(RESPONSES_SSE.as_bytes()),
        Some(usage(500, 400, 0, 60, 45))
    );
    assert_eq!(
        UsageReader::of(MESSAGES_SSE.as_bytes()),
        Some(usage(105, 90, 5, 42, 0))
    );
    assert_eq!(
        UsageReader::of(GEMINI_SSE.as_bytes()),
        Some(usage(50, 20, 0, 10, 3))
    );
    let responses_json = r#"{"id":"r","object":"response","output":[],"usage":{"input_tokens":3,"output_tokens":2}}"#;
    assert_eq!(
        UsageReader::of(responses_json.as_bytes()),
        Some(usage(3, 0, 0, 2, 0))
    );
    let messages_json =
        r#"{"type":"message","content":[],"usage":{"input_tokens":4,"output_tokens":6}}"#;
    assert_eq!(
        UsageReader::of(messages_json.as_bytes()),
        Some(usage(4, 0, 0, 6, 0))
    );
    // Gemini's stream without SSE: a JSON array whose last element has the totals.
    let array = r#"[{"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1}},
        {"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":8}}]"#;
    assert_eq!(
        UsageReader::of(array.as_bytes()),
        Some(usage(5, 0, 0, 8, 0))
    );
}

#[test]
fn a_cut_stream_counts_what_arrived() {
    let cut = &MESSAGES_SSE[..MESSAGES_SSE.find("event: message_delta").unwrap()];
    assert_eq!(
        UsageReader::of(cut.as_bytes()),
        Some(usage(105, 90, 5, 1, 0))
    );
    // Cut inside the event that carried the usage: that event never arrived.
    let mid = MESSAGES_SSE.find("cache_read").unwrap();
    assert_eq!(UsageReader::of(&MESSAGES_SSE.as_bytes()[..mid]), None);
    // A stream cut before its only usage event reported nothing.
    let cut = &RESPONSES_SSE[..RESPONSES_SSE.find("event: response.completed").unwrap()];
    assert_eq!(UsageReader::of(cut.as_bytes()), None);
    // The last event of a stream without its closing blank line still counts.
    let unclosed = CHAT_SSE.trim_end_matches("data: [DONE]\n\n").trim_end();
    assert_eq!(
        UsageReader::of(unclosed.as_bytes()),
        Some(usage(9, 0, 0, 4, 1))
    );
    // A JSON body that never closed reported nothing.
    assert_eq!(
        UsageReader::of(&CHAT_JSON.as_bytes()[..CHAT_JSON.len() - 1]),
        None
    );
}

#[test]
fn bodies_without_usage_and_odd_bodies_report_nothing() {
    for body in [
        "",
        "   ",
        "not json at all",
        "{}",
        "[]",
        r#"{"usage":"plenty"}"#,
        r#"{"usage":{"prompt_tokens":-1}}"#,
        "data: {\"message\":\"usage\"}\n\n",
        "data: [DONE]\n\n",
        r#"{"error":{"message":"usage limit reached"}}"#,
    ] {
        assert_eq!(UsageReader::of(body.as_bytes()), None, "{body:?}");
    }
}

#[test]
fn a_compressed_body_is_decoded_at_the_end() {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(CHAT_JSON.as_bytes()).unwrap();
    let packed = gz.finish().unwrap();
    let mut reader = UsageReader::new("gzip");
    for piece in packed.chunks(7) {
        reader.push(piece);
    }
    assert_eq!(reader.finish(), Some(usage(120, 100, 0, 30, 20)));
    let mut reader = UsageReader::new("gzip");
    reader.push(b"not gzip");
    assert_eq!(reader.finish(), None);
}

#[test]
fn a_body_in_one_chunk_is_held_without_a_copy() {
    let body = Bytes::from(CHAT_JSON);
    let mut whole = super::Whole::default();
    whole.push(&body, Some(body.clone()));
    assert_eq!(whole.bytes().map(<[u8]>::as_ptr), Some(body.as_ptr()));
    assert_eq!(whole.buf.capacity(), 0);
    // A second chunk: both copied into one buffer, in order.
    whole.push(b" ", Some(Bytes::from_static(b" ")));
    assert_eq!(whole.bytes(), Some(format!("{CHAT_JSON} ").as_bytes()));
    assert!(whole.held.is_empty());
    // Over the limit: nothing kept.
    let big = Bytes::from(vec![b' '; super::USAGE_READ_LIMIT]);
    whole.push(&big, Some(big.clone()));
    assert_eq!(whole.bytes(), None);
    assert!(whole.held.is_empty() && whole.buf.capacity() == 0);
}

#[test]
fn usage_adds_up() {
    let mut total = usage(1, 2, 3, 4, 5);
    total.add(&usage(10, 20, 30, 40, 50));
    assert_eq!(total, usage(11, 22, 33, 44, 55));
    total.add(&usage(u64::MAX, 0, 0, 0, 0));
    assert_eq!(total.input, u64::MAX);
}

proptest! {
    /// However a body is split into chunks, the reader gives what it gives the whole body.
    #[test]
    fn any_split_reads_the_same(
        cuts in proptest::collection::vec((0usize..2000, any::<bool>()), 0..8),
        last_shared in any::<bool>(),
        lead in 0usize..3,
        which in 0usize..5,
    ) {
        let text = [CHAT_JSON, CHAT_SSE, RESPONSES_SSE, MESSAGES_SSE, GEMINI_SSE][which];
        let body = Bytes::from(format!("{}{text}", " \n".repeat(lead)));
        let whole = UsageReader::of(&body);
        prop_assert_eq!(whole, UsageReader::of(text.as_bytes()));
        let mut cuts: Vec<(usize, bool)> =
            cuts.into_iter().map(|(c, s)| (c % (body.len() + 1), s)).collect();
        cuts.sort_unstable();
        // Each chunk fed as a slice or as `Bytes` (held without a copy when it is the first).
        let mut reader = UsageReader::new("");
        let feed = |reader: &mut UsageReader, chunk: Bytes, shared: bool| {
            if shared { reader.push_bytes(&chunk) } else { reader.push(&chunk) }
        };
        let mut at = 0;
        for (c, shared) in cuts {
            feed(&mut reader, body.slice(at..c), shared);
            at = c;
        }
        feed(&mut reader, body.slice(at..), last_shared);
        prop_assert_eq!(reader.finish(), whole);
    }

    /// Any bytes: no panic.
    #[test]
    fn any_bytes_are_read_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = UsageReader::of(&bytes);
    }
}

/// A count as providers send it, and as they might get it wrong.
fn count_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    prop_oneof![
        any::<u64>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-z]{0,3}".prop_map(serde_json::Value::from),
        Just(serde_json::Value::Null),
        Just(json!([1, 2])),
        Just(json!({"cached_tokens": 3})),
    ]
}

fn usage_key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "prompt_tokens",
            "completion_tokens",
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "promptTokenCount",
            "candidatesTokenCount",
            "cachedContentTokenCount",
            "thoughtsTokenCount",
            "prompt_tokens_details",
            "input_tokens_details",
            "completion_tokens_details",
            "output_tokens_details",
            "total_tokens",
        ])
        .prop_map(str::to_owned),
        "[a-z_]{1,8}",
    ]
}

/// A member value: a count, or a details object with its counts (repeated members kept).
fn member_text() -> impl Strategy<Value = String> {
    let detail_key =
        prop::sample::select(vec!["cached_tokens", "reasoning_tokens", "audio_tokens"]);
    prop_oneof![
        count_value().prop_map(|v| v.to_string()),
        prop::collection::vec((detail_key, count_value()), 0..4).prop_map(|members| {
            let inner: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            format!("{{{}}}", inner.join(","))
        }),
    ]
}

proptest! {
    /// A usage object read straight into counts gives what reading it as a `Value` gives,
    /// repeated members, wrong types and unknown members included.
    #[test]
    fn counts_read_without_a_value_equal_the_value_reading(
        members in prop::collection::vec((usage_key(), member_text()), 0..10),
        escaped in any::<bool>(),
    ) {
        let text = format!(
            "{{{}}}",
            members
                .iter()
                .map(|(k, v)| {
                    // An escaped key spells the same name.
                    let key = if escaped && k.starts_with('p') {
                        format!("\"\\u0070{}\"", &k[1..])
                    } else {
                        format!("\"{k}\"")
                    };
                    format!("{key}:{v}")
                })
                .collect::<Vec<_>>()
                .join(",")
        );
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let counts: raw::Counts = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(counts.raw(), Some(raw::Raw::of(&value)));
        // Any other value reports nothing.
        for other in ["1", "\"usage\"", "null", "[{\"input_tokens\":1}]", "true", "-2.5"] {
            let counts: raw::Counts = serde_json::from_str(other).unwrap();
            prop_assert_eq!(counts.raw(), None);
        }
    }
}
