//! Requests and answers forwarded as sent: bodies but the model, queries, headers, SSE
//! events as they come, compressed bodies decoded.

use super::*;

#[tokio::test]
async fn chat_through_a_combo_keeps_every_byte_but_the_model() {
    let env = setup().await;
    let (status, body) = env.post("/v1/chat/completions", Some("s1"), CHAT).await;
    assert_eq!(status, 200, "{body:?}");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Reply 1 from account acct-a."
    );
    let reqs = env.sim.requests();
    assert_eq!(reqs.len(), 1);
    let up = &reqs[0];
    assert_eq!(up.uri.path(), "/v1/chat/completions");
    assert_eq!(
        &up.body[..],
        CHAT.replace("\"codex-relay\"", "\"gpt-5.5\"").as_bytes()
    );
    assert_eq!(
        up.headers["content-length"],
        up.body.len().to_string().as_str()
    );
    // The client's key never reaches the provider; the account's does.
    assert_eq!(up.headers["authorization"], "Bearer key-a");
    assert!(up.headers.get("x-api-key").is_none());
    assert!(!format!("{:?}", up.headers).contains("client-key"));
}

#[tokio::test]
async fn responses_json_and_sse_with_query_kept() {
    let env = setup().await;
    let body = r#"{"model":"codex-relay","input":"say hi","instructions":"You are terse."}"#;
    let (status, out) = env
        .post("/v1/responses?trace=1&x=a%20b", Some("s"), body)
        .await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        "Reply 1 from account acct-a."
    );

    let stream_body = r#"{"model":"codex-relay","stream":true,"input":[{"type":"message","role":"user","content":"hi"}]}"#;
    let (status, out) = env.post("/v1/responses", Some("s"), stream_body).await;
    assert_eq!(status, 200);
    let text = std::str::from_utf8(&out).unwrap();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"response.created"));
    assert_eq!(events.last(), Some(&"response.completed"));
    assert!(events.contains(&"response.output_item.done"));

    let reqs = env.sim.requests();
    assert_eq!(reqs[0].uri.to_string(), "/v1/responses?trace=1&x=a%20b");
    assert_eq!(
        &reqs[0].body[..],
        body.replace("codex-relay", "gpt-5.5").as_bytes()
    );
    assert_eq!(
        &reqs[1].body[..],
        stream_body.replace("codex-relay", "gpt-5.5").as_bytes()
    );
}

#[tokio::test]
async fn anthropic_messages_with_x_api_key_and_beta_query() {
    let env = setup().await;
    let body = r#"{"model":"claude-relay","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"say hi"}],"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197;"}]}"#;
    let req = Request::post(env.url("/v1/messages?beta=true"))
        .header("x-api-key", "client-key")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "claude-code-20250219")
        .header("x-claude-code-session-id", "cc-1")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap();
    let res = env.send(req).await;
    assert_eq!(res.status(), 200);
    let out = res.into_body().collect().await.unwrap().to_bytes();
    let text = std::str::from_utf8(&out).unwrap();
    assert!(text.starts_with("event: message_start\n"), "{text}");
    assert!(text.contains("event: content_block_delta"));

    let up = &env.sim.requests()[0];
    assert_eq!(up.uri.to_string(), "/v1/messages?beta=true");
    assert_eq!(up.headers["x-api-key"], "key-c");
    assert!(up.headers.get("authorization").is_none());
    assert_eq!(up.headers["anthropic-beta"], "claude-code-20250219");
    assert_eq!(up.headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        &up.body[..],
        body.replace("claude-relay", "claude-sonnet-4-5").as_bytes()
    );
    // Sessions are bound per tenant (the keyed hash of the client's key): the same session id
    // from another client key is another session.
    assert_eq!(env.sessions_of("acct-c").await, 1);
    let again = |key: &'static str| {
        Request::post(env.url("/v1/messages?beta=true"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .header("x-claude-code-session-id", "cc-1")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap()
    };
    assert_eq!(env.send(again("client-key")).await.status(), 200);
    assert_eq!(
        env.sessions_of("acct-c").await,
        1,
        "same tenant, same session"
    );
    assert_eq!(env.send(again("other-key")).await.status(), 200);
    assert_eq!(env.sessions_of("acct-c").await, 2, "another tenant");
}

