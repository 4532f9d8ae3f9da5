//! Session ids, fingerprints and tenants on real client captures.

use context_relay_core::session::{
    self, MAX_SESSION_ID_CHARS, SessionSource, SessionSources, fingerprint, session_id, tenant,
};
use context_relay_testkit::sessions;
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use serde_json::{Value, json};

struct Capture {
    headers: HeaderMap,
    body: Value,
    /// The client's order of the top-level keys, which the fingerprint depends on.
    order: Vec<String>,
}

impl Capture {
    fn bytes(&self) -> Vec<u8> {
        self.to_bytes(&self.body)
    }

    /// `body` (this capture's, edited) with the capture's key order.
    fn to_bytes(&self, body: &Value) -> Vec<u8> {
        sessions::to_bytes_in_order(body, &self.order)
    }
}

fn capture(name: &str) -> Capture {
    let path = format!(
        "{}/../../../shared/fixtures/clients/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let v: Value = serde_json::from_str(&text).unwrap();
    let headers = v["headers"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v.as_str().unwrap()).unwrap(),
            )
        })
        .collect();
    Capture {
        headers,
        body: v["body"].clone(),
        order: sessions::key_order(name),
    }
}

fn header(name: &'static str) -> SessionSource {
    SessionSource::Header(HeaderName::from_static(name))
}

