use super::*;
use proptest::prelude::*;

const RESPONSES_OK: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"error\":null}}\n\n\
    event: response.in_progress\ndata: {\"type\":\"response.in_progress\"}\n\n\
    event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n\
    event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\"}}\n\n";
const RESPONSES_FAILED: &str = "event: response.created\r\ndata: {\"type\":\"response.created\"}\r\n\r\n\
    event: response.failed\r\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"invalid_encrypted_content\",\"message\":\"The encrypted content could not be verified.\"}}}\r\n\r\n";
const RESPONSES_INCOMPLETE: &str = "data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n\
    data: {\"type\":\"response.incomplete\",\"response\":{\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}}\n\n";
const ANTHROPIC_OK: &str = "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {\"id\": \"msg_1\"}}\n\n\
    event: ping\ndata: {\"type\": \"ping\"}\n\n\
    event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"Hi\"}}\n\n\
    event: message_delta\ndata: {\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"end_turn\"}}\n\n\
    event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n";
const ANTHROPIC_ERROR: &str = "event: message_start\ndata: {\"type\": \"message_start\"}\n\n\
    event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
const CHAT_OK: &str = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
    data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
    data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\n\
    data: [DONE]\n\n";
const CHAT_NO_REASON: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\ndata: [DONE]\n\n";
const CHAT_ERROR: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\n";
const GEMINI_OK: &str = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}]}}]}\r\n\r\n\
    data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"!\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{}}\r\n\r\n";
const GEMINI_CUT: &str =
    "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}]}}]}\n\n";
const JSON_OK: &str = "{\"id\":\"r\",\"output\":[{\"type\":\"message\",\"content\":[{\"text\":\"a \\\" } ] brace\"}]}]}\n";
const GEMINI_ARRAY: &str = "[{\"candidates\":[]},\n{\"candidates\":[{\"finishReason\":\"STOP\"}]}]";

fn cases() -> Vec<(&'static str, Ending)> {
    vec![
        (RESPONSES_OK, Ending::Completed),
        (RESPONSES_FAILED, Ending::Failed),
        (RESPONSES_INCOMPLETE, Ending::Failed),
        (ANTHROPIC_OK, Ending::Completed),
        (ANTHROPIC_ERROR, Ending::Failed),
        (CHAT_OK, Ending::Completed),
        (CHAT_NO_REASON, Ending::Unfinished),
        (CHAT_ERROR, Ending::Failed),
        (GEMINI_OK, Ending::Completed),
        (GEMINI_CUT, Ending::Unfinished),
        (JSON_OK, Ending::Completed),
        (GEMINI_ARRAY, Ending::Completed),
        ("", Ending::Unfinished),
        ("  \n", Ending::Unfinished),
        ("{\"a\":\"}\"", Ending::Unfinished),
        ("{\"a\":1} x", Ending::Unfinished),
        (": keep-alive\n\n", Ending::Unfinished),
    ]
}

fn split_run(body: &[u8], cuts: &[usize]) -> (Ending, bool, Option<Vec<u8>>) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut d = EndDetector::new();
    let mut at = 0;
    for c in cuts {
        d.push(&body[at..c]);
        at = c;
    }
    d.push(&body[at..]);
    let ending = d.finish();
    (ending, d.output_started(), d.failure().map(<[u8]>::to_vec))
}

#[test]
fn verdicts_of_whole_bodies() {
    for (body, want) in cases() {
        assert_eq!(EndDetector::of(body.as_bytes()), want, "{body}");
    }
}

#[test]
fn every_two_way_split_agrees() {
    for (body, want) in cases() {
        let bytes = body.as_bytes();
        let whole = split_run(bytes, &[]);
        for cut in 0..=bytes.len() {
            assert_eq!(split_run(bytes, &[cut]), whole, "{body} cut at {cut}");
        }
        assert_eq!(whole.0, want);
    }
}

#[test]
fn a_failure_carries_its_event_and_is_final() {
    let mut d = EndDetector::new();
    d.push(RESPONSES_FAILED.as_bytes());
    assert!(
        !d.output_started(),
        "a failure before content is not output"
    );
    d.push(b"data: {\"type\":\"response.completed\"}\n\n");
    assert_eq!(d.finish(), Ending::Failed);
    let failure = String::from_utf8_lossy(d.failure().unwrap()).into_owned();
    assert!(failure.contains("invalid_encrypted_content"), "{failure}");
}