#[tokio::test]
async fn hop_by_hop_headers_are_stripped_and_others_pass() {
    let env = setup().await;
    let req = Request::post(env.url("/v1/chat/completions"))
        .header("authorization", "Bearer client-key")
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "1")
        .header("keep-alive", "timeout=5")
        .header("proxy-authorization", "Basic eA==")
        .header("te", "trailers")
        .header("x-codex-turn-state", "ts-1")
        .header("x-stainless-retry-count", "0")
        .body(Full::new(Bytes::from_static(CHAT.as_bytes())))
        .unwrap();
    let res = env.send(req).await;
    assert_eq!(res.status(), 200);
    // Headers of the provider's response pass back.
    assert!(res.headers().contains_key("x-codex-turn-state"));
    assert!(res.headers().contains_key("x-codex-primary-used-percent"));
    let up = &env.sim.requests()[0];
    for h in ["x-hop", "keep-alive", "proxy-authorization", "te"] {
        assert!(up.headers.get(h).is_none(), "{h} reached the provider");
    }
    assert_eq!(up.headers["x-codex-turn-state"], "ts-1");
    assert_eq!(up.headers["x-stainless-retry-count"], "0");
    assert_eq!(up.headers["host"], env.sim.addr().to_string().as_str());
}

#[tokio::test]
async fn sse_events_are_forwarded_before_the_upstream_finishes() {
    let env = setup().await;
    let hold = env.sim.hold_streams();
    let req = Request::post(env.url("/v1/responses"))
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","stream":true,"input":"x"}"#,
        )))
        .unwrap();
    let res = env.send(req).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    // The provider is held after its first output event: this frame can only arrive if the
    // gateway forwards it without waiting for the rest. (The timeout turns a regression into a
    // failure instead of a hang; it asserts nothing about speed.)
    let first = tokio::time::timeout(Duration::from_secs(30), body.frame())
        .await
        .expect("the first SSE event was buffered by the gateway")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert!(
        std::str::from_utf8(&first)
            .unwrap()
            .contains("response.created")
    );
    hold.release();
    let rest = body.collect().await.unwrap().to_bytes();
    assert!(
        std::str::from_utf8(&rest)
            .unwrap()
            .contains("response.completed")
    );
}

#[tokio::test]
async fn compressed_bodies_are_forwarded_decoded() {
    use std::io::Write;
    let env = setup().await;
    let zstd = ruzstd::encoding::compress_to_vec(
        CHAT.as_bytes(),
        ruzstd::encoding::CompressionLevel::Fastest,
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(CHAT.as_bytes()).unwrap();
    let gzip = gz.finish().unwrap();
    for (encoding, data) in [("zstd", zstd), ("gzip", gzip)] {
        env.sim.clear_requests();
        let req = Request::post(env.url("/v1/chat/completions"))
            .header("content-encoding", encoding)
            .body(Full::new(Bytes::from(data)))
            .unwrap();
        assert_eq!(env.send(req).await.status(), 200, "{encoding}");
        let up = &env.sim.requests()[0];
        assert!(up.headers.get("content-encoding").is_none());
        assert_eq!(
            &up.body[..],
            CHAT.replace("\"codex-relay\"", "\"gpt-5.5\"").as_bytes()
        );
        assert_eq!(
            up.headers["content-length"],
            up.body.len().to_string().as_str()
        );
    }
}

#[tokio::test]
async fn chat_stream_passes_through() {
    let env = setup().await;
    let body = r#"{"model":"codex-relay","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, out) = env.post("/v1/chat/completions", Some("s"), body).await;
    assert_eq!(status, 200);
    let text = std::str::from_utf8(&out).unwrap();
    let chunks: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "Reply 1 from account acct-a.");
    assert!(chunks.last().unwrap()["usage"]["total_tokens"].is_u64());
    assert!(text.trim_end().ends_with("data: [DONE]"));
    assert_eq!(
        &env.sim.requests()[0].body[..],
        body.replace("codex-relay", "gpt-5.5").as_bytes()
    );
}

