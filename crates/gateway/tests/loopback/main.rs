//! Loopback end-to-end tests: a real gateway server on 127.0.0.1:0, the simulated provider,
//! and a real HTTP client.

use std::ops::Deref;
use std::time::Duration;

use bytes::Bytes;
use context_relay_gateway::Gateway;
use context_relay_gateway::config::Config;
use context_relay_sim::{SimBuilder, SimProvider, SimQuotaHeaders};
use context_relay_testkit::harness::{ADMIN_TOKEN, Harness, http_client, spawn};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

mod forwarding;
mod operation;
mod rotation;

/// The harness over [`config_text`], with this file's requests.
struct Env(Harness);

impl Deref for Env {
    type Target = Harness;

    fn deref(&self) -> &Harness {
        &self.0
    }
}

fn config_text(base_url: &str, extra: &str) -> String {
    format!(
        r#"
max_request_bytes = 8388608
admin_token = "{ADMIN_TOKEN}"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "{base_url}"
rotate_at = 0.95
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key_env = "SIM_KEY_B"
[[providers]]
name = "anthropic"
base_url = "{base_url}"
auth = "x-api-key"
  [[providers.accounts]]
  id = "acct-c"
  api_key = "key-c"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
[[combos]]
name = "claude-relay"
targets = ["anthropic/claude-sonnet-4-5"]
{extra}
"#
    )
}

async fn setup_with(sim: SimBuilder) -> Env {
    let sim = sim
        .account("acct-a", "key-a")
        .account("acct-b", "key-b")
        .account("acct-c", "key-c")
        .start()
        .await
        .unwrap();
    let config = Config::from_toml_str(&config_text(&sim.base_url(), ""), |name| {
        (name == "SIM_KEY_B").then(|| "key-b".to_owned())
    })
    .unwrap();
    Env(Harness::serve(sim, Gateway::new(config).unwrap()).await)
}

async fn setup() -> Env {
    setup_with(SimProvider::builder().quota_step(10.0)).await
}

impl Env {
    fn url(&self, path: &str) -> String {
        self.0.url(0, path)
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Response<Incoming> {
        self.client.request(req).await.unwrap()
    }

    async fn post(&self, path: &str, session: Option<&str>, body: &str) -> (StatusCode, Bytes) {
        let mut b = Request::post(self.url(path))
            .header("authorization", "Bearer client-key")
            .header("content-type", "application/json");
        if let Some(s) = session {
            b = b.header("session-id", s);
        }
        let res = self
            .send(b.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
            .await;
        let status = res.status();
        (status, res.into_body().collect().await.unwrap().to_bytes())
    }

    /// Sessions bound to account `id`.
    async fn sessions_of(&self, id: &str) -> u64 {
        self.account(0, id).await["sessions"].as_u64().unwrap()
    }

    fn upstream_accounts(&self) -> Vec<String> {
        self.sim
            .requests()
            .iter()
            .map(|r| r.account.clone().unwrap_or_default())
            .collect()
    }
}

const CHAT: &str = "{\"model\" : \"codex-relay\",\"messages\":[{\"role\":\"system\",\"content\":\"You are terse.\"},{\"role\":\"user\",\"content\":\"say hi \\u00e9 \\ud83d\\ude00\"}],\"x_ratio\":1.50, \"x_unknown\":{\"b\":1,\"a\":[1e3,-0.0]}}";