#[test]
fn a_later_failure_overturns_a_success() {
    let body = format!("{ANTHROPIC_OK}{ANTHROPIC_ERROR}");
    assert_eq!(EndDetector::of(body.as_bytes()), Ending::Failed);
}

#[test]
fn members_after_a_null_finish_reason_are_still_read() {
    // The few bytes after a null `finish_reason` are read a byte at a time when short: a
    // member there (a top-level `error`, a `type`, an escaped key) still decides.
    for (data, ending) in [
        (
            r#"{"choices":[{"finish_reason":null}]}"#,
            Ending::Unfinished,
        ),
        (
            r#"{"choices":[{"finish_reason":null}],"error":{"m":1}}"#,
            Ending::Failed,
        ),
        (
            r#"{"choices":[{"finish_reason":null}],"\u0065rror":1}"#,
            Ending::Failed,
        ),
        (
            r#"{"choices":[{"finish_reason":null}],"type":"error"}"#,
            Ending::Failed,
        ),
        (
            r#"{"choices":[{"finish_reason":null,"x":1}],"type":"message_stop"}"#,
            Ending::Completed,
        ),
        (
            r#"{"choices":[{"finish_reason":null},{"finish_reason":"stop"}]}"#,
            Ending::Completed,
        ),
    ] {
        let body = format!("data: {data}\n\ndata: [DONE]\n\n");
        assert_eq!(EndDetector::of(body.as_bytes()), ending, "{data}");
    }
}

#[test]
fn output_starts_after_the_opening_events() {
    let mut d = EndDetector::new();
    let (opening, rest) =
        RESPONSES_OK.split_at(RESPONSES_OK.find("event: response.output").unwrap());
    d.push(opening.as_bytes());
    assert!(!d.output_started());
    assert_eq!(d.ending(), Ending::Unfinished);
    d.push(rest.as_bytes());
    assert!(d.output_started());
    assert_eq!(d.ending(), Ending::Completed);
    let mut json = EndDetector::new();
    json.push(b" {");
    assert!(json.output_started());
}

#[test]
fn an_oversized_terminal_event_is_still_recognised() {
    let big = "x".repeat(EVENT_DATA_LIMIT + 10);
    let body = format!(
        "data: {{\"type\":\"response.completed\",\"response\":{{\"text\":\"{big}\"}}}}\n\n"
    );
    assert_eq!(EndDetector::of(body.as_bytes()), Ending::Completed);
    let named =
        format!("event: message_stop\ndata: {{\"pad\":\"{big}\",\"type\":\"message_stop\"}}\n\n");
    assert_eq!(EndDetector::of(named.as_bytes()), Ending::Completed);
}

#[test]
fn an_unterminated_last_event_is_read_at_the_end() {
    assert_eq!(
        EndDetector::of(b"data: {\"choices\":[{\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]"),
        Ending::Completed
    );
    let mut d = EndDetector::new();
    d.push(b"event: message_stop\ndata: {\"type\":\"message_stop\"}");
    assert_eq!(
        d.ending(),
        Ending::Unfinished,
        "not dispatched before the end"
    );
    assert_eq!(d.finish(), Ending::Completed);
}

fn event() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("event: response.created\ndata: {\"type\":\"response.created\"}".to_owned()),
        Just("data: {\"type\":\"response.output_text.delta\",\"delta\":\"\\n\\r\"}".to_owned()),
        Just("data: {\"type\":\"response.completed\"}".to_owned()),
        Just("data: {\"type\":\"response.failed\",\"response\":{}}".to_owned()),
        Just("event: error\ndata: {\"type\": \"error\"}".to_owned()),
        Just("event: message_stop\ndata: {\"type\": \"message_stop\"}".to_owned()),
        Just("data: {\"choices\":[{\"finish_reason\":\"stop\"}]}".to_owned()),
        Just("data: [DONE]".to_owned()),
        Just("data: {\"candidates\":[{\"finishReason\":\"STOP\"}]}".to_owned()),
        Just(": ping".to_owned()),
        Just("data: line one\ndata: line two".to_owned()),
        Just(
            "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}"
                .to_owned()
        ),
        Just(
            "data: {\"choices\":[{\"delta\":{\"content\":\"an event\"},\"finish_reason\" : null}]}"
                .to_owned()
        ),
        Just("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}]}".to_owned()),
        Just("data: {\"choices\":[{\"delta\":{}}],\"error\":{\"message\":\"boom\"}}".to_owned()),
        Just("event: response.completed\ndata: {}".to_owned()),
        Just("event: error\ndata: {}".to_owned()),
        Just("data: {\"choices\":[{\"finish_reason\":null}]}\ndata: [DONE]".to_owned()),
        "[a-z:{}\" \\[\\]]{0,20}",
    ]
}

