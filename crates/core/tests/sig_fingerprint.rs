//! The session fingerprint (v3) on real-size sessions in each client's own key order: stable
//! across turns, blind to what follows the first ask, different for different asks.

use context_relay_core::session::fingerprint;
use context_relay_testkit::sessions;
use proptest::prelude::*;
use serde_json::{Value, json};

const TURNS: usize = 40;

/// A client: its capture (for the key order) and a body of `turns` turns.
struct Client {
    name: &'static str,
    capture: &'static str,
    build: fn(usize) -> Value,
}

impl Client {
    fn order(&self) -> Vec<String> {
        sessions::key_order(self.capture)
    }

    fn bytes(&self, body: &Value) -> Vec<u8> {
        sessions::to_bytes_in_order(body, &self.order())
    }

    fn at(&self, turns: usize) -> Vec<u8> {
        self.bytes(&(self.build)(turns))
    }
}

/// Codex: the grown capture pads its `<environment_context>` message with filler text; the
/// real one ends with its closing tag, which is what makes it a context block.
fn codex(turns: usize) -> Value {
    let mut body = sessions::codex(turns).0;
    body["input"][2]["content"][0]["text"] = json!(
        "<environment_context>\n  <cwd>/work/config</cwd>\n  <shell>bash</shell>\n</environment_context>"
    );
    body
}

/// The Anthropic SDK (`max_tokens, messages, model, system`): the conversation comes before
/// `model` and `system`, so only the first ask counts.
fn anthropic_sdk(turns: usize) -> Value {
    let mut body = sessions::fixture_body("07-anthropic-v1_messages.json");
    body["system"] = json!("You are a coding agent. ".repeat(800));
    body["messages"] = Value::Array(history(
        turns,
        |role, text| json!({"role": role, "content": text}),
    ));
    body
}

/// The OpenAI SDK on the Responses API (`model, input, instructions`).
fn responses_sdk(turns: usize) -> Value {
    let mut body = sessions::fixture_body("04-openai-v1_responses.json");
    body["instructions"] = json!("Answer as a senior engineer. ".repeat(900));
    body["input"] = Value::Array(history(turns, |role, text| {
        let kind = if role == "user" {
            "input_text"
        } else {
            "output_text"
        };
        json!({"role": role, "content": [{"type": kind, "text": text}]})
    }));
    body
}

/// User asks and long assistant answers, the first ask being the task.
fn history(turns: usize, entry: impl Fn(&str, String) -> Value) -> Vec<Value> {
    let mut items = Vec::new();
    for t in 1..=turns {
        let ask = if t == 1 {
            sessions::TASK.to_owned()
        } else {
            format!("Continue with step {t}.")
        };
        items.push(entry("user", ask));
        if t < turns {
            let answer = format!(
                "Turn {t}: {}",
                "fn load() -> Result<Config> { todo }\n".repeat(60)
            );
            items.push(entry("assistant", answer));
        }
    }
    items
}

fn clients() -> [Client; 5] {
    [
        Client {
            name: "Codex CLI",
            capture: "codex-tool-roundtrip/02-codex_exec-v1_responses.json",
            build: codex,
        },
        Client {
            name: "Claude Code",
            capture: "claude-tool-roundtrip/02-claude_cli-v1_messages_beta_true.json",
            build: |t| sessions::claude_code(t).0,
        },
        Client {
            name: "OpenAI SDK, Chat Completions",
            capture: "02-openai-v1_chat_completions.json",
            build: |t| sessions::chat_agent(t).0,
        },
        Client {
            name: "Anthropic SDK",
            capture: "07-anthropic-v1_messages.json",
            build: anthropic_sdk,
        },
        Client {
            name: "OpenAI SDK, Responses",
            capture: "04-openai-v1_responses.json",
            build: responses_sdk,
        },
    ]
}

/// The conversation member of a body.
fn conversation(body: &mut Value) -> &mut Vec<Value> {
    let key = ["messages", "input"]
        .into_iter()
        .find(|k| body.get(*k).is_some_and(Value::is_array))
        .expect("a conversation array");
    body[key].as_array_mut().expect("array")
}

