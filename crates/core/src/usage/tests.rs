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
fn a_compressed_stream_cut_short_counts_what_arrived() {
    use std::io::Write;
    // Compressed event by event (a sync flush after each, as a streaming server does), and
    // cut before `message_delta`: the input of `message_start` counts, as uncompressed.
    let cut_at = MESSAGES_SSE.find("event: message_delta").unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&MESSAGES_SSE.as_bytes()[..cut_at]).unwrap();
    gz.flush().unwrap();
    let sent = gz.get_ref().clone();
    let mut reader = UsageReader::new("gzip");
    for piece in sent.chunks(5) {
        reader.push(piece);
    }
    assert_eq!(reader.finish(), Some(usage(105, 90, 5, 1, 0)));
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
        prop_assert_eq!(places::counts(text.as_bytes()), Some(Some(raw::Raw::of(&value))));
        // Any other value reports nothing.
        for other in ["1", "\"usage\"", "null", "[{\"input_tokens\":1}]", "true", "-2.5"] {
            prop_assert_eq!(places::counts(other.as_bytes()), Some(None));
        }
    }
}

/// What a reader that builds a `serde_json::Value` finds in a carrier: the places the module
/// docs name, each the last of its repeated members, in a body that holds the text `sage` (the
/// reader's search for what is worth reading).
fn carrier_by_value(text: &str) -> Option<Usage> {
    if !text.contains("sage") {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let read = |seen: &mut raw::Raw, carrier: &serde_json::Value| {
        let object = carrier.as_object()?;
        let nested = |name: &str| {
            object
                .get(name)
                .and_then(|outer| outer.as_object()?.get("usage"))
        };
        let places = [
            nested("message"),
            nested("response"),
            object.get("usage"),
            object.get("usageMetadata"),
        ];
        for place in places.into_iter().flatten() {
            if place.is_object() {
                seen.merge(&raw::Raw::of(place));
            }
        }
        Some(())
    };
    let mut seen = raw::Raw::default();
    match &value {
        // Every item must be a carrier, or nothing is read.
        serde_json::Value::Array(items) => {
            for item in items {
                read(&mut seen, item)?;
            }
        }
        other => read(&mut seen, other)?,
    }
    seen.usage()
}

/// A usage object's text.
fn counts_text() -> impl Strategy<Value = String> {
    prop::collection::vec((usage_key(), member_text()), 0..4).prop_map(|members| {
        let inner: Vec<String> = members
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", inner.join(", "))
    })
}

/// A carrier's member: a usage place (a usage object, one nested in an object, or a value of
/// another kind), or a member every answer has, which may hold usage-shaped text and objects
/// that are not usage.
fn carrier_member() -> impl Strategy<Value = (String, String)> {
    let place = || {
        prop::sample::select(vec![
            "usage",
            "usageMetadata",
            "message",
            "response",
            "us\\u0061ge",
        ])
    };
    let nested = prop::sample::select(vec!["message", "response", "r\\u0065sponse"]);
    let other = prop::sample::select(vec!["choices", "id", "model", "usage_note", "usage "]);
    prop_oneof![
        (place(), counts_text()).prop_map(|(k, v)| (k.to_owned(), v)),
        (nested, counts_text(), any::<bool>()).prop_map(|(k, v, first)| {
            let inner = if first {
                format!("{{\"usage\" : {v}, \"id\":\"x\"}}")
            } else {
                format!("{{\"id\":\"x\\\"}}\",\"usage\":{v}}}")
            };
            (k.to_owned(), inner)
        }),
        (place(), count_value()).prop_map(|(k, v)| (k.to_owned(), v.to_string())),
        (other, counts_text()).prop_map(|(k, v)| {
            let text = r#""say \"usage\": {\"input_tokens\": 1} [ { \\""#;
            (
                k.to_owned(),
                format!("[{{\"usage\":{v},\"text\":{text}}}, [], {{}}]"),
            )
        }),
    ]
}

proptest! {
    // Cheap cases, and the rarer shapes (a nested usage after a direct one) need many.
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// A carrier read by its structure gives what reading it as a `Value` gives: repeated
    /// places, places of the wrong kind, escaped keys, usage-shaped members and text elsewhere,
    /// arrays of carriers, and bodies cut short (which report nothing), as a whole body and as
    /// an event's data.
    #[test]
    fn carriers_read_by_structure_equal_the_value_reading(
        carriers in prop::collection::vec(prop::collection::vec(carrier_member(), 0..6), 1..3),
        array in any::<bool>(),
        spaced in any::<bool>(),
        cut in any::<prop::sample::Index>(),
        cut_it in any::<bool>(),
    ) {
        let (colon, comma) = if spaced { (" : ", " ,\t ") } else { (":", ",") };
        let objects: Vec<String> = carriers
            .iter()
            .map(|members| {
                let inner: Vec<String> =
                    members.iter().map(|(k, v)| format!("\"{k}\"{colon}{v}")).collect();
                format!("{{{}}}", inner.join(comma))
            })
            .collect();
        let mut text = if array {
            format!("[{}]", objects.join(comma))
        } else {
            objects[0].clone()
        };
        if cut_it {
            text.truncate(cut.index(text.len()));
        }
        prop_assert_eq!(UsageReader::of(text.as_bytes()), carrier_by_value(&text), "{}", text);
        if !array {
            let event = format!("data: {text}\n\n");
            prop_assert_eq!(UsageReader::of(event.as_bytes()), carrier_by_value(&text), "{}", text);
        }
    }
}

#[test]
fn a_repeated_place_counts_once_the_last_one() {
    let body = br#"{"usage":{"input_tokens":1,"output_tokens":2},"usage":{"input_tokens":5}}"#;
    assert_eq!(UsageReader::of(body), Some(usage(5, 0, 0, 0, 0)));
    let body =
        br#"{"usageMetadata":{"promptTokenCount":3},"usage_metadata":{"promptTokenCount":4}}"#;
    assert_eq!(UsageReader::of(body), Some(usage(4, 0, 0, 0, 0)));
    let body = br#"{"message":{"usage":{"input_tokens":7}},"message":"text"}"#;
    assert_eq!(UsageReader::of(body), None);
    let body = br#"{"response":{"usage":{"input_tokens":7},"id":"r","usage":{"input_tokens":8}}}"#;
    assert_eq!(UsageReader::of(body), Some(usage(8, 0, 0, 0, 0)));
    // A key spelled with escapes is the key it spells.
    let body = br#"{"usage":{"input_tokens":5},"us\u0061ge":{"input_tokens":9}}"#;
    assert_eq!(UsageReader::of(body), Some(usage(9, 0, 0, 0, 0)));
    let body = br#"{"usage":{"input_tokens":5,"output_tokens":1,"\u006fu\u0074put_tokens":3}}"#;
    assert_eq!(UsageReader::of(body), Some(usage(5, 0, 0, 3, 0)));
}

#[test]
fn a_body_whose_structure_does_not_close_reports_nothing() {
    for body in [
        r#"{"usage":{"input_tokens":5}} trailing"#,
        r#"{"usage":{"input_tokens":5}}}"#,
        r#"{"usage":{"input_tokens":5},"text":"cut"#,
        r#"{"usage":{"input_tokens":5},"choices":[{}"#,
        r#"{"usage":{"input_tokens":5},"text":"ends in an escape\"#,
        r#"[{"usage":{"input_tokens":5}}, 3]"#,
        r#"[{"usage":{"input_tokens":5}}] x"#,
        r#"{"usage":{"input_tokens":5}, "message":{"usage":{"output_tokens":1]}}"#,
        r#""usage""#,
    ] {
        assert_eq!(UsageReader::of(body.as_bytes()), None, "{body:?}");
    }
}

#[test]
fn whitespace_anywhere_between_tokens_is_read_past() {
    let body = b"{ \"usage\" :\n { \"input_tokens\" : 5 ,\t\"output_tokens\":2\r\n} , \"id\" : 1 }";
    assert_eq!(UsageReader::of(body), Some(usage(5, 0, 0, 2, 0)));
    let body = b" [ {\"usageMetadata\": {\"promptTokenCount\" : 3 } } ,\n{ } ] ";
    assert_eq!(UsageReader::of(body), Some(usage(3, 0, 0, 0, 0)));
}

#[test]
fn only_the_usage_objects_are_parsed() {
    // What lies between the brackets elsewhere is stepped over, not validated (the client
    // reads the answer; the meter only counts it).
    let body = br#"{"choices":[1,,2 oops],"usage":{"input_tokens":5,"output_tokens":2,}}"#;
    assert_eq!(UsageReader::of(body), Some(usage(5, 0, 0, 2, 0)));
    // A member with no key of its own is not taken for the one before it.
    let body = br#"{"usage":{"input_tokens":5}, 7:{"input_tokens":9}}"#;
    assert_eq!(UsageReader::of(body), Some(usage(5, 0, 0, 0, 0)));
}

#[test]
fn a_body_nested_deeper_than_serde_reads_reports_nothing() {
    let nested = |depth: usize| {
        format!(
            r#"{{"usage":{{"input_tokens":5}},"x":{}1{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    assert_eq!(
        UsageReader::of(nested(126).as_bytes()),
        Some(usage(5, 0, 0, 0, 0))
    );
    assert_eq!(UsageReader::of(nested(127).as_bytes()), None);
    assert_eq!(UsageReader::of(nested(100_000).as_bytes()), None);
}

/// The stream's events, one per element: some carry usage, some name it in their text, some
/// have it `null`, with `\n` or `\r\n` line ends and a data line split in two.
fn stream_events() -> impl Strategy<Value = Vec<String>> {
    let event = prop_oneof![
        Just("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}".to_owned()),
        Just("data: {\"choices\":[],\"usage\":null}".to_owned()),
        (1u64..500, 1u64..90).prop_map(|(i, o)| format!(
            "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{i},\"completion_tokens\":{o}}}}}"
        )),
        (1u64..500).prop_map(|o| format!(
            "event: message_delta\ndata: {{\"type\":\"message_delta\",\"usage\":{{\"output_tokens\":{o}}}}}"
        )),
        Just("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"usage\"}}".to_owned()),
        Just("data: {\"usageMetadata\":\ndata: {\"promptTokenCount\":3}}".to_owned()),
        Just(": keep-alive".to_owned()),
    ];
    (prop::collection::vec(event, 0..24), any::<bool>()).prop_map(|(events, crlf)| {
        let end = if crlf { "\r\n" } else { "\n" };
        events
            .into_iter()
            .map(|e| format!("{}{end}{end}", e.replace('\n', end)))
            .collect()
    })
}

proptest! {
    /// A stream fed one event per chunk (the chunks a reader skips when they do not name
    /// `sage`), in random chunks, or a byte at a time (no chunk ever skipped) reads the same.
    #[test]
    fn skipped_chunks_change_nothing(events in stream_events(), cuts in prop::collection::vec(0usize..4000, 0..8)) {
        let body = events.concat();
        let mut by_byte = UsageReader::new("");
        for byte in body.as_bytes().chunks(1) {
            by_byte.push(byte);
        }
        let expected = by_byte.finish();
        let mut by_event = UsageReader::new("");
        for event in &events {
            by_event.push(event.as_bytes());
        }
        prop_assert_eq!(by_event.finish(), expected);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        let mut by_cut = UsageReader::new("");
        let mut at = 0;
        for c in cuts.into_iter().chain([body.len()]) {
            by_cut.push(&body.as_bytes()[at..c]);
            at = c;
        }
        prop_assert_eq!(by_cut.finish(), expected);
    }
}

/// Chunks of whole events are searched for `sage` before they are split: those that do not
/// name it are skipped, and a stream that names it in chunk after chunk is split without
/// the search after [`MATTERED_IN_A_ROW`] of them.
#[test]
fn chunks_of_whole_events_are_searched_until_they_all_name_usage() {
    use crate::sse::MATTERED_IN_A_ROW;
    // The count of chunks in a row that named it, kept by the reader's splitter.
    fn in_a_row(reader: &UsageReader) -> u8 {
        match &reader.mode {
            Mode::Sse(splitter) => splitter.mattered_in_a_row(),
            _ => u8::MAX,
        }
    }
    let mut reader = UsageReader::new("");
    reader.push(b"data: {\"choices\":[],\"usage\":null}\n\n");
    assert_eq!(in_a_row(&reader), 1);
    reader.push(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
    assert_eq!(in_a_row(&reader), 0, "a chunk without it is skipped");
    // Half an event: split as before, the count left as it is.
    reader.push(b"data: {\"choices\":[],\"usage\":nu");
    reader.push(b"ll}\n\n");
    assert_eq!(in_a_row(&reader), 0);
    for _ in 0..20 {
        reader.push(b"data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\n\n");
    }
    assert_eq!(in_a_row(&reader), MATTERED_IN_A_ROW, "no longer searched");
    reader.push(
        b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}\n\n",
    );
    assert_eq!(reader.finish(), Some(usage(9, 0, 0, 4, 0)));
}
