//! `prompt_cache_key` names the session wherever it stands in the body: the OpenAI SDK writes
//! it after `input`, so in a long conversation it comes after a megabyte of history. Through a
//! real gateway on 127.0.0.1:0 and the strict simulated provider, with no session header:
//!
//! - one conversation keyed `pck-…` is one session across its turns: its handoff is stored
//!   under that key and injected into its own next turn on the new account;
//! - two conversations with the same opening (the same megabyte of first input) and different
//!   keys are two sessions: each has its own handoff, and neither consumes the other's.

use context_relay_sim::SimProvider;
use context_relay_testkit::clients::contains;
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY};
use serde_json::{Value, json};

/// About 1 MiB of file contents pasted into the first user message.
fn opening() -> Value {
    let mut file = String::from("// src/parser.rs\n");
    while file.len() < 1024 * 1024 {
        file.push_str("fn parse_args(args: &[String]) -> Result<Options, Error> { todo() }\n");
    }
    json!({"role": "user", "content": [{"type": "input_text",
        "text": format!("Here is the parser; add a --json flag.\n{file}")}]})
}

/// A conversation as the OpenAI SDK sends it: `model`, `input`, `instructions`, then
/// `prompt_cache_key` (after the whole history), `store`, `stream`.
struct SdkConversation {
    input: Vec<Value>,
    key: &'static str,
    marker: &'static str,
}

impl SdkConversation {
    fn new(key: &'static str, marker: &'static str) -> Self {
        Self {
            input: vec![opening()],
            key,
            marker,
        }
    }

    /// Sends the conversation; appends the answer and the next ask (which names the
    /// conversation's marker).
    async fn turn(&mut self, h: &Harness, n: usize) -> Vec<u8> {
        let headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            (
                "authorization".to_owned(),
                "Bearer sk-sdk-client".to_owned(),
            ),
        ];
        let text = self.raw();
        let (status, _, reply) = h
            .send_raw(0, "/v1/responses", &headers, text.into_bytes())
            .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        let v: Value = serde_json::from_slice(&reply).expect("JSON answer");
        self.input
            .extend(v["output"].as_array().cloned().unwrap_or_default());
        self.input
            .push(json!({"role": "user", "content": [{"type": "input_text",
            "text": format!("{} step {n}: go on.", self.marker)}]}));
        reply.to_vec()
    }

    /// The body bytes in the SDK's key order.
    fn raw(&self) -> String {
        format!(
            r#"{{"model":"codex-relay","input":{},"instructions":"You are a coding assistant.","prompt_cache_key":"{}","store":false,"stream":false}}"#,
            serde_json::to_string(&self.input).unwrap(),
            self.key
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_cache_key_after_a_megabyte_of_input_names_the_session() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let mut a = SdkConversation::new("pck-conversation-a", "MARKER-A");
    let mut b = SdkConversation::new("pck-conversation-b", "MARKER-B");
    assert!(a.raw().len() > 1024 * 1024);
    assert!(a.raw().find("prompt_cache_key") > Some(1024 * 1024));
    let parsed: Value = serde_json::from_str(&a.raw()).unwrap();
    assert_eq!(parsed["prompt_cache_key"], "pck-conversation-a");

    // Each conversation's second turn reads 90 %: a handoff is written for it.
    for (conv, n) in [(&mut a, 1), (&mut b, 1)] {
        h.sim.set_used("acct-a", 0.0);
        conv.turn(&h, n).await;
        h.sim.set_used("acct-a", 60.0);
        conv.turn(&h, n + 1).await;
        h.idle().await;
    }
    assert_eq!(
        h.handoffs("pck-conversation-a").await,
        1,
        "one session per key"
    );
    assert_eq!(
        h.handoffs("pck-conversation-b").await,
        1,
        "the same opening, another key"
    );

    // acct-a is used up: each conversation's next turn lands on acct-b with its own handoff.
    h.sim.set_used("acct-a", 100.0);
    h.sim.clear_requests();
    a.turn(&h, 3).await;
    h.idle().await;
    assert_eq!(
        h.handoffs("pck-conversation-a").await,
        0,
        "consumed by its own turn"
    );
    assert_eq!(
        h.handoffs("pck-conversation-b").await,
        1,
        "the other session's is untouched"
    );
    b.turn(&h, 3).await;
    h.idle().await;
    assert_eq!(h.handoffs("pck-conversation-b").await, 0);
    let to_b: Vec<_> = h
        .turns()
        .into_iter()
        .filter(|r| r.account.as_deref() == Some("acct-b"))
        .collect();
    assert_eq!(
        to_b.len(),
        2,
        "each conversation's turn moved to acct-b once"
    );
    for (r, marker) in to_b.iter().zip(["MARKER-A", "MARKER-B"]) {
        assert!(contains(&r.body, marker), "the turn of {marker}");
        assert!(
            contains(&r.body, HANDOFF_TAG),
            "{marker}'s turn carries a handoff"
        );
    }
}
