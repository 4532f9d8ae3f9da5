//! The mechanics of the story: the gateway's TOML, the scripted Codex session, the client
//! that plays it, and what to read in a recorded request.

use bytes::Bytes;
use context_relay_gateway::{Gateway, RunningGateway};
use context_relay_sim::{RecordedRequest, SimProvider};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use crate::{ADMIN_TOKEN, CLIENT_KEY, HANDOFF_TAG, HANDOFF_THRESHOLD, Result, SESSION};

/// The gateway's configuration, as it would be written in `gateway.toml` (see
/// `crates/gateway/README.md`). The redb path is filled in afterwards with the temporary folder.
pub(crate) fn gateway_toml(provider_url: &str) -> String {
    format!(
        r#"
admin_token = "{ADMIN_TOKEN}"

[store]
backend = "redb"

[relay]
handoff_threshold = {HANDOFF_THRESHOLD}
handoff_providers = ["codex"]

[[providers]]
name = "codex"
base_url = "{provider_url}"
quota = "codex"
rotate_at = 0.95
  [[providers.accounts]]
  id = "acct-a"
  api_key = "sim-key-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key = "sim-key-b"

[[combos]]
name = "codex-relay"
strategy = "context-relay"
targets = ["codex/gpt-5.5"]
"#
    )
}

/// What the simulated provider answers to the relay's summary request. A real model would write
/// this from the history it is sent; the simulator recognises the request by the prompt's
/// opening words and returns this note instead.
pub(crate) fn canned_summary() -> String {
    json!({
        "summary": "Adding a --json flag to `todo list` in the Rust todo CLI. The flag is parsed \
            in src/cli.rs and the JSON is written with serde in src/output.rs. cargo test shows \
            one failure: cli::json_flag_prints_array expects a JSON array but gets an object.",
        "keyDecisions": [
            "serde + serde_json for the JSON output",
            "plain text stays the default output",
            "--json only applies to `todo list`"
        ],
        "taskProgress": "done: flag parsing, JSON writer; pending: the failing test \
            cli::json_flag_prints_array; next: emit an array, then document the flag in README.md",
        "activeEntities": ["src/cli.rs", "src/output.rs", "--json", "cli::json_flag_prints_array"]
    })
    .to_string()
}

/// One request of the session: what the client adds to the history before sending it.
pub(crate) struct Turn {
    /// A one-line description for the narration.
    pub(crate) caption: String,
    /// The items appended to `input` (a user message, or the output of a tool call).
    pub(crate) adds: Vec<Value>,
    /// A tool call the model makes in its reply. The simulator only answers with text, so the
    /// script supplies the call that Codex CLI would then run.
    pub(crate) tool_call: Option<Value>,
}

impl Turn {
    /// The user types `text`.
    pub(crate) fn user(text: &str) -> Self {
        Self {
            caption: format!("user: {text}"),
            adds: vec![json!({"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": text}]})],
            tool_call: None,
        }
    }

    /// The model's reply to this turn also calls `command` through the `exec_command` tool.
    pub(crate) fn then_runs(mut self, call_id: &str, command: &str) -> Self {
        let arguments = json!({ "cmd": command }).to_string();
        self.tool_call = Some(json!({"type": "function_call", "name": "exec_command",
            "arguments": arguments, "call_id": call_id}));
        self
    }

    /// Codex CLI sends back what the command of `call_id` printed.
    pub(crate) fn tool_output(call_id: &str, caption: &str, output: &str) -> Self {
        Self {
            caption: format!("tool result: {caption}"),
            adds: vec![json!({"type": "function_call_output", "call_id": call_id,
                "output": output})],
            tool_call: None,
        }
    }
}

/// The session: a user asks Codex for a feature, the model runs the tests through a tool, and
/// the work goes on after the account switch.
pub(crate) fn script() -> Vec<Turn> {
    vec![
        Turn::user("Add a --json flag to `todo list` that prints the tasks as JSON."),
        Turn::user("Use serde for it and keep the text output as the default."),
        Turn::user("Run the tests.").then_runs("call_cargo_test", "cargo test"),
        Turn::tool_output(
            "call_cargo_test",
            "`cargo test` -> 1 failed (cli::json_flag_prints_array)",
            "running 12 tests\n...\nfailures:\n    cli::json_flag_prints_array\n\
             test result: FAILED. 11 passed; 1 failed",
        ),
        Turn::user("Fix the failing test."),
        Turn::user("Now document the flag in README.md."),
        Turn::user("Commit it."),
    ]
}

/// The client side of the session, plus handles on the gateway and the provider to narrate
/// what happened behind the gateway.
pub(crate) struct Session {
    pub(crate) sim: SimProvider,
    pub(crate) gateway: Gateway,
    pub(crate) server: RunningGateway,
    pub(crate) client: Client<HttpConnector, Full<Bytes>>,
    /// The conversation so far, resent in full every turn (Codex CLI uses `store: false`).
    pub(crate) history: Vec<Value>,
    /// How many provider requests were already narrated.
    pub(crate) seen: usize,
}