proptest! {
    #[test]
    fn chunk_splits_never_change_the_verdict(
        events in proptest::collection::vec(event(), 0..8),
        eol in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let body = events
            .iter()
            .map(|e| format!("{}{eol}{eol}", e.replace('\n', eol)))
            .collect::<String>();
        let bytes = body.as_bytes();
        prop_assert_eq!(split_run(bytes, &cuts), split_run(bytes, &[]));
    }

    /// One event per chunk (the chunks a detector whose output started may skip when they
    /// hold nothing that changes its verdict), against a byte at a time (never skipped).
    #[test]
    fn chunks_of_whole_events_never_change_the_verdict(
        events in proptest::collection::vec(event(), 0..12),
        eol in prop_oneof![Just("\n"), Just("\r\n")],
    ) {
        let events: Vec<String> = events
            .iter()
            .map(|e| format!("{}{eol}{eol}", e.replace('\n', eol)))
            .collect();
        let body = events.concat();
        let bytes = body.as_bytes();
        let by_byte: Vec<usize> = (0..bytes.len()).collect();
        let mut d = EndDetector::new();
        for event in &events {
            d.push(event.as_bytes());
        }
        let by_event = (d.finish(), d.output_started(), d.failure().map(<[u8]>::to_vec));
        prop_assert_eq!(by_event, split_run(bytes, &by_byte));
    }

    #[test]
    fn json_splits_never_change_the_verdict(
        value in "\\{(\"[a-z\\\\{}\\[\\]\"]{0,6}\":\\[[0-9,]{0,4}\\],?){0,4}\\}?",
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let bytes = value.as_bytes();
        prop_assert_eq!(split_run(bytes, &cuts), split_run(bytes, &[]));
    }
}

/// The reading of an event through a `serde_json::Value` tree, as the detector read it before
/// it used the JSON index: the reference the index's reading must agree with.
fn judge_with_value(v: &mut Verdict, name: &[u8], data: &[u8]) {
    use serde_json::Value;
    fn has_reason(v: &Value, list: &str, field: &str) -> bool {
        v.get(list).and_then(Value::as_array).is_some_and(|items| {
            items.iter().any(|c| {
                c.get(field)
                    .and_then(Value::as_str)
                    .is_some_and(|r| !r.is_empty() && r != "FINISH_REASON_UNSPECIFIED")
            })
        })
    }
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        if v.finish_reason_seen {
            v.succeed();
        }
        return;
    }
    let leading = leading_type(trimmed);
    let parsed = match leading {
        Some(_) => None,
        None => serde_json::from_slice::<Value>(trimmed).ok(),
    };
    let kind: Option<&[u8]> = leading
        .or_else(|| {
            parsed
                .as_ref()
                .and_then(|p| p.get("type"))
                .and_then(Value::as_str)
                .map(str::as_bytes)
        })
        .or((!name.is_empty()).then_some(name));
    match kind {
        Some(b"response.completed" | b"message_stop") => v.succeed(),
        Some(b"response.failed" | b"response.incomplete" | b"error") => v.fail(data),
        _ if name == b"error" => v.fail(data),
        Some(b"response.created" | b"response.in_progress") => {}
        _ => {
            if let Some(p) = &parsed {
                if p.get("error").is_some_and(|e| !e.is_null()) {
                    v.fail(data);
                    return;
                }
                if has_reason(p, "choices", "finish_reason") {
                    v.finish_reason_seen = true;
                }
                if has_reason(p, "candidates", "finishReason") {
                    v.output_started = true;
                    v.succeed();
                    return;
                }
            }
            if !trimmed.is_empty() || !name.is_empty() {
                v.output_started = true;
            }
        }
    }
}

