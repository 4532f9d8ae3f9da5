//! Shared pieces of the switch tests: real-sized client requests rebuilt from the captures in
//! `shared/fixtures/clients/`, clients that grow their history from the replies the way Codex
//! and Claude Code do, a gateway harness over the strict simulated provider, and a throwaway
//! redis-server.

#![allow(dead_code)]

pub mod agents;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use context_relay_gateway::config::Config;
use context_relay_gateway::{Gateway, RunningGateway};
use context_relay_sim::{RecordedRequest, SimProvider};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

pub const HANDOFF_TAG: &str = "<context_handoff>";
/// Words in the relay's summary prompt: the simulator answers such requests with the handoff
/// JSON and counts them as no turn.
pub const SUMMARY_NEEDLE: &str = "writing a handoff note";

pub fn summary_reply() -> String {
    json!({
        "summary": "Adding a --json flag to the CLI; parser done, tests pending.",
        "keyDecisions": ["keep the text output as default"],
        "taskProgress": "parser done",
        "activeEntities": ["src/cli.rs"]
    })
    .to_string()
}

/// `shared/fixtures/clients/` beside the nearest ancestor of the including crate that has it
/// (this file is also included by the facade's tests, one level higher).
fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("shared/fixtures/clients/"))
        .find(|d| d.is_dir())
        .expect("shared/fixtures/clients/ beside the workspace")
}

/// Expands every `...[N chars]` marker of the captures back to a string of N characters.
fn expand(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Some(start) = s.rfind("...[")
                && let Some(n) = s[start + 4..]
                    .strip_suffix(" chars]")
                    .and_then(|n| n.parse::<usize>().ok())
            {
                let head = s[..start].to_owned();
                let mut out = head.clone();
                let filler = if head.is_empty() {
                    "lorem ipsum "
                } else {
                    &head
                };
                while out.chars().count() < n {
                    out.push(' ');
                    out.push_str(filler);
                }
                *s = out.chars().take(n).collect();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(expand),
        Value::Object(o) => o.values_mut().for_each(expand),
        _ => {}
    }
}

/// A captured request with its long texts rebuilt, padded to the size the client really sent
/// (`content-length` of the capture) by growing `pad_pointer`'s string.
fn real_sized(file: &str, pad_pointer: &str) -> (Vec<(String, String)>, Value) {
    let text = std::fs::read_to_string(fixtures_dir().join(file)).expect("fixture");
    let capture: Value = serde_json::from_str(&text).expect("fixture JSON");
    let mut body = capture["body"].clone();
    expand(&mut body);
    let mut headers = Vec::new();
    let mut length = 0usize;
    for (k, v) in capture["headers"].as_object().expect("headers") {
        let v = v.as_str().unwrap_or_default().to_owned();
        match k.to_ascii_lowercase().as_str() {
            "content-length" => length = v.parse().unwrap_or(0),
            "host" | "connection" | "accept-encoding" => {}
            _ => headers.push((k.clone(), v)),
        }
    }
    let size = serde_json::to_vec(&body).unwrap().len();
    if size < length
        && let Some(Value::String(s)) = body.pointer_mut(pad_pointer)
    {
        let deficit = length - size;
        let words = "Keep edits minimal and explain each change. ";
        let mut pad = String::with_capacity(deficit + words.len());
        while pad.len() < deficit {
            pad.push_str(words);
        }
        pad.truncate(deficit);
        s.push_str(&pad);
    }
    (headers, body)
}

/// A Codex CLI first turn (store false, reasoning.encrypted_content, ~38 KB), for combo `model`.
pub fn codex_first_turn(model: &str, session: &str) -> (Vec<(String, String)>, Value) {
    let (mut headers, mut body) =
        real_sized("11-codex_exec-v1_responses.json", "/input/0/content/0/text");
    body["model"] = json!(model);
    body["prompt_cache_key"] = json!(session);
    for (k, v) in headers.iter_mut() {
        if matches!(
            k.as_str(),
            "session-id" | "thread-id" | "x-client-request-id"
        ) {
            *v = session.to_owned();
        }
    }
    if let Some(last) = body["input"].as_array_mut().and_then(|i| i.last_mut()) {
        last["content"][0]["text"] =
            json!("Add a --json flag to the CLI and cover it with a test.");
    }
    (headers, body)
}