#[test]
fn codex_cli_session_header() {
    let c = capture("11-codex_exec-v1_responses.json");
    let body = c.bytes();
    let found = session_id(&c.headers, Some(&body), &SessionSources::default()).unwrap();
    assert_eq!(found.source, header("session-id"));
    assert_eq!(found.id, c.headers["session-id"].to_str().unwrap());

    // Without its headers: Codex sends prompt_cache_key (the same id) after the history; it
    // counts there, and before it alike.
    let found = session_id(&HeaderMap::new(), Some(&body), &SessionSources::default()).unwrap();
    assert_eq!(found.source, SessionSource::PromptCacheKey);
    assert_eq!(found.id, c.headers["session-id"].to_str().unwrap());
    let mut v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let key = v
        .as_object_mut()
        .unwrap()
        .remove("prompt_cache_key")
        .unwrap();
    let rest = serde_json::to_string(&v).unwrap();
    let front = format!(r#"{{"prompt_cache_key":{key},{}"#, &rest[1..]);
    let found = session_id(
        &HeaderMap::new(),
        Some(front.as_bytes()),
        &SessionSources::default(),
    )
    .unwrap();
    assert_eq!(found.source, SessionSource::PromptCacheKey);
    assert_eq!(found.id, c.headers["session-id"].to_str().unwrap());
    // Without it at all, the fingerprint tells the session.
    let found = session_id(
        &HeaderMap::new(),
        Some(rest.as_bytes()),
        &SessionSources::default(),
    )
    .unwrap();
    assert_eq!(found.source, SessionSource::Fingerprint);
    assert_eq!(Some(found.id), fingerprint(rest.as_bytes()));
}

#[test]
fn claude_code_header_then_metadata_user_id() {
    let c = capture("13-claude_cli-v1_messages_beta_true.json");
    let body = c.bytes();
    let expected = c.headers["x-claude-code-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let found = session_id(&c.headers, Some(&body), &SessionSources::default()).unwrap();
    assert_eq!(found.source, header("x-claude-code-session-id"));
    assert_eq!(found.id, expected);

    // Without the header: Claude Code's metadata comes after the history; it counts there,
    // and gives the same id as the header.
    let mut without = c.headers.clone();
    without.remove("x-claude-code-session-id");
    let found = session_id(&without, Some(&body), &SessionSources::default()).unwrap();
    assert_eq!(found.source, SessionSource::MetadataUserId);
    assert_eq!(found.id, expected);
    // Sent before the history, the same.
    let mut v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let meta = v.as_object_mut().unwrap().remove("metadata").unwrap();
    let rest = serde_json::to_string(&v).unwrap();
    let front = format!(r#"{{"metadata":{meta},{}"#, &rest[1..]);
    let found = session_id(&without, Some(front.as_bytes()), &SessionSources::default()).unwrap();
    assert_eq!(found.source, SessionSource::MetadataUserId);
    assert_eq!(found.id, expected);
    // Without it, the fingerprint.
    let found = session_id(&without, Some(rest.as_bytes()), &SessionSources::default()).unwrap();
    assert_eq!(found.source, SessionSource::Fingerprint);
}

#[test]
fn legacy_metadata_user_id() {
    let body = br#"{"model": "claude-sonnet-4-5",
        "metadata": {"user_id": "user_5f2a_account__session_0b8e9f5c-1d2e-4f3a-9b8c-7d6e5f4a3b2c"},
        "messages": [{"role": "user", "content": "hi"}]}"#;
    let found = session_id(&HeaderMap::new(), Some(body), &SessionSources::default()).unwrap();
    assert_eq!(found.id, "0b8e9f5c-1d2e-4f3a-9b8c-7d6e5f4a3b2c");
    assert_eq!(found.source, SessionSource::MetadataUserId);
}

#[test]
fn blank_header_falls_through_to_the_next_source() {
    let mut h = HeaderMap::new();
    h.insert("x-session-id", HeaderValue::from_static("   "));
    h.insert("thread-id", HeaderValue::from_static("t-1"));
    let found = session_id(&h, None, &SessionSources::default()).unwrap();
    assert_eq!(
        (found.id.as_str(), found.source),
        ("t-1", header("thread-id"))
    );

    let mut h = HeaderMap::new();
    h.insert("session-id", HeaderValue::from_static(""));
    let body = br#"{"prompt_cache_key":"  ","metadata":{"user_id":"plain-user"},"model":"m","input":"hi"}"#;
    let found = session_id(&h, Some(body), &SessionSources::default()).unwrap();
    assert_eq!(found.source, SessionSource::Fingerprint);
}

#[test]
fn long_ids_are_capped() {
    let long = "a".repeat(200);
    let mut h = HeaderMap::new();
    h.insert("x-session-id", HeaderValue::from_str(&long).unwrap());
    let found = session_id(&h, None, &SessionSources::default()).unwrap();
    assert_eq!(found.id.len(), MAX_SESSION_ID_CHARS);
    // The beginning as sent, then a digest of the whole id.
    assert_eq!(found.id[..112], format!("{}~", &long[..111]));

    let body = json!({ "prompt_cache_key": "ü".repeat(200) });
    let found = session_id(
        &HeaderMap::new(),
        Some(&serde_json::to_vec(&body).unwrap()),
        &SessionSources::default(),
    )
    .unwrap();
    assert_eq!(found.id.chars().count(), MAX_SESSION_ID_CHARS);
}

#[test]
fn header_order_follows_the_sources() {
    let mut h = HeaderMap::new();
    h.insert("thread-id", HeaderValue::from_static("thread"));
    h.insert("session-id", HeaderValue::from_static("session"));
    assert_eq!(
        session_id(&h, None, &SessionSources::default()).unwrap().id,
        "session"
    );
    let reversed = SessionSources::default().headers([
        HeaderName::from_static("thread-id"),
        HeaderName::from_static("session-id"),
    ]);
    assert_eq!(session_id(&h, None, &reversed).unwrap().id, "thread");
}

/// Captures 01–03 are three independent one-turn requests (same prompt, different streaming
/// options), not turns of one conversation, so the later turn is built from 01.
#[test]
fn openai_sdk_fingerprint_is_stable_across_turns() {
    let first = capture("01-openai-v1_chat_completions.json");
    let first_fp = fingerprint(&first.bytes()).unwrap();
    assert_eq!(first_fp.len(), 16);
    assert!(first_fp.bytes().all(|b| b.is_ascii_hexdigit()));

    let mut later = first.body.clone();
    let messages = later["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": "hi"}));
    messages.push(json!({"role": "user", "content": "now say bye"}));
    later["stream"] = json!(true);
    let later_fp = fingerprint(&first.to_bytes(&later)).unwrap();
    assert_eq!(first_fp, later_fp);

    // session_id uses it when the SDK sends nothing else.
    let found = session_id(
        &first.headers,
        Some(&first.bytes()),
        &SessionSources::default(),
    )
    .unwrap();
    assert_eq!(
        (found.id.as_str(), found.source),
        (first_fp.as_str(), SessionSource::Fingerprint)
    );

    let mut other = first.body.clone();
    other["messages"][1]["content"] = json!("say hello");
    assert_ne!(fingerprint(&first.to_bytes(&other)).unwrap(), first_fp);
    let mut other_system = first.body.clone();
    other_system["messages"][0]["content"] = json!("You are verbose.");
    assert_ne!(
        fingerprint(&first.to_bytes(&other_system)).unwrap(),
        first_fp
    );
    let mut other_model = first.body.clone();
    other_model["model"] = json!("gpt-5-mini");
    assert_ne!(
        fingerprint(&first.to_bytes(&other_model)).unwrap(),
        first_fp
    );
}