/// Event data of the shapes the detector reads: top-level `type`, `error`, `choices` with
/// `finish_reason` and `candidates` with `finishReason`, in any order, repeated, with escaped
/// keys, values of the wrong kind, a top-level array, and broken JSON.
fn event_data() -> impl Strategy<Value = String> {
    let reason = prop_oneof![
        Just("null"),
        Just("nul"),
        Just("nullx"),
        Just("\"\""),
        Just("\"stop\""),
        Just("\"FINISH_REASON_UNSPECIFIED\""),
        Just("1"),
        Just("\"st\\u006fp\""),
    ];
    let item = (
        prop_oneof![
            3 => Just("finish_reason"),
            3 => Just("finishReason"),
            1 => Just("finish\\u005freason"),
            1 => Just("delta")
        ],
        prop_oneof![Just(":"), Just(" : "), Just(":\n")],
        reason.clone(),
    )
        .prop_map(|(k, sep, v)| format!("{{\"index\":0,\"{k}\"{sep}{v}}}"));
    let list = proptest::collection::vec(prop_oneof![item, Just("2".to_owned())], 0..3)
        .prop_map(|items| format!("[{}]", items.join(",")));
    let member = prop_oneof![
        4 => (prop_oneof![Just("choices"), Just("candidates")], list.clone())
            .prop_map(|(k, l)| format!("\"{k}\":{l}")),
        1 => (prop_oneof![Just("choices"), Just("candidates")], reason.clone())
            .prop_map(|(k, v)| format!("\"{k}\":{v}")),
        2 => (
            prop_oneof![Just("error"), Just("\\u0065rror")],
            prop_oneof![Just("null"), Just("{\"message\":\"x\"}"), Just("\"boom\""), Just("0")]
        )
            .prop_map(|(k, v)| format!("\"{k}\":{v}")),
        2 => prop_oneof![
            Just("\"type\":\"response.completed\""),
            Just("\"type\":\"message_stop\""),
            Just("\"type\":\"error\""),
            Just("\"type\":\"response.created\""),
            Just("\"type\":\"mess\\u0061ge_stop\""),
            Just("\"type\":3"),
        ]
        .prop_map(str::to_owned),
        1 => Just("\"id\":\"c\"".to_owned()),
        // Text that holds the literals read, inside strings (quotes escaped, or closing one).
        2 => prop_oneof![
            Just(r#""content":"say \"finish_reason\":\"stop\"""#),
            Just(r#""content":"x\"type""#),
            Just(r#""content":"error""#),
            Just(r#""content":"\\u0065 \\\"error\\\"""#),
            Just(r#""delta":{"content":"\"finishReason\":\"STOP\""}"#),
        ]
        .prop_map(str::to_owned),
    ];
    let object = proptest::collection::vec(member, 0..5)
        .prop_map(|members| format!("{{{}}}", members.join(",")));
    prop_oneof![
        4 => object.clone(),
        1 => object.clone().prop_map(|o| format!("[{o}]")),
        1 => (object, 0usize..40).prop_map(|(o, cut)| o[..cut.min(o.len())].to_owned()),
        1 => Just("[DONE]".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn the_index_reads_an_event_as_a_value_tree_does(
        events in proptest::collection::vec(
            (prop_oneof![Just(""), Just("error"), Just("message_stop")], event_data()),
            1..5,
        ),
    ) {
        let mut indexed = EndDetector::new().verdict;
        let mut reference = EndDetector::new().verdict;
        for (name, data) in &events {
            let event = Event {
                name: name.as_bytes(),
                data: data.as_bytes(),
                has_data: true,
                data_cut: false,
                line_cut: false,
            };
            indexed.judge(&event);
            judge_with_value(&mut reference, name.as_bytes(), data.as_bytes());
            prop_assert_eq!(indexed.ending, reference.ending, "after {:?}", event.data);
            prop_assert_eq!(indexed.output_started, reference.output_started);
            prop_assert_eq!(indexed.finish_reason_seen, reference.finish_reason_seen);
            prop_assert_eq!(&indexed.failure, &reference.failure);
        }
    }
}