/// What one turn looked like from both sides of the gateway.
pub(crate) struct Outcome {
    /// The assistant's text, as the client read it from the SSE stream.
    pub(crate) reply: String,
    /// `x-codex-primary-used-percent` as the client received it.
    pub(crate) quota: String,
    /// The attempts the provider received for this turn, in order (the retry included).
    pub(crate) attempts: Vec<RecordedRequest>,
    /// Summary requests the relay sent after the turn.
    pub(crate) summaries: Vec<RecordedRequest>,
    /// The request body the client sent.
    pub(crate) sent: Value,
}

impl Outcome {
    /// The attempt that served the turn (the last one).
    pub(crate) fn served(&self, n: usize) -> Result<&RecordedRequest> {
        self.attempts.last().ok_or_else(|| {
            format!("turn {n}: expected the provider to receive the turn, found no request").into()
        })
    }
}

impl Session {
    /// Sends the next request of the session and waits for the relay's background work.
    pub(crate) async fn send(&mut self, turn: &Turn) -> Result<Outcome> {
        self.history.extend(turn.adds.iter().cloned());
        let body = codex_request(&self.history);
        let request = Request::post(format!("{}/v1/responses", self.server.url()))
            .header("authorization", format!("Bearer {CLIENT_KEY}"))
            .header("content-type", "application/json")
            .header("originator", "codex_cli_rs")
            .header("session-id", SESSION)
            .body(Full::new(Bytes::from(body.to_string())))?;
        let response = self.client.request(request).await?;
        let status = response.status();
        // What the gateway reads to decide on handoffs and rotation, passed on to the client.
        let quota = response
            .headers()
            .get("x-codex-primary-used-percent")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<f64>().ok())
            .map_or_else(|| "?".to_owned(), |p| format!("{p:.0}"));
        let text =
            String::from_utf8_lossy(&response.into_body().collect().await?.to_bytes()).into_owned();
        check!(
            status == StatusCode::OK,
            "expected the client to get 200 from the gateway, found {status}: {text}"
        );
        let reply = completed_text(&text).ok_or_else(|| {
            format!("expected a response.completed event in the stream, found: {text}")
        })?;

        // Codex CLI appends the model's output to the history it sends next time.
        self.history
            .push(json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": reply}]}));
        self.history.extend(turn.tool_call.iter().cloned());

        // Summaries and handoff deletions run in the background after the response: wait for
        // them instead of sleeping, so what follows sees their outcome.
        self.gateway.background().idle().await;
        let new = self
            .sim
            .requests()
            .get(self.seen..)
            .unwrap_or_default()
            .to_vec();
        self.seen += new.len();
        let (summaries, attempts) = new.into_iter().partition(|r| r.summary);
        Ok(Outcome {
            reply,
            quota,
            attempts,
            summaries,
            sent: body,
        })
    }

    /// `GET /admin/handoffs?settle=true`: the stored handoffs, as an operator would list them.
    pub(crate) async fn admin_handoffs(&self) -> Result<Vec<Value>> {
        let request = Request::get(format!("{}/admin/handoffs?settle=true", self.server.url()))
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .body(Full::default())?;
        let response = self.client.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        check!(
            status == StatusCode::OK,
            "expected 200 from GET /admin/handoffs, found {status}: {}",
            String::from_utf8_lossy(&body)
        );
        let v: Value = serde_json::from_slice(&body)?;
        Ok(v["handoffs"].as_array().cloned().unwrap_or_default())
    }
}

/// A Responses API request shaped like Codex CLI's: streamed, not stored, tools declared, the
/// session id as `prompt_cache_key`, and `model` naming the gateway's combo.
pub(crate) fn codex_request(history: &[Value]) -> Value {
    let mut input = vec![json!({"type": "message", "role": "developer", "content": [
        {"type": "input_text", "text": "You are Codex, a coding agent. You and the user share \
            a workspace: the `todo` command-line tool, written in Rust."}]})];
    input.extend(history.iter().cloned());
    json!({
        "model": "codex-relay",
        "input": input,
        "tools": [{"type": "function", "name": "exec_command",
            "description": "Runs a shell command in the workspace.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                           "required": ["cmd"]},
            "strict": false}],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "reasoning": {"effort": "medium"},
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": SESSION
    })
}

/// The assistant text of the `response.completed` event of a Responses API SSE stream.
pub(crate) fn completed_text(sse: &str) -> Option<String> {
    let completed = sse
        .split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find(|v| v["type"] == "response.completed")?;
    let text: String = completed["response"]["output"]
        .as_array()?
        .iter()
        .filter_map(|item| item["content"].as_array())
        .flatten()
        .filter_map(|part| part["text"].as_str())
        .collect();
    Some(text)
}

/// The text of the first `input` item of a request the provider received, when it is the
/// injected `<context_handoff>` message.
pub(crate) fn injected_message(request: &RecordedRequest) -> Option<String> {
    let body = request.json()?;
    let first = body["input"].get(0)?;
    let text = first["content"].get(0)?["text"].as_str()?;
    (first["role"] == "developer" && text.starts_with(HANDOFF_TAG)).then(|| text.to_owned())
}

/// The `input` items of a Responses API body.
pub(crate) fn items(body: &Value) -> Vec<Value> {
    body["input"].as_array().cloned().unwrap_or_default()
}

pub(crate) fn carries_handoff(request: &RecordedRequest) -> bool {
    String::from_utf8_lossy(&request.body).contains(HANDOFF_TAG)
}

pub(crate) fn account(request: &RecordedRequest) -> &str {
    request.account.as_deref().unwrap_or("an unknown account")
}