/// A late turn read in several chunks that names `model` again near its end: nested in a
/// tool's schema (as every Claude Code request does) it is forwarded byte for byte but for the
/// first `model`; at the top level, plain or spelt with escapes, it is refused before any
/// provider sees it.
#[tokio::test]
async fn a_second_model_at_the_end_of_a_large_turn_is_told_from_a_nested_one() {
    let env = setup().await;
    let output = serde_json::to_string(&"tool output, forty bytes of it, again.\n".repeat(15_000));
    let turn = |end: &str| {
        format!(
            r#"{{"model":"codex-relay","input":{},"stream":false{end}}}"#,
            output.as_ref().unwrap()
        )
    };
    let tools = r#","tools":[{"type":"function","name":"agent","parameters":{"type":"object","properties":{"model":{"type":"string"}}}}]"#;
    let nested = turn(tools);
    assert!(nested.len() > 4 * 128 * 1024, "read in several chunks");
    let (status, body) = env.post("/v1/responses", Some("s-nested"), &nested).await;
    assert_eq!(status, 200, "{body:?}");
    let sent = env.sim.requests().pop().unwrap().body;
    let after_model = &nested[nested.find(",\"input\"").unwrap()..];
    assert!(sent.starts_with(br#"{"model":"gpt-5.5""#));
    assert!(sent.ends_with(after_model.as_bytes()));
    for second in [r#","model":"gpt-5.5""#, r#","mod\u0065l":"gpt-5.5""#] {
        let (status, body) = env
            .post("/v1/responses", Some("s-second"), &turn(second))
            .await;
        assert_eq!(status, 400, "{second}");
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("model"), "{text}");
    }
    assert_eq!(
        env.sim.requests().len(),
        1,
        "no refused turn reached the provider"
    );
}

/// A late Claude Code turn (read in several chunks) whose history names `model` in the input
/// of each of forty sub-agent calls, and whose tool results hold text outside ASCII written
/// with `\u` escapes, as a client that escapes it sends them: forwarded as sent but for the
/// first `model`, with or without a session header. The same turn with a second top-level
/// `model` after its history is refused before any provider sees it.
#[tokio::test]
async fn a_late_turn_naming_model_in_every_sub_agent_call_is_forwarded() {
    let env = setup().await;
    let output = r"caf\u00e9 \u2713 passed, and forty more bytes of test output. ".repeat(250);
    let calls: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"toolu_{i}","name":"Task","input":{{"description":"check {i}","prompt":"look at part {i}","model":"haiku"}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{i}","content":"{output}"}}]}}"#
            )
        })
        .collect();
    let turn = |second: &str| {
        format!(
            r#"{{"model":"claude-relay","max_tokens":64,"messages":[{{"role":"user","content":"split the work"}},{},{{"role":"user","content":"go on"}}]{second},"tools":[{{"name":"Task","description":"a sub-agent","input_schema":{{"type":"object","properties":{{"prompt":{{"type":"string"}},"model":{{"type":"string"}}}}}}}}]}}"#,
            calls.join(",")
        )
    };
    let body = turn("");
    assert!(body.len() > 4 * 128 * 1024, "read in several chunks");
    let second = turn(r#","model":"claude-sonnet-4-5""#);
    // With the session in the head (the body kept in its chunks), and without (joined whole,
    // the session read from the body).
    for (n, session) in [Some("s-agents"), None].into_iter().enumerate() {
        let (status, answer) = env.post("/v1/messages", session, &body).await;
        assert_eq!(status, 200, "{session:?}: {answer:?}");
        let sent = env.sim.requests().pop().unwrap().body;
        let expected = body.replacen("claude-relay", "claude-sonnet-4-5", 1);
        assert_eq!(&sent[..], expected.as_bytes());
        let (status, answer) = env.post("/v1/messages", session, &second).await;
        assert_eq!(status, 400, "{session:?}: {answer:?}");
        let forwarded = env.sim.requests().len();
        assert_eq!(forwarded, n + 1, "the refused turn reached no provider");
    }
}
