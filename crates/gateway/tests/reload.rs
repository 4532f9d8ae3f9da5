//! SIGHUP reloads the configuration of the running binary: a good file changes clients,
//! accounts and combos for the next request and keeps sessions on their accounts; a bad file
//! keeps the running configuration and the log says why. `/metrics` has a `# HELP` line for
//! every metric. `--probe` (the container health check) says whether the gateway is ready.
#![cfg(unix)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use context_relay_sim::SimProvider;
use context_relay_testkit::binary::Running;
use context_relay_testkit::harness::http_client;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

const ADMIN: &str = "reload-admin";

/// Sends SIGHUP and waits for the log line that tells how the reload went.
fn reload(gw: &Running) -> String {
    gw.signal("-HUP");
    gw.line(Duration::from_secs(20), |line| {
        line.contains("configuration reloaded") || line.contains("not reloaded")
    })
}

/// The gateway binary on `config`, its access lines off.
fn start(config: &Path) -> Running {
    Running::start(
        env!("CARGO_BIN_EXE_context-relay-gateway"),
        config,
        "info,context_relay_gateway::access=off",
    )
}

fn config(base_url: &str, clients: &[&str], accounts: &[&str], combos: &[&str]) -> String {
    // A free port: the tests of this file run side by side.
    let mut text = format!(
        "listen = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n[store]\nbackend = \"memory\"\n"
    );
    for c in clients {
        text.push_str(&format!(
            "[[clients]]\nname = \"{c}\"\nkey = \"key-of-{c}\"\n"
        ));
    }
    text.push_str(&format!(
        "[[providers]]\nname = \"codex\"\nbase_url = \"{base_url}\"\n"
    ));
    for a in accounts {
        text.push_str(&format!(
            "  [[providers.accounts]]\n  id = \"{a}\"\n  api_key = \"key-{a}\"\n"
        ));
    }
    for c in combos {
        text.push_str(&format!(
            "[[combos]]\nname = \"{c}\"\ntargets = [\"codex/gpt-5.5\"]\n"
        ));
    }
    text
}