#[test]
fn tool_round_trips_keep_their_fingerprint() {
    for (a, b) in [
        (
            "codex-tool-roundtrip/01-codex_exec-v1_responses.json",
            "codex-tool-roundtrip/02-codex_exec-v1_responses.json",
        ),
        (
            "claude-tool-roundtrip/02-claude_cli-v1_messages_beta_true.json",
            "claude-tool-roundtrip/03-claude_cli-v1_messages_beta_true.json",
        ),
    ] {
        let (a, b) = (capture(a), capture(b));
        assert_eq!(fingerprint(&a.bytes()), fingerprint(&b.bytes()));
        assert!(fingerprint(&a.bytes()).is_some());
    }
    // Different Codex prompts in the same directory are different conversations, although
    // both start with the same `<environment_context>` user message.
    let codex = |prompt: &str| {
        let captured = capture("11-codex_exec-v1_responses.json");
        let mut body = captured.body.clone();
        body["input"][2]["content"][0]["text"] =
            json!("<environment_context>\n  <cwd>/w</cwd>\n</environment_context>");
        body["input"][3]["content"][0]["text"] = json!(prompt);
        fingerprint(&captured.to_bytes(&body))
    };
    assert_ne!(codex("say hi"), codex("run echo hi"));
    assert_eq!(codex("say hi"), codex("say hi"));
}

#[test]
fn other_api_shapes_fingerprint() {
    for name in [
        "04-openai-v1_responses.json",
        "07-anthropic-v1_messages.json",
        "11-codex_exec-v1_responses.json",
        "13-claude_cli-v1_messages_beta_true.json",
    ] {
        assert!(fingerprint(&capture(name).bytes()).is_some(), "{name}");
    }
}

#[test]
fn tenants() {
    let openai = capture("01-openai-v1_chat_completions.json");
    let claude = capture("13-claude_cli-v1_messages_beta_true.json");
    let a = tenant(&openai.headers);
    assert_eq!(a.len(), 16);
    assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));

    let mut other = HeaderMap::new();
    other.insert("authorization", HeaderValue::from_static("Bearer sk-other"));
    assert_ne!(tenant(&other), a);
    // Claude Code's x-api-key carries the same dummy key as the SDK's bearer token.
    assert_eq!(tenant(&claude.headers), a);

    assert_eq!(tenant(&HeaderMap::new()), "anonymous");
    let mut blank = HeaderMap::new();
    blank.insert("authorization", HeaderValue::from_static("Bearer "));
    blank.insert("x-api-key", HeaderValue::from_static("  "));
    assert_eq!(tenant(&blank), "anonymous");
    let mut basic = HeaderMap::new();
    basic.insert(
        "authorization",
        HeaderValue::from_static("Basic dXNlcjpwYXNz"),
    );
    assert_ne!(tenant(&basic), "anonymous");
    assert_ne!(tenant(&basic), a);
}

#[test]
fn gemini_keys_are_tenants_of_their_own() {
    let goog = |key: &'static str| {
        let mut h = HeaderMap::new();
        h.insert("x-goog-api-key", HeaderValue::from_static(key));
        h
    };
    let one = tenant(&goog("AIza-one"));
    assert_ne!(one, "anonymous");
    assert_ne!(tenant(&goog("AIza-two")), one);
    // The same key is the same tenant whichever header carries it.
    let mut bearer = HeaderMap::new();
    bearer.insert("authorization", HeaderValue::from_static("Bearer AIza-one"));
    assert_eq!(tenant(&bearer), one);
    // Bearer and x-api-key come first.
    let mut both = goog("AIza-two");
    both.insert("x-api-key", HeaderValue::from_static("AIza-one"));
    assert_eq!(tenant(&both), one);
    assert_eq!(tenant(&goog("   ")), "anonymous");
}

#[test]
fn deeply_nested_bodies_are_refused_not_overflowed() {
    let deep = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":{}"x"{}}}]}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert_eq!(fingerprint(deep.as_bytes()), None);
    assert_eq!(
        session_id(
            &HeaderMap::new(),
            Some(deep.as_bytes()),
            &SessionSources::default()
        ),
        None
    );
}

