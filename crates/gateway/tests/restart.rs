//! A handoff stored with redb survives `kill -9` of the gateway process and is injected by the
//! restarted gateway: the real binary runs as a child process over a config file in a temporary
//! folder, the simulated provider runs in the test.

use std::path::Path;
use std::process::{Child, Stdio};

use bytes::Bytes;
use context_relay_sim::SimProvider;
use context_relay_testkit::binary::{signal, start_binary};
use context_relay_testkit::handoff::SUMMARY_NEEDLE;
use context_relay_testkit::harness::http_client;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

const ADMIN: &str = "restart-admin";
const SUMMARY: &str = "Porting the build to cargo workspaces; core crate moved.";

/// The gateway binary running as a child; killed (SIGKILL) when dropped.
struct Gateway {
    child: Child,
    url: String,
}

impl Gateway {
    /// Starts the binary on `config` and reads the address it prints once listening.
    fn start(config: &Path) -> Self {
        let (child, url) = start_binary(
            env!("CARGO_BIN_EXE_context-relay-gateway"),
            config,
            "warn",
            Stdio::inherit(),
        );
        Self { child, url }
    }

    /// SIGTERM, then waits for the process: its exit status.
    fn terminate(mut self) -> std::process::ExitStatus {
        signal(&self.child, "-TERM");
        self.child.wait().expect("the child exits")
    }

    /// SIGKILL: no graceful shutdown, no flush on exit.
    fn kill9(mut self) {
        self.child.kill().expect("SIGKILL is delivered");
        self.child.wait().expect("the child is reaped");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn turn(
    client: &Client<HttpConnector, Full<Bytes>>,
    gw: &Gateway,
    turn: usize,
) -> StatusCode {
    let mut messages = vec![json!({"role": "system", "content": "You are a build engineer."})];
    for t in 1..=turn {
        messages.push(json!({"role": "user", "content": format!("step {t} of the port")}));
        if t < turn {
            messages.push(json!({"role": "assistant", "content": format!("done {t}")}));
        }
    }
    let body = json!({"model": "codex-relay", "messages": messages}).to_string();
    let req = Request::post(format!("{}/v1/chat/completions", gw.url))
        .header("authorization", "Bearer restart-client")
        .header("session-id", "persisted-session")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let res = client.request(req).await.unwrap();
    let status = res.status();
    res.into_body().collect().await.unwrap();
    status
}

/// `GET /admin/handoffs?settle=true`: waits for the summary in flight, then lists.
async fn handoffs(client: &Client<HttpConnector, Full<Bytes>>, gw: &Gateway) -> Vec<Value> {
    let req = Request::get(format!("{}/admin/handoffs?settle=true", gw.url))
        .header("authorization", format!("Bearer {ADMIN}"))
        .body(Full::default())
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    v["handoffs"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redb_handoff_survives_kill_9_and_is_injected_after_restart() {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .account("acct-b", "key-b")
        .quota_step(30.0)
        .summary_reply(
            SUMMARY_NEEDLE,
            json!({"summary": SUMMARY, "keyDecisions": ["one crate per layer"],
                   "taskProgress": "core moved; next: store", "activeEntities": ["Cargo.toml"]})
            .to_string(),
        )
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"
listen = "127.0.0.1:0"
admin_token = "{ADMIN}"
[store]
backend = "redb"
path = "{store}"
[[providers]]
name = "codex"
base_url = "{base}"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key = "key-b"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
"#,
            store = dir.path().join("relay.redb").display(),
            base = sim.base_url(),
        ),
    )
    .unwrap();
    let client = http_client();

    // First life: three turns take acct-a to 90 %, which writes the handoff.
    let gw = Gateway::start(&config);
    for t in 1..=3 {
        assert_eq!(turn(&client, &gw, t).await, 200);
    }
    let stored = handoffs(&client, &gw).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["summary"], SUMMARY);
    assert_eq!(stored[0]["from_account"], "acct-a");
    gw.kill9();

    // Second life on the same file: the handoff is still there.
    let gw = Gateway::start(&config);
    let stored = handoffs(&client, &gw).await;
    assert_eq!(stored.len(), 1, "the handoff survived kill -9");
    assert_eq!(stored[0]["summary"], SUMMARY);

    // acct-a is used up: the turn is retried on acct-b, which receives the handoff.
    sim.set_used("acct-a", 100.0);
    sim.clear_requests();
    assert_eq!(turn(&client, &gw, 4).await, 200);
    let reqs = sim.requests();
    let moved = reqs
        .iter()
        .find(|r| r.account.as_deref() == Some("acct-b"))
        .expect("the turn reached acct-b");
    let text = std::str::from_utf8(&moved.body).unwrap();
    assert!(text.contains("<context_handoff>"), "{text}");
    assert!(text.contains(SUMMARY), "{text}");
    assert!(
        reqs.iter()
            .filter(|r| r.account.as_deref() == Some("acct-a"))
            .all(|r| !std::str::from_utf8(&r.body)
                .unwrap()
                .contains("<context_handoff>"))
    );
    assert!(
        handoffs(&client, &gw).await.is_empty(),
        "consumed once injected"
    );

    // A graceful stop (SIGTERM) exits 0 and releases the file for the next process.
    assert!(gw.terminate().success());
    let gw = Gateway::start(&config);
    assert!(handoffs(&client, &gw).await.is_empty());
    assert!(gw.terminate().success());
}