/// A simulated provider with `accounts` (each keyed `key-{id}`), and where the gateway's
/// configuration file goes (its folder removed when the returned guard drops).
async fn provider_and_file(
    accounts: &[&str],
) -> (SimProvider, tempfile::TempDir, std::path::PathBuf) {
    let mut sim = SimProvider::builder();
    for a in accounts {
        sim = sim.account(*a, format!("key-{a}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    (sim.start().await.unwrap(), dir, path)
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// One Chat turn: the status and the account that served it.
async fn turn(client: &HttpClient, url: &str, who: &str, combo: &str, session: &str) -> u16 {
    let body = json!({"model": combo, "messages": [{"role": "user", "content": "hi"}]});
    let req = Request::post(format!("{url}/v1/chat/completions"))
        .header("authorization", format!("Bearer key-of-{who}"))
        .header("session-id", session)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let res = client.request(req).await.unwrap();
    let status = res.status().as_u16();
    res.into_body().collect().await.unwrap();
    status
}

async fn get(client: &HttpClient, url: &str) -> String {
    let req = Request::get(url)
        .header("authorization", format!("Bearer {ADMIN}"))
        .body(Full::default())
        .unwrap();
    let res = client.request(req).await.unwrap();
    String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

#[tokio::test]
async fn sighup_reloads_a_good_file_and_keeps_the_running_one_over_a_bad_file() {
    let (sim, _dir, path) = provider_and_file(&["acct-a", "acct-b", "acct-c"]).await;
    let base = sim.base_url();
    std::fs::write(
        &path,
        config(&base, &["alice"], &["acct-a", "acct-b"], &["codex-relay"]),
    )
    .unwrap();
    let gw = start(&path);
    let client: HttpClient = http_client();
    let served = || sim.requests().last().and_then(|r| r.account.clone());

    assert_eq!(
        turn(&client, &gw.url, "alice", "codex-relay", "s1").await,
        200
    );
    assert_eq!(served().as_deref(), Some("acct-a"));
    // A second session pinned to acct-b: acct-a is used up for one turn.
    sim.set_used("acct-a", 100.0);
    assert_eq!(
        turn(&client, &gw.url, "alice", "codex-relay", "s2").await,
        200
    );
    assert_eq!(served().as_deref(), Some("acct-b"));
    sim.set_used("acct-a", 0.0);
    assert_eq!(
        turn(&client, &gw.url, "bob", "codex-relay", "s3").await,
        401
    );

    // A good file: bob may call, acct-c is added before the others, a second combo exists.
    std::fs::write(
        &path,
        config(
            &base,
            &["alice", "bob"],
            &["acct-c", "acct-a", "acct-b"],
            &["codex-relay", "second"],
        ),
    )
    .unwrap();
    let line = reload(&gw);
    assert!(line.contains("configuration reloaded"), "{line}");
    assert_eq!(turn(&client, &gw.url, "bob", "second", "s3").await, 200);
    // A new session fills the new first account; s2 stays where it was (acct-a is available
    // again, so it is the carried-over binding that keeps it on acct-b).
    assert_eq!(served().as_deref(), Some("acct-c"));
    assert_eq!(
        turn(&client, &gw.url, "alice", "codex-relay", "s2").await,
        200
    );
    assert_eq!(served().as_deref(), Some("acct-b"));
    let accounts: Value =
        serde_json::from_str(&get(&client, &format!("{}/admin/accounts", gw.url)).await).unwrap();
    let listed: Vec<&str> = accounts["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["account"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["acct-c", "acct-a", "acct-b"]);

    // A bad file: the running configuration stays, and the log says why.
    std::fs::write(
        &path,
        "[[providers]]\nname = \"codex\"\nbase_urll = \"x\"\n",
    )
    .unwrap();
    let line = reload(&gw);
    assert!(
        line.contains("not reloaded") && line.contains("line 3"),
        "{line}"
    );
    assert_eq!(turn(&client, &gw.url, "bob", "second", "s4").await, 200);
    // Valid TOML that fails validation is refused the same way.
    std::fs::write(
        &path,
        config(&base, &["alice"], &["acct-a"], &["codex-relay"]).replace("codex/gpt-5.5", "nope/x"),
    )
    .unwrap();
    let line = reload(&gw);
    assert!(line.contains("not reloaded"), "{line}");
    assert_eq!(turn(&client, &gw.url, "bob", "second", "s5").await, 200);
    // A file caught between its truncation and its writing parses, but has no provider.
    std::fs::write(&path, "").unwrap();
    let line = reload(&gw);
    assert!(
        line.contains("not reloaded") && line.contains("empty or cut file"),
        "{line}"
    );
    assert_eq!(turn(&client, &gw.url, "bob", "second", "s6").await, 200);

    // Refused admin requests are counted: a wrong token, a wrong console login.
    let wrong = Request::get(format!("{}/admin/accounts", gw.url))
        .header("authorization", "Bearer not-the-token")
        .body(Full::default())
        .unwrap();
    assert_eq!(client.request(wrong).await.unwrap().status(), 401);
    let login = Request::post(format!("{}/admin/login", gw.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from_static(b"token=guess")))
        .unwrap();
    assert_eq!(client.request(login).await.unwrap().status(), 401);

    // Every metric family on the page has its help text.
    let page = get(&client, &format!("{}/metrics", gw.url)).await;
    for reason in ["token", "login"] {
        let line = format!("context_relay_gateway_admin_refused_total{{reason=\"{reason}\"}} 1\n");
        assert!(page.contains(&line), "{line} in\n{page}");
    }
    let families: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(families.len() > 5, "{page}");
    for f in &families {
        assert!(
            page.contains(&format!("# HELP {f} ")),
            "no # HELP line for {f} in\n{page}"
        );
    }
    assert!(
        page.contains("context_relay_gateway_config_reloads_total{outcome=\"refused\"} 3"),
        "{page}"
    );

    // The container health check.
    let probe = |url: String| {
        Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"))
            .arg("--probe")
            .arg(url)
            .output()
            .unwrap()
    };
    let ready = probe(format!("{}/readyz", gw.url));
    assert!(ready.status.success(), "{ready:?}");
    let url = gw.url.clone();
    gw.signal("-TERM");
    let mut gw = gw;
    assert!(gw.child.wait().unwrap().success());
    let gone = probe(format!("{url}/readyz"));
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("not ready"),
        "{gone:?}"
    );
}

/// The command line's `--log-format` holds across reloads as `--listen` does: a reload of a
/// file that names another format (or none) is not told that `log_format` changed.
#[tokio::test]
async fn a_command_line_log_format_is_not_a_change_at_each_reload() {
    let (sim, _dir, path) = provider_and_file(&["acct-a"]).await;
    std::fs::write(
        &path,
        config(&sim.base_url(), &["alice"], &["acct-a"], &["codex-relay"]),
    )
    .unwrap();
    let gw = Running::start_with(
        env!("CARGO_BIN_EXE_context-relay-gateway"),
        &path,
        &["--log-format", "json"],
        "info,context_relay_gateway::access=off",
    );
    gw.signal("-HUP");
    let line = gw.line(Duration::from_secs(20), |line| {
        line.contains("log_format") || line.contains("configuration reloaded")
    });
    assert!(line.contains("configuration reloaded"), "{line}");
    assert!(line.starts_with('{'), "still JSON: {line}");
}