proptest! {
    #[test]
    fn a_key_is_one_credential_in_any_of_the_three_headers(key in "[!-~]{1,60}", pad in "[ \t]{0,3}") {
        let carried = |name: &str, value: String| {
            let mut h = HeaderMap::new();
            h.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(&value).unwrap(),
            );
            h
        };
        let goog = carried("x-goog-api-key", format!("{pad}{key}{pad}"));
        prop_assert_eq!(session::credential(&goog), Some(key.as_bytes()));
        prop_assert_eq!(tenant(&goog), tenant(&carried("x-api-key", key.clone())));
        prop_assert_eq!(tenant(&goog), tenant(&carried("authorization", format!("Bearer {key}"))));
    }

    #[test]
    fn session_id_never_panics(
        values in proptest::collection::vec((0usize..9, proptest::collection::vec(any::<u8>(), 0..300)), 0..6),
        body in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..400)),
    ) {
        let names = session::DEFAULT_SESSION_HEADERS;
        let mut h = HeaderMap::new();
        for (i, v) in values {
            let name = names.get(i).copied().unwrap_or("authorization");
            if let Ok(v) = HeaderValue::from_bytes(&v) {
                h.append(name, v);
            }
        }
        if let Some(found) = session_id(&h, body.as_deref(), &SessionSources::default()) {
            prop_assert!(!found.id.trim().is_empty());
            prop_assert!(found.id.chars().count() <= MAX_SESSION_ID_CHARS);
        }
        let t = tenant(&h);
        prop_assert!(t == "anonymous" || t.len() == 16);
        if let Some(fp) = body.as_deref().and_then(fingerprint) {
            prop_assert_eq!(fp.len(), 16);
        }
    }

    #[test]
    fn json_bodies_never_panic(
        model in proptest::option::of("[a-z0-9.-]{0,12}"),
        system in proptest::option::of(".{0,40}"),
        turns in proptest::collection::vec(("(user|assistant|system|developer|tool|x)", ".{0,40}"), 0..6),
        id in proptest::option::of(".{0,200}"),
    ) {
        let messages: Vec<Value> = turns
            .iter()
            .map(|(role, text)| json!({"role": role, "content": [{"type": "text", "text": text}]}))
            .collect();
        let body = json!({
            "model": model,
            "system": system,
            "messages": messages,
            "input": messages,
            "metadata": {"user_id": id.as_ref().map(|s| format!("user_x_account__session_{s}"))},
            "prompt_cache_key": id,
            "tools": [{"name": "b"}, {"function": {"name": "a"}}, {"type": "web_search"}, 5, "x"],
        });
        let bytes = serde_json::to_vec(&body).unwrap();
        let found = session_id(&HeaderMap::new(), Some(&bytes), &SessionSources::default());
        if let Some(found) = found {
            prop_assert!(found.id.chars().count() <= MAX_SESSION_ID_CHARS);
        }
        // Appending turns never changes the fingerprint once a user turn exists.
        if turns.iter().any(|(r, t)| r == "user" && !(t.trim().starts_with('<') && t.trim().ends_with('>'))) {
            let mut longer = body.clone();
            longer["messages"].as_array_mut().unwrap().push(json!({"role": "user", "content": "more"}));
            longer["input"].as_array_mut().unwrap().push(json!({"role": "user", "content": "more"}));
            prop_assert_eq!(fingerprint(&bytes), fingerprint(&serde_json::to_vec(&longer).unwrap()));
        }
    }
}

/// The OpenAI SDK's Responses body: `model`, `input`, then `prompt_cache_key` after the
/// history, no session header.
fn sdk_turn(key: &str, opening: &str, history_bytes: usize) -> Vec<u8> {
    let mut input = vec![json!({"role": "user", "content": opening})];
    let filler = "x".repeat(1000);
    let mut size = 0;
    let mut i = 0;
    while size < history_bytes {
        let item = json!({"role": if i % 2 == 0 { "assistant" } else { "user" },
                          "content": format!("{i} {filler}")});
        size += item.to_string().len();
        input.push(item);
        i += 1;
    }
    format!(
        r#"{{"model":"gpt-5","input":{},"prompt_cache_key":{}}}"#,
        Value::Array(input),
        json!(key)
    )
    .into_bytes()
}

#[test]
fn prompt_cache_key_after_a_large_history_is_the_session() {
    let sources = SessionSources::default();
    let id = |body: &[u8]| {
        let found = session_id(&HeaderMap::new(), Some(body), &sources).unwrap();
        assert_eq!(found.source, SessionSource::PromptCacheKey);
        found.id
    };
    // One conversation, its first turn and a turn with 1 MiB of history: one session.
    let first = id(&sdk_turn("conv-1", "Fix the flaky test.", 0));
    let late = id(&sdk_turn("conv-1", "Fix the flaky test.", 1 << 20));
    assert_eq!(first, "conv-1");
    assert_eq!(late, first);
    // Two conversations with the same opening and their own keys: two sessions (the
    // fingerprint alone would fold them into one).
    let other = id(&sdk_turn("conv-2", "Fix the flaky test.", 1 << 20));
    assert_eq!(other, "conv-2");
    assert_eq!(
        fingerprint(&sdk_turn("conv-1", "Fix the flaky test.", 0)),
        fingerprint(&sdk_turn("conv-2", "Fix the flaky test.", 0))
    );
}
