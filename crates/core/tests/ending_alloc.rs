//! Watching a stream for its end costs nothing per ordinary event: the end detector reads an
//! event's JSON only when it may hold a member that decides the ending (`type`, `error`, a
//! finish reason that is not `null`), so the chunks of an answer in progress are judged
//! without building an index of each (which allocated, and cost about 6 000 instructions per
//! chunk of a Chat Completions stream).
//!
//! A counting allocator (test-only, `support`) tracks the peak of the bytes live on the thread
//! that asked for counting.

mod support;

use context_relay_core::ending::{EndDetector, Ending};
use support::peak_of;

/// Chunks of answers in progress, as providers stream them: Chat Completions text and tool
/// call arguments (after the chunk that opens the call), its usage chunk, and Gemini's.
const ORDINARY: [&str; 5] = [
    r#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hello, \"world\""},"logprobs":null,"finish_reason":null}]}"#,
    r#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"src/main.rs\",\"type\":\"error\"}"}}]},"logprobs":null,"finish_reason" : null}]}"#,
    r#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}"#,
    r#"data: {"candidates":[{"content":{"parts":[{"text":"The answer"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":4},"modelVersion":"gemini-2.5-pro"}"#,
    r#"data: {"choices":[{"index":0,"delta":{"content":"say \"finish_reason\":\"stop\""},"finish_reason":null}]}"#,
];

#[test]
fn ordinary_chunks_are_judged_without_allocating() {
    let mut end = EndDetector::new();
    // The first chunks decide the grammar (SSE) and may set the detector's searchers up (once
    // per process: the second one is looked at whole, once the output has started).
    for _ in 0..2 {
        end.push(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n");
    }
    for chunk in ORDINARY {
        let event = format!("{chunk}\n\n");
        let ((), peak) = peak_of(|| end.push(event.as_bytes()));
        assert_eq!(peak, 0, "judging {chunk} allocated {peak} bytes");
        assert_eq!(end.ending(), Ending::Unfinished, "{chunk}");
        assert!(end.output_started());
    }
    // The chunks that decide are still read.
    end.push(b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
    end.push(b"data: [DONE]\n\n");
    assert_eq!(end.finish(), Ending::Completed);
}

#[test]
fn a_chunk_that_may_decide_is_read() {
    for (stream, ending) in [
        (
            "data: {\"choices\":[],\"error\":{\"message\":\"overloaded\"}}\n\n",
            Ending::Failed,
        ),
        (
            "data: {\"candidates\":[{\"finishReason\":\"STOP\",\"index\":0}]}\n\n",
            Ending::Completed,
        ),
        (
            "data: {\"choices\":[{\"fin\\u0069sh_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
            Ending::Completed,
        ),
        (
            "data: {\"id\":\"m\",\"type\":\"message_stop\"}\n\n",
            Ending::Completed,
        ),
    ] {
        assert_eq!(EndDetector::of(stream.as_bytes()), ending, "{stream}");
    }
}