#[test]
fn stable_across_turns_for_every_client() {
    for client in clients() {
        let first = client.at(1);
        let fp = fingerprint(&first).unwrap_or_else(|| panic!("{}", client.name));
        for turns in [2, 5, TURNS] {
            let body = client.at(turns);
            if turns == TURNS {
                assert!(
                    body.len() > 100_000,
                    "{}: {} bytes",
                    client.name,
                    body.len()
                );
            }
            assert_eq!(
                fingerprint(&body),
                Some(fp.clone()),
                "{} at {turns} turns",
                client.name
            );
        }
    }
}

#[test]
fn different_first_asks_are_different_sessions() {
    for client in clients() {
        let mut fps = Vec::new();
        for ask in ["Port the loader to TOML.", "Fix the flaky test in ci.yml."] {
            let mut body = (client.build)(TURNS);
            let text = serde_json::to_string(&body).expect("json");
            let edited = text.replacen(sessions::TASK, ask, 1);
            assert_ne!(text, edited, "{}", client.name);
            body = serde_json::from_str(&edited).expect("json");
            fps.push(fingerprint(&client.bytes(&body)));
        }
        assert!(fps[0].is_some());
        assert_ne!(fps[0], fps[1], "{}", client.name);
    }
}

#[test]
fn keys_reordered_before_or_after_the_history_keep_the_fingerprint() {
    for client in clients() {
        let body = (client.build)(TURNS);
        let order = client.order();
        let fp = fingerprint(&client.bytes(&body));
        let at = order
            .iter()
            .position(|k| k == "messages" || k == "input")
            .expect("a conversation key");
        let mut reordered: Vec<String> = order[..at].iter().rev().cloned().collect();
        reordered.push(order[at].clone());
        reordered.extend(order[at + 1..].iter().rev().cloned());
        let moved = sessions::to_bytes_in_order(&body, &reordered);
        assert_eq!(fingerprint(&moved), fp, "{}", client.name);
    }
}

#[test]
fn moving_model_across_the_history_changes_the_fingerprint() {
    // The documented consequence: a key counts only before the conversation array.
    let client = &clients()[2];
    let body = (client.build)(TURNS);
    let before = fingerprint(&client.bytes(&body));
    let after_history = ["messages", "model"].map(String::from);
    assert_ne!(
        fingerprint(&sessions::to_bytes_in_order(&body, &after_history)),
        before
    );
}

#[test]
fn the_history_and_what_follows_it_are_not_read() {
    for client in clients() {
        let mut body = (client.build)(TURNS);
        let fp = fingerprint(&client.bytes(&body));
        // Damaging every later entry (and the rest of the body) changes nothing.
        let items = conversation(&mut body);
        let first_user = items
            .iter()
            .rposition(|e| e["role"] == "user" && e.to_string().contains(sessions::TASK))
            .expect("the first ask");
        items.truncate(first_user + 1);
        items.push(json!("MARK"));
        let text = String::from_utf8(client.bytes(&body)).expect("utf-8");
        let cut = &text[..text.find("\"MARK\"").expect("mark")];
        assert_eq!(
            fingerprint(format!("{cut} {{ malformed").as_bytes()),
            fp,
            "{}",
            client.name
        );
    }
}

proptest! {
    #[test]
    fn anything_after_the_first_ask_is_ignored(tail in prop::collection::vec(any::<u8>(), 0..200)) {
        let head = br#"{"model":"gpt-5","messages":[{"role":"system","content":"be terse"},{"role":"user","content":"say hi"}"#;
        let mut whole = head.to_vec();
        whole.extend_from_slice(b"]}");
        let mut body = head.to_vec();
        body.extend_from_slice(&tail);
        prop_assert_eq!(fingerprint(&body), fingerprint(&whole));
        prop_assert!(fingerprint(&whole).is_some());
    }
}
