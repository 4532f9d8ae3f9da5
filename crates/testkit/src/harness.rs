//! A gateway harness over the strict simulated provider: one or more gateways served on
//! loopback over one [`SimProvider`], a plain HTTP/1 client, and the configurations most tests
//! share.

use bytes::Bytes;
use context_relay_gateway::config::Config;
use context_relay_gateway::{Gateway, RunningGateway};
use context_relay_sim::{RecordedRequest, SimBuilder, SimProvider};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::handoff::{SUMMARY_NEEDLE, summary_reply};

/// The `admin_token` of [`config`].
pub const ADMIN_TOKEN: &str = "adm-token";

/// One or more gateways over one strict simulated provider.
pub struct Harness {
    /// The provider every gateway forwards to.
    pub sim: SimProvider,
    /// The gateways and their servers, in the order they were served.
    pub gateways: Vec<(Gateway, RunningGateway)>,
    /// A plain HTTP/1 client.
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
    /// Serves `gateway` (built as the test needs it: [`Gateway::new`], [`Gateway::connect`],
    /// [`Gateway::with_store`], with the relay switched off or a metrics handle) on a free
    /// loopback port, over `sim`, with a plain HTTP/1 client: the one setup every other
    /// constructor goes through.
    pub async fn serve(sim: SimProvider, gateway: Gateway) -> Self {
        let mut h = Self::over(sim);
        h.add(gateway).await;
        h
    }

    /// No gateway yet over `sim`.
    fn over(sim: SimProvider) -> Self {
        Self {
            sim,
            gateways: Vec::new(),
            client: http_client(),
        }
    }

    /// Serves one more gateway over the same provider: its index (the `gw` of the methods).
    pub async fn add(&mut self, gateway: Gateway) -> usize {
        self.gateways.push(spawn(gateway).await);
        self.gateways.len() - 1
    }

    /// One gateway configured by the TOML `text` over `sim`.
    pub async fn single(sim: SimProvider, text: &str) -> Self {
        let config = Config::from_toml_str(text, |_| None).expect("test config");
        let gateway = Gateway::connect(config).await.expect("gateway");
        Self::serve(sim, gateway).await
    }

    /// `count` gateways of [`config`] with `store` (a `[store]` table body, and any table to
    /// follow it: `[relay]`, `[limits]`) over a simulated
    /// provider with its six accounts that uses 30 % of an account per turn.
    pub async fn start(count: usize, store: &str, sim: SimBuilder) -> Self {
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
        let mut h = Self::over(sim);
        for _ in 0..count {
            let gateway = Gateway::connect(config(&h.sim.base_url(), store))
                .await
                .expect("gateway");
            h.add(gateway).await;
        }
        h
    }

    /// Shuts every gateway down gracefully (each must stop cleanly), then the provider.
    pub async fn shutdown(self) {
        for (_gateway, server) in self.gateways {
            server.shutdown().await.expect("graceful shutdown");
        }
        self.sim.shutdown().await;
    }

    /// `path` on gateway `gw`: `http://ADDR/path`.
    pub fn url(&self, gw: usize, path: &str) -> String {
        format!("{}{path}", self.gateways[gw].1.url())
    }

    /// Account `id` of gateway `gw` as `GET /admin/accounts` shows it.
    pub async fn account(&self, gw: usize, id: &str) -> Value {
        let v = self.admin(gw, "/admin/accounts").await;
        v["accounts"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["account"] == id).cloned())
            .expect("the account is listed")
    }

    /// The JSON answer of the admin endpoint `path` of gateway `gw` (a `200` asserted).
    pub async fn admin(&self, gw: usize, path: &str) -> Value {
        let req = Request::get(self.url(gw, path))
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .body(Full::default())
            .unwrap();
        let res = self.client.request(req).await.expect("gateway answers");
        assert_eq!(res.status(), 200);
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).expect("JSON")
    }

    /// Sends `body` to `path` of gateway `gw` with `headers`, in the clients' key order (see
    /// [`wire_bytes`]); the status, the `x-context-relay` header and the whole reply.
    pub async fn send(
        &self,
        gw: usize,
        path: &str,
        headers: &[(String, String)],
        body: &Value,
    ) -> (StatusCode, Option<String>, Bytes) {
        self.send_raw(gw, path, headers, wire_bytes(body)).await
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
        let mut b = Request::post(self.url(gw, path));
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
        let path = format!("/admin/handoffs?session={session}&settle=true");
        let req = Request::get(self.url(0, &path))
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

/// The `[store]` table's body of a memory store.
pub const MEMORY: &str = "backend = \"memory\"";

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
pub async fn start_sim(sim: SimBuilder, accounts: &[&str]) -> SimProvider {
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

/// `body` as the clients of `shared/fixtures/clients/` write it: `model` first (Codex CLI,
/// Claude Code and the SDKs all put it there), the other members after it (in `serde_json`'s
/// order, so `prompt_cache_key` and `metadata` follow the history, as the clients send them).
/// A late turn of such a client is read by the gateway in several chunks with `model` in the
/// first: the path a real long session takes.
pub fn wire_bytes(body: &Value) -> Vec<u8> {
    let Some(model) = body.get("model") else {
        return serde_json::to_vec(body).unwrap();
    };
    let mut rest = body.clone();
    if let Some(members) = rest.as_object_mut() {
        members.remove("model");
    }
    let rest = serde_json::to_vec(&rest).unwrap();
    let mut bytes = br#"{"model":"#.to_vec();
    bytes.extend(serde_json::to_vec(model).unwrap());
    if rest.len() > 2 {
        bytes.push(b',');
    }
    bytes.extend(&rest[1..]);
    bytes
}
