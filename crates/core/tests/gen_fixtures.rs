//! The generation side (conversation → selection → summary request → reply → handoff) on the
//! request captures of real clients in `shared/fixtures/clients/`.

use context_relay_core::conversation::{Conversation, detect};
use context_relay_core::parse::parse_handoff;
use context_relay_core::prompt::{SummarySettings, summary_prompt, summary_request};
use context_relay_core::reply::{REPLY_CAP, ReplyCapture, summary_text};
use context_relay_core::select::{Selection, select};
use context_relay_core::{ApiShape, RelayMode};
use serde_json::Value;

/// `(path, body)` of a capture, relative to `shared/fixtures/clients/`.
fn fixture(name: &str) -> (String, Value) {
    let path = format!(
        "{}/../../../shared/fixtures/clients/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut v: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let req_path = v["path"].as_str().expect("fixture path").to_owned();
    (req_path, v["body"].take())
}

/// The conversation of a capture, read through the bytes the client sent.
fn conversation(name: &str) -> Conversation {
    let (path, body) = fixture(name);
    let shape = detect(Some(&path), &body).expect("shape");
    let bytes = serde_json::to_vec(&body).expect("serialize");
    Conversation::from_slice(shape, &bytes).expect("conversation")
}

fn standard(conv: &Conversation, reply: Option<&str>) -> Selection {
    select(conv, reply, RelayMode::Standard, 30)
}

#[test]
fn codex_exec_request() {
    let conv = conversation("11-codex_exec-v1_responses.json");
    assert_eq!(conv.shape(), ApiShape::Responses);
    let roles: Vec<_> = conv
        .entries()
        .iter()
        .map(|e| e.role.as_deref().unwrap_or("-"))
        .collect();
    assert_eq!(roles, ["developer", "developer", "user", "user"]);

    // Only client context besides "say hi": boilerplate may take a ninth of six chars, so
    // the history is the ask alone.
    let s = standard(&conv, None);
    assert_eq!((s.source_count, s.selected), (4, 1));
    assert_eq!(s.text, "[… 3 entries omitted …]\n\n[4] USER:\nsay hi");
    assert_eq!(s.task.as_deref(), Some("say hi"));

    let locked = select(&conv, None, RelayMode::SchemaLocked, 30);
    assert_eq!(locked.text, s.text);
}

#[test]
fn codex_tool_round_trip() {
    let conv = conversation("codex-tool-roundtrip/02-codex_exec-v1_responses.json");
    let s = standard(&conv, Some("The command printed hi-from-tool."));
    assert!(
        s.text.contains("USER:\nrun echo hi-from-tool"),
        "{}",
        s.text
    );
    assert!(
        s.text
            .contains("ASSISTANT:\ntool call exec_command({\"cmd\":\"echo hi-from-tool\"})")
    );
    let output = s
        .text
        .lines()
        .find(|l| l.starts_with("tool output: "))
        .expect("tool output line");
    assert!(output.contains("hi-from-tool"));
    assert!(output.chars().count() <= 200);
    assert!(
        s.text
            .ends_with("ASSISTANT:\nThe command printed hi-from-tool.")
    );
    assert_eq!(s.source_count, 7);
}

#[test]
fn claude_code_request() {
    let conv = conversation("13-claude_cli-v1_messages_beta_true.json");
    assert_eq!(conv.shape(), ApiShape::AnthropicMessages);
    let e = conv.entries();
    // Top-level system blocks first, then the messages (with the mid-conversation system one).
    assert_eq!(e[0].role.as_deref(), Some("system"));
    assert!(e[0].text().contains("x-anthropic-billing-header"));
    assert!(e.iter().skip(1).any(|x| x.is_system_like()));

    let s = standard(&conv, None);
    assert!(s.boilerplate_chars * 10 <= s.text.chars().count());
    assert!(!s.text.contains("<system-reminder>"));
    let locked = select(&conv, None, RelayMode::SchemaLocked, 30);
    assert_eq!(locked.boilerplate_chars, 0);
    assert!(!locked.text.contains("SYSTEM:"));
    assert!(locked.selected >= 1);
}

#[test]
fn claude_code_tool_round_trip() {
    let conv = conversation("claude-tool-roundtrip/03-claude_cli-v1_messages_beta_true.json");
    let s = select(&conv, None, RelayMode::SchemaLocked, 30);
    assert!(
        s.text.contains(
            "ASSISTANT:\ntool call Bash({\"command\":\"echo hi-from-tool\",\"description\":\"echo\"})"
        ),
        "{}",
        s.text
    );
    // The tool result is a tool output, though it travels as user content.
    assert!(s.text.ends_with("USER:\ntool output: hi-from-tool"));
    assert_eq!(s.task.as_deref(), Some("run echo hi-from-tool"));
}

#[test]
fn openai_and_anthropic_sdk_requests() {
    let chat = conversation("01-openai-v1_chat_completions.json");
    assert_eq!(
        standard(&chat, None).text,
        "[… 1 entry omitted …]\n\n[2] USER:\nsay hi"
    );
    let responses = conversation("04-openai-v1_responses.json");
    assert_eq!(
        standard(&responses, None).text,
        "[… 1 entry omitted …]\n\n[2] USER:\nsay hi"
    );
    let streamed = conversation("05-openai-v1_responses.json");
    assert_eq!(
        standard(&streamed, Some("hi")).text,
        "[1] USER:\nsay hi\n\n[2] ASSISTANT:\nhi"
    );
    let anthropic = conversation("07-anthropic-v1_messages.json");
    assert_eq!(
        standard(&anthropic, None).text,
        "[… 1 entry omitted …]\n\n[2] USER:\nsay hi"
    );
}

#[test]
fn account_bound_items_carry_no_text() {
    let codex = conversation("synthetic/codex-continuation-account-bound.json");
    let s = standard(&codex, None);
    assert!(
        !s.text.contains("Look at src/cli.rs first."),
        "reasoning is skipped"
    );
    assert!(!s.text.contains("gAAAA"));
    assert!(s.text.contains("tool call shell("));
    assert!(s.text.contains("tool output: src/cli.rs:12:fn main() {"));
    assert!(s.text.ends_with("USER:\nGo ahead."));

    let claude = conversation("synthetic/claude-code-thinking-account-bound.json");
    let s = standard(&claude, None);
    assert!(
        !s.text.contains("The grammar in src/parse.rs"),
        "thinking is ignored"
    );
    assert!(s.text.contains("Because `parse_list` stops at the comma."));
    assert!(s.text.ends_with("USER:\nYes, add the test."));
}

#[test]
fn body_detection_agrees_with_the_path_when_the_body_says_enough() {
    for name in [
        "01-openai-v1_chat_completions.json",
        "02-openai-v1_chat_completions.json",
        "04-openai-v1_responses.json",
        "06-openai-v1_responses.json",
        "07-anthropic-v1_messages.json",
        "11-codex_exec-v1_responses.json",
        "13-claude_cli-v1_messages_beta_true.json",
        "claude-tool-roundtrip/03-claude_cli-v1_messages_beta_true.json",
        "synthetic/claude-code-thinking-account-bound.json",
    ] {
        let (path, body) = fixture(name);
        assert_eq!(detect(None, &body), ApiShape::from_path(&path), "{name}");
    }
    // A system-less Anthropic SDK body is indistinguishable from a Chat body with
    // `max_tokens`: without the path it reads as Chat, the default.
    let (_, body) = fixture("08-anthropic-v1_messages.json");
    assert_eq!(detect(None, &body), Some(ApiShape::ChatCompletions));
}

#[test]
fn whole_generation_side_on_a_codex_turn() {
    let conv = conversation("codex-tool-roundtrip/02-codex_exec-v1_responses.json");

    // The reply of this turn, streamed as Codex gets it.
    let mut capture = ReplyCapture::new(true, REPLY_CAP);
    let sse = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"message\"}}\n\n\
        event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"It printed \"}\n\n\
        event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi-from-tool.\"}\n\n\
        event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\"}}\n\n";
    for chunk in sse.as_bytes().chunks(13) {
        capture.push(chunk);
    }
    let reply = capture.finish();
    assert_eq!(reply.as_deref(), Some("It printed hi-from-tool."));

    let s = select(&conv, reply.as_deref(), RelayMode::Standard, 30);
    let (_, trigger) = fixture("codex-tool-roundtrip/02-codex_exec-v1_responses.json");
    let v = summary_request(
        conv.shape(),
        &trigger,
        &summary_prompt(&s.text, &s.touched_files),
        &SummarySettings::default(),
    );
    assert_eq!(v["max_output_tokens"], 800);
    assert!(v.get("temperature").is_none());
    assert_eq!(
        (&v["store"], &v["stream"]),
        (&Value::Bool(false), &Value::Bool(true))
    );
    let prompt = v["input"][0]["content"][0]["text"]
        .as_str()
        .expect("prompt");
    assert!(prompt.contains("tool call exec_command"));
    assert!(prompt.contains("It printed hi-from-tool."));

    // The summary comes back fenced inside a Responses reply.
    let handoff_json = serde_json::json!({
        "summary": "User asked to run echo hi-from-tool; it ran and printed hi-from-tool.",
        "keyDecisions": ["use exec_command"],
        "taskProgress": {"done": "ran the command", "next": "wait for the user"},
        "activeEntities": ["exec_command"]
    });
    let reply_body = serde_json::json!({"output": [{"type": "message", "content": [
        {"type": "output_text", "text": format!("```json\n{handoff_json}\n```")}
    ]}]});
    let text = summary_text(reply_body.to_string().as_bytes()).expect("summary text");
    let h = parse_handoff(&text).expect("handoff");
    assert!(h.summary.starts_with("User asked"));
    assert_eq!(h.key_decisions, ["use exec_command"]);
    assert_eq!(
        h.task_progress,
        "done: ran the command; next: wait for the user"
    );
    assert_eq!(h.active_entities, ["exec_command"]);
}
