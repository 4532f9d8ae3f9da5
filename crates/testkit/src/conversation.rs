//! A conversation of Codex or Claude Code through the [`Harness`]: the client's real-sized
//! first turn, its history grown from each completed reply the client's way.

use http::StatusCode;
use serde_json::{Value, json};

use crate::clients::{
    claude_first_turn, claude_next_turn, codex_first_turn, codex_next_turn, completed,
};
use crate::harness::Harness;

/// One API's client: its path, how it continues a conversation, and its accounts.
#[derive(Clone, Copy)]
pub enum Client {
    /// Codex CLI on `/v1/responses`, combo `codex-relay`.
    Codex,
    /// Claude Code on `/v1/messages?beta=true`, combo `claude-relay`.
    Claude,
}

impl Client {
    /// The gateway path of the client's requests.
    pub fn path(self) -> &'static str {
        match self {
            Client::Codex => "/v1/responses",
            Client::Claude => "/v1/messages?beta=true",
        }
    }

    /// The client's real-sized first turn in `session`, asking for the client's combo: its
    /// headers and body.
    pub fn first(self, session: &str) -> (Vec<(String, String)>, Value) {
        match self {
            Client::Codex => codex_first_turn("codex-relay", session),
            Client::Claude => claude_first_turn("claude-relay", session),
        }
    }

    /// Grows `body` the client's way by the streamed `reply`, then the user's `prompt`.
    pub fn next(self, body: &mut Value, reply: &[u8], prompt: &str) {
        match self {
            Client::Codex => codex_next_turn(body, reply, prompt),
            Client::Claude => claude_next_turn(body, reply, prompt),
        }
    }

    /// The first, second and third account of the client's provider.
    pub fn accounts(self) -> [&'static str; 3] {
        match self {
            Client::Codex => ["acct-a", "acct-b", "acct-c"],
            Client::Claude => ["acct-x", "acct-y", "acct-z"],
        }
    }
}

/// A conversation of one client through the harness.
pub struct Conversation {
    /// Who is talking.
    pub client: Client,
    /// The headers of every request.
    pub headers: Vec<(String, String)>,
    /// The history, resent whole each turn.
    pub body: Value,
    /// The number of the next turn (1-based).
    pub turn: usize,
}

impl Conversation {
    /// A conversation of `client` in `session`, at its first turn.
    pub fn new(client: Client, session: &str) -> Self {
        let (headers, body) = client.first(session);
        Self {
            client,
            headers,
            body,
            turn: 1,
        }
    }

    /// A conversation of `client` asking for `model` (a combo or `provider/model`).
    pub fn asking(client: Client, session: &str, model: &str) -> Self {
        let mut conv = Self::new(client, session);
        conv.body["model"] = Value::from(model);
        conv
    }

    /// The conversation a long session has become: `calls` finished tool calls of the
    /// client's kind (a shell command and about `output_bytes` of its output each) before the
    /// current prompt. With enough of them every request is a late turn of several hundred KB,
    /// which the gateway reads in several chunks.
    pub fn with_tool_history(mut self, calls: usize, output_bytes: usize) -> Self {
        let line = "test result: ok. 12 passed; 0 failed; \"src/lib.rs\" \u{e9}t\u{e9} \t\n";
        let output = line.repeat(output_bytes.div_ceil(line.len()));
        let (list, mut history) = match self.client {
            Client::Codex => ("input", Vec::new()),
            Client::Claude => ("messages", Vec::new()),
        };
        for n in 0..calls {
            let (id, command) = (format!("call_{n:04}"), format!("cargo test -p crate{n}"));
            match self.client {
                Client::Codex => history.extend([
                    json!({"type": "function_call", "call_id": id, "name": "exec_command",
                           "arguments": json!({"cmd": command}).to_string()}),
                    json!({"type": "function_call_output", "call_id": id, "output": output}),
                ]),
                Client::Claude => history.extend([
                    json!({"role": "assistant", "content": [{"type": "tool_use", "id": id,
                           "name": "Bash", "input": {"command": command}}]}),
                    json!({"role": "user", "content": [{"type": "tool_result",
                           "tool_use_id": id, "content": output}]}),
                ]),
            }
        }
        let items = self.body[list]
            .as_array_mut()
            .expect("the client's history");
        let at = items.len().saturating_sub(1);
        items.splice(at..at, history);
        self
    }

    /// Sends the current history to gateway `gw`; on a completed reply, the history grows by
    /// the reply and the next prompt.
    pub async fn turn(&mut self, h: &Harness, gw: usize) -> (StatusCode, Option<String>, Vec<u8>) {
        let (status, acted, reply) = h
            .send(gw, self.client.path(), &self.headers, &self.body)
            .await;
        if status == 200 && completed(&reply) {
            self.turn += 1;
            let prompt = format!("Turn {}: go on with the next step.", self.turn);
            self.client.next(&mut self.body, &reply, &prompt);
        }
        (status, acted, reply.to_vec())
    }
}

/// Turns 1–3 on the first account write a handoff; the first account is then used up.
pub async fn handoff_ready(h: &Harness, conv: &mut Conversation, session: &str) {
    for _ in 1..=3 {
        assert_eq!(conv.turn(h, 0).await.0, 200);
    }
    h.idle().await;
    assert_eq!(h.handoffs(session).await, 1);
    h.sim.set_used(conv.client.accounts()[0], 100.0);
    h.sim.clear_requests();
}