/// A Claude Code first turn (adaptive thinking, clear_thinking edits, ~76 KB), for `model`.
pub fn claude_first_turn(model: &str, session: &str) -> (Vec<(String, String)>, Value) {
    let (mut headers, mut body) = real_sized(
        "13-claude_cli-v1_messages_beta_true.json",
        "/tools/0/description",
    );
    body["model"] = json!(model);
    for (k, v) in headers.iter_mut() {
        if k.eq_ignore_ascii_case("x-claude-code-session-id") {
            *v = session.to_owned();
        }
    }
    let user_id = json!({"device_id": "0".repeat(64), "account_uuid": "", "session_id": session});
    body["metadata"]["user_id"] = json!(user_id.to_string());
    (headers, body)
}

/// The Codex way of continuing: the reply's output items (reasoning with its
/// `encrypted_content`, the assistant message) are appended, then the next user message.
pub fn codex_next_turn(body: &mut Value, reply_sse: &[u8], prompt: &str) {
    let input = body["input"].as_array_mut().expect("input array");
    for event in sse_events(reply_sse) {
        if event["type"] == "response.output_item.done" {
            input.push(event["item"].clone());
        }
    }
    input.push(json!({"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": prompt}]}));
}

/// The Claude Code way of continuing: the streamed assistant content (signed thinking, text)
/// becomes an assistant message, then the next user message.
pub fn claude_next_turn(body: &mut Value, reply_sse: &[u8], prompt: &str) {
    let blocks = messages_blocks(&sse_events(reply_sse));
    let messages = body["messages"].as_array_mut().expect("messages array");
    messages.push(json!({"role": "assistant", "content": blocks}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": prompt}]}));
}

/// The content blocks of a streamed Messages reply, rebuilt from its events as Claude Code
/// rebuilds them: text, thinking and its signature joined from their deltas, a `tool_use`
/// block's `input` parsed from its `input_json_delta` pieces.
pub fn messages_blocks(events: &[Value]) -> Vec<Value> {
    let mut blocks: Vec<Value> = Vec::new();
    let mut partial: Vec<String> = Vec::new();
    for event in events {
        match event["type"].as_str() {
            Some("content_block_start") => {
                blocks.push(event["content_block"].clone());
                partial.push(String::new());
            }
            Some("content_block_delta") => {
                let (Some(block), Some(json)) = (blocks.last_mut(), partial.last_mut()) else {
                    continue;
                };
                let d = &event["delta"];
                let (field, piece) = match d["type"].as_str() {
                    Some("text_delta") => ("text", &d["text"]),
                    Some("thinking_delta") => ("thinking", &d["thinking"]),
                    Some("signature_delta") => ("signature", &d["signature"]),
                    Some("input_json_delta") => {
                        json.push_str(d["partial_json"].as_str().unwrap_or(""));
                        continue;
                    }
                    _ => continue,
                };
                let joined = format!(
                    "{}{}",
                    block[field].as_str().unwrap_or(""),
                    piece.as_str().unwrap_or("")
                );
                block[field] = json!(joined);
            }
            _ => {}
        }
    }
    for (block, json) in blocks.iter_mut().zip(&partial) {
        if block["type"] == "tool_use" && !json.is_empty() {
            block["input"] = serde_json::from_str(json).unwrap_or(Value::Null);
        }
    }
    blocks
}

/// The body Codex sends to `/responses/compact`: the turn's `model`, `instructions`, `input`,
/// `tools`, `parallel_tool_calls`, `reasoning` and `text`, no `stream` or `store`.
pub fn compact_body(turn: &Value) -> Value {
    const KEEP: [&str; 7] = [
        "model",
        "instructions",
        "input",
        "tools",
        "parallel_tool_calls",
        "reasoning",
        "text",
    ];
    let fields = turn.as_object().into_iter().flatten();
    Value::Object(
        fields
            .filter(|(k, _)| KEEP.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// The headers of a plain JSON request (no credential, no session header).
pub fn json_headers() -> Vec<(String, String)> {
    vec![("content-type".to_owned(), "application/json".to_owned())]
}

/// The JSON data of every SSE event in `bytes`.
pub fn sse_events(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .split("\n\n")
        .filter_map(|e| {
            let data = e.lines().find_map(|l| l.strip_prefix("data: "))?;
            serde_json::from_str(data).ok()
        })
        .collect()
}

/// Whether a streamed reply ended with its API's terminal success event.
pub fn completed(bytes: &[u8]) -> bool {
    sse_events(bytes)
        .last()
        .is_some_and(|e| e["type"] == "response.completed" || e["type"] == "message_stop")
}

pub fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The `admin_token` of [`config`].
pub const ADMIN_TOKEN: &str = "adm-token";

/// One or more gateways over one strict simulated provider.
pub struct Harness {
    pub sim: SimProvider,
    pub gateways: Vec<(Gateway, RunningGateway)>,
    pub client: HttpClient<HttpConnector, Full<Bytes>>,
}

/// A gateway configuration over `base_url`: Codex accounts `acct-a`, `acct-b`, `acct-c` behind
/// combo `codex-relay`, Anthropic accounts `acct-x`, `acct-y`, `acct-z` behind `claude-relay`;
/// combo `fallback-relay` tries provider `dead` (nothing listens at its address) first, then
/// `codex`.
pub fn config(base_url: &str, store: &str) -> Config {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let accounts = |ids: [&str; 3]| {
        ids.iter()
            .map(|id| {
                format!("  [[providers.accounts]]\n  id = \"{id}\"\n  api_key = \"key-{id}\"\n")
            })
            .collect::<String>()
    };
    let text = format!(
        r#"
admin_token = "{ADMIN_TOKEN}"
[store]
{store}
[relay]
handoff_providers = ["*"]
[[providers]]
name = "codex"
base_url = "{base_url}"
{codex}
[[providers]]
name = "anthropic"
base_url = "{base_url}"
auth = "x-api-key"
{claude}
[[providers]]
name = "dead"
base_url = "http://127.0.0.1:{closed}/v1"
  [[providers.accounts]]
  id = "acct-dead"
  api_key = "key-dead"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
[[combos]]
name = "fallback-relay"
targets = ["dead/gpt-5.5", "codex/gpt-5.5"]
[[combos]]
name = "claude-relay"
targets = ["anthropic/claude-opus-4-8"]
"#,
        codex = accounts(["acct-a", "acct-b", "acct-c"]),
        claude = accounts(["acct-x", "acct-y", "acct-z"]),
    );
    Config::from_toml_str(&text, |_| None).expect("test config")
}

impl Harness {
    /// One gateway configured by the TOML `text` over `sim`.
    pub async fn single(sim: SimProvider, text: &str) -> Self {
        let config = Config::from_toml_str(text, |_| None).expect("test config");
        let gateway = Gateway::connect(config).await.expect("gateway");
        let server = gateway
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .expect("spawn");
        Self {
            sim,
            gateways: vec![(gateway, server)],
            client: HttpClient::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// `count` gateways with `store` (a `[store]` table body) over a simulated provider that
    /// uses 30 % of an account per turn.
    pub async fn start(count: usize, store: &str, sim: context_relay_sim::SimBuilder) -> Self {
        let mut sim = sim;
        for id in ["acct-a", "acct-b", "acct-c", "acct-x", "acct-y", "acct-z"] {
            sim = sim.account(id, format!("key-{id}"));
        }
        let sim = sim
            .quota_step(30.0)
            .summary_reply(SUMMARY_NEEDLE, summary_reply())
            .start()
            .await
            .expect("sim");
        let mut gateways = Vec::new();
        for _ in 0..count {
            let gateway = Gateway::connect(config(&sim.base_url(), store))
                .await
                .expect("gateway");
            let server = gateway
                .spawn("127.0.0.1:0".parse().unwrap())
                .await
                .expect("spawn");
            gateways.push((gateway, server));
        }
        let client = HttpClient::builder(TokioExecutor::new()).build_http();
        Self {
            sim,
            gateways,
            client,
        }
    }

    /// Account `id` of gateway `gw` as `GET /admin/accounts` shows it.
    pub async fn account(&self, gw: usize, id: &str) -> Value {
        let req = Request::get(format!("{}/admin/accounts", self.gateways[gw].1.url()))
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .body(Full::default())
            .unwrap();
        let res = self.client.request(req).await.expect("gateway answers");
        assert_eq!(res.status(), 200);
        let v: Value = serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes())
            .expect("JSON");
        v["accounts"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["account"] == id).cloned())
            .expect("the account is listed")
    }

    /// Sends `body` to `path` of gateway `gw` with `headers`; the status, the `x-context-relay`
    /// header and the whole reply.
    pub async fn send(
        &self,
        gw: usize,
        path: &str,
        headers: &[(String, String)],
        body: &Value,
    ) -> (StatusCode, Option<String>, Bytes) {
        let bytes = serde_json::to_vec(body).unwrap();
        self.send_raw(gw, path, headers, bytes).await
    }

    /// Sends the bytes `body` (as they are: key order, spacing) to `path` of gateway `gw`; the
    /// status, the `x-context-relay` header and the whole reply.
    pub async fn send_raw(
        &self,
        gw: usize,
        path: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> (StatusCode, Option<String>, Bytes) {
        let url = format!("{}{path}", self.gateways[gw].1.url());
        let mut b = Request::post(url);
        for (k, v) in headers {
            b = b.header(k.as_str(), v.as_str());
        }
        let res = self
            .client
            .request(b.body(Full::new(Bytes::from(body))).unwrap())
            .await
            .expect("gateway answers");
        let status = res.status();
        let acted = res
            .headers()
            .get("x-context-relay")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = res
            .into_body()
            .collect()
            .await
            .expect("reply body")
            .to_bytes();
        (status, acted, body)
    }

    /// Waits for the background work (summaries, handoff deletion) of every gateway.
    pub async fn idle(&self) {
        for (g, _) in &self.gateways {
            g.background().idle().await;
        }
    }

    /// The last client turn the provider received.
    pub fn last_turn(&self) -> RecordedRequest {
        self.turns().pop().expect("a turn reached the provider")
    }

    /// Upstream requests that were client turns (not summary calls).
    pub fn turns(&self) -> Vec<RecordedRequest> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| !r.summary)
            .collect()
    }

    /// The account of each client turn the provider received, in order.
    pub fn served(&self) -> Vec<String> {
        self.turns()
            .into_iter()
            .map(|r| r.account.unwrap_or_default())
            .collect()
    }

    /// The accounts that minted the state `r` carried.
    pub fn owners(&self, r: &RecordedRequest) -> Vec<Option<String>> {
        self.sim
            .state_owners(r)
            .into_iter()
            .map(|(_, o)| o)
            .collect()
    }

    /// `GET /admin/handoffs?session=…&settle=true` of the first gateway: the listed handoffs.
    pub async fn admin_handoffs(&self, session: &str) -> Vec<Value> {
        let url = format!(
            "{}/admin/handoffs?session={session}&settle=true",
            self.gateways[0].1.url()
        );
        let req = Request::get(url)
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .body(Full::default())
            .unwrap();
        let res = self.client.request(req).await.expect("gateway answers");
        assert_eq!(res.status(), 200);
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).expect("JSON");
        v["handoffs"].as_array().cloned().unwrap_or_default()
    }

    /// Handoffs stored for `session` (any combo), read through the first gateway's store.
    pub async fn handoffs(&self, session: &str) -> usize {
        self.gateways[0]
            .0
            .store()
            .list(None, Some(session))
            .await
            .expect("store list")
            .len()
    }
}

pub mod logins;

/// A throwaway redis-server (or `REDIS_URL`), shared with the store's and tower's tests.
#[path = "../../../store/tests/common/redis_server.rs"]
mod redis_server;
#[allow(unused_imports)] // not every test binary starts one
pub use redis_server::{RedisServer, free_port, spawn_ready};
/// A throwaway Redis Cluster on loopback, shared with the store's tests.
#[path = "../../../store/tests/common/redis_cluster.rs"]
mod redis_cluster;
#[allow(unused_imports)]
pub use redis_cluster::RedisCluster;

pub const MEMORY: &str = "backend = \"memory\"";

/// One API's client: its path, how it continues a conversation, and its accounts.
#[derive(Clone, Copy)]
pub enum Client {
    Codex,
    Claude,
}

impl Client {
    pub fn path(self) -> &'static str {
        match self {
            Client::Codex => "/v1/responses",
            Client::Claude => "/v1/messages?beta=true",
        }
    }

    pub fn first(self, session: &str) -> (Vec<(String, String)>, Value) {
        match self {
            Client::Codex => codex_first_turn("codex-relay", session),
            Client::Claude => claude_first_turn("claude-relay", session),
        }
    }

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
    pub client: Client,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub turn: usize,
}

impl Conversation {
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

/// A one-provider gateway over the simulated provider, the setup most tests share: provider
/// `codex` with accounts `acct-a`, `acct-b`, … (keys `key-a`, `key-b`, …: see [`start_sim`])
/// behind combo `codex-relay` → `codex/gpt-5.5`.
pub struct CodexGateway<'a> {
    /// Account ids, in fill order.
    pub accounts: &'a [&'a str],
    /// Top-level keys, before every table.
    pub top: &'a str,
    /// The body of `[store]`, and any table to follow it (`[limits]`).
    pub store: &'a str,
    /// Provider keys and sub-tables (`quota = "none"`, `[providers.summary]`).
    pub provider: &'a str,
}

impl Default for CodexGateway<'_> {
    fn default() -> Self {
        Self {
            accounts: &["acct-a", "acct-b"],
            top: "",
            store: "backend = \"memory\"",
            provider: "",
        }
    }
}

impl CodexGateway<'_> {
    /// The configuration over the provider at `base_url`.
    pub fn config(&self, base_url: &str) -> Config {
        let accounts: String = self
            .accounts
            .iter()
            .map(|id| {
                format!(
                    "  [[providers.accounts]]\n  id = \"{id}\"\n  api_key = \"{}\"\n",
                    key_of(id)
                )
            })
            .collect();
        let text = format!(
            "{top}\n[store]\n{store}\n[[providers]]\nname = \"codex\"\nbase_url = \"{base_url}\"\n{provider}\n{accounts}[[combos]]\nname = \"codex-relay\"\ntargets = [\"codex/gpt-5.5\"]\n",
            top = self.top,
            store = self.store,
            provider = self.provider,
        );
        Config::from_toml_str(&text, |_| None).expect("test config")
    }
}

/// The API key of account `id` in [`start_sim`] and [`CodexGateway`]: `acct-a` → `key-a`.
pub fn key_of(id: &str) -> String {
    format!("key-{}", id.strip_prefix("acct-").unwrap_or(id))
}

/// Starts `sim` with `accounts` (keys from [`key_of`]).
pub async fn start_sim(sim: context_relay_sim::SimBuilder, accounts: &[&str]) -> SimProvider {
    let mut sim = sim;
    for id in accounts {
        sim = sim.account(*id, key_of(id));
    }
    sim.start().await.expect("sim")
}

/// Serves `gateway` on a free loopback port.
pub async fn spawn(gateway: Gateway) -> (Gateway, RunningGateway) {
    let server = gateway
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .expect("spawn");
    (gateway, server)
}

/// A plain HTTP/1 client.
pub fn http_client() -> HttpClient<HttpConnector, Full<Bytes>> {
    HttpClient::builder(TokioExecutor::new()).build_http()
}

/// Starts the gateway binary `bin` (the test's `env!("CARGO_BIN_EXE_context-relay-gateway")`)
/// on `config` with `RUST_LOG=rust_log`, its stderr as `stderr` says, and reads the address it
/// prints once listening: the child and `http://ADDR`.
pub fn start_binary(bin: &str, config: &Path, rust_log: &str, stderr: Stdio) -> (Child, String) {
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", rust_log)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("the gateway binary starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the gateway prints its address");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (child, url)
}

/// Sends `sig` (`-TERM`, `-HUP`, …) to `child` with kill(1).
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .arg(sig)
        .arg(child.id().to_string())
        .status()
        .expect("kill(1) runs");
    assert!(status.success(), "kill {sig} failed");
}
