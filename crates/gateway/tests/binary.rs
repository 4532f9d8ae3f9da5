//! The real binary as operators run it: what a configuration typo prints (line and column,
//! never a secret), `--log-format json` (every stderr line a JSON object, the access log with
//! its fields and without keys), the default text format's access line, a second SIGTERM
//! cutting the drain short, and transparent huge pages turned off for its process.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_sim::SimProvider;
use context_relay_testkit::binary::{Running, listening, signal};
use context_relay_testkit::harness::http_client;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

const SECRET: &str = "sk-live-0123456789abcdef";
const CLIENT_KEY: &str = "client-key-s3cret";

fn write_config(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A gateway on a free loopback port with a memory store and one provider account at
/// `base_url`.
fn one_account(base_url: &str) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "{base_url}"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
"#
    )
}

#[test]
fn a_typo_next_to_a_secret_prints_its_position_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    for (text, line) in [
        // An unknown key on the line after the key.
        (
            format!(
                "[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\n  [[providers.accounts]]\n  id = \"a\"\n  api_key = \"{SECRET}\"\n  api_kye = \"{SECRET}\"\n"
            ),
            7,
        ),
        // An unterminated string holding the key.
        (
            format!(
                "[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\n  [[providers.accounts]]\n  id = \"a\"\n  api_key = \"{SECRET}\n"
            ),
            6,
        ),
        // The key where a number belongs.
        (
            format!("admin_token = \"x\"\n[[providers]]\nname = \"p\"\nrotate_at = \"{SECRET}\"\n"),
            4,
        ),
        // A Redis URL with a password, and a wrong value next to it.
        (
            format!(
                "[store]\nbackend = \"redis\"\nurl = \"redis://:{SECRET}@cache:6379/\"\nprefix = 7\n"
            ),
            4,
        ),
    ] {
        let path = write_config(&dir, &text);
        let out = Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"))
            .arg("--config")
            .arg(&path)
            .arg("--check")
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stderr.contains(SECRET), "{stderr}");
        assert!(!stdout.contains(SECRET), "{stdout}");
        assert!(stderr.contains(&format!("line {line}, column")), "{stderr}");
        assert!(
            stderr.starts_with(&format!("error: {}: ", path.display())),
            "the file is named: {stderr}"
        );
        // One line: no source excerpt under it.
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    // A redis URL the checker refuses: redacted in the message.
    let path = write_config(
        &dir,
        &format!("[store]\nbackend = \"redis\"\nurl = \"http://u:{SECRET}@cache/\"\n"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"))
        .arg("--config")
        .arg(&path)
        .arg("--check")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("store.url") && !stderr.contains(SECRET),
        "{stderr}"
    );
}

/// A simulated provider with one account and, in a new directory, `gateway.toml`: that
/// account, `extra` (whole TOML tables), the combo `codex-relay` and the client `alice`
/// whose key `alice_key` gives (`key = …` or `key_env = …`).
async fn codex_relay(alice_key: &str, extra: &str) -> (SimProvider, tempfile::TempDir) {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(
        &dir,
        &format!(
            r#"{}
{extra}[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
[[clients]]
name = "alice"
{alice_key}
"#,
            one_account(&sim.base_url())
        ),
    );
    (sim, dir)
}

/// Stops the gateway with SIGTERM: all it wrote on stderr, and how it exited.
fn stop(child: &mut std::process::Child) -> (String, std::process::ExitStatus) {
    signal(child, "-TERM");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let exited = child.wait().unwrap();
    (stderr, exited)
}

/// Runs the binary with `args` besides its config, sends a chat request (`x-request-id:
/// rid-42`), one for a model it does not serve and a `/healthz`, stops it with SIGTERM, and returns its stderr, checked to hold
/// no key and no body text.
async fn serve_three_requests(args: &[&str]) -> String {
    let (_sim, dir) = codex_relay("key_env = \"ALICE_KEY\"", "").await;
    let path = dir.path().join("gateway.toml");
    // Not `start_binary`: no `NO_COLOR`, the text format must find stderr is no terminal.
    let (mut child, url) = listening(
        Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"))
            .arg("--config")
            .arg(&path)
            .args(args)
            .env("ALICE_KEY", CLIENT_KEY)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped()),
    );

    let client = http_client();
    let req = Request::post(format!("{url}/v1/chat/completions"))
        .header("authorization", format!("Bearer {CLIENT_KEY}"))
        .header("x-request-id", "rid-42")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","messages":[{"role":"user","content":"the body text"}]}"#,
        )))
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    // The relayed answer carries the client's id, as the access line names it.
    assert_eq!(res.headers()["x-request-id"], "rid-42");
    res.into_body().collect().await.unwrap();
    let req = Request::post(format!("{url}/v1/chat/completions"))
        .header("authorization", format!("Bearer {CLIENT_KEY}"))
        .body(Full::new(Bytes::from_static(
            br#"{"model":"nope","messages":[]}"#,
        )))
        .unwrap();
    assert_eq!(client.request(req).await.unwrap().status(), 404);
    let req = Request::get(format!("{url}/healthz"))
        .body(Full::default())
        .unwrap();
    assert_eq!(client.request(req).await.unwrap().status(), 200);

    // SIGTERM: the gateway drains and exits, and stderr is complete.
    let (stderr, exited) = stop(&mut child);
    assert!(exited.success(), "{stderr}");

    assert!(!stderr.contains(CLIENT_KEY), "{stderr}");
    assert!(!stderr.contains("key-a"), "{stderr}");
    assert!(!stderr.contains("the body text"), "{stderr}");
    stderr
}

#[tokio::test]
async fn json_logs_carry_the_access_log_without_keys() {
    let stderr = serve_three_requests(&["--log-format", "json"]).await;
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let access: Vec<&Value> = lines
        .iter()
        .filter(|v| v["target"] == "context_relay_gateway::access")
        .collect();
    let chat = access
        .iter()
        .find(|v| v["span"]["path"] == "/v1/chat/completions")
        .unwrap_or_else(|| panic!("no access log line for the chat request in\n{stderr}"));
    assert_eq!(chat["level"], "INFO");
    assert_eq!(chat["fields"]["status"], 200);
    assert!(chat["fields"]["latency_ms"].as_f64().unwrap() >= 0.0);
    // The access event sits in its span: JSON's span list names it too.
    assert_eq!(chat["spans"][0]["request_id"], "rid-42", "{chat}");
    let span = &chat["span"];
    assert_eq!(span["method"], "POST");
    assert_eq!(span["request_id"], "rid-42");
    assert_eq!(span["tenant"], "alice");
    assert_eq!(span["combo"], "codex-relay");
    assert_eq!(span["provider"], "codex");
    assert_eq!(span["account"], "acct-a");
    assert!(span["handoff"].is_string());
    // A request refused before it was routed is still the client's.
    let refused = access
        .iter()
        .find(|v| v["fields"]["status"] == 404)
        .unwrap_or_else(|| panic!("no access log line for the refused request in\n{stderr}"));
    assert_eq!(refused["span"]["tenant"], "alice", "{refused}");
    assert!(
        access
            .iter()
            .any(|v| v["span"]["path"] == "/healthz" && v["fields"]["status"] == 200)
    );
    assert!(lines.iter().any(|v| {
        v["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("listening"))
    }));
}

/// The default text format without colours (stderr is not a terminal), whose access line the
/// gateway writes itself: the same text as through `tracing`.
#[tokio::test]
async fn text_logs_carry_the_access_log_without_keys() {
    let stderr = serve_three_requests(&[]).await;
    let access = |path: &str| {
        stderr
            .lines()
            .find(|l| l.contains(&format!(" path={path} ")))
            .unwrap_or_else(|| panic!("no access line for {path} in\n{stderr}"))
    };
    let chat = access("/v1/chat/completions");
    let (time, rest) = chat.split_at("2026-12-01T20:14:14.123456Z".len());
    assert!(time.parse::<jiff::Timestamp>().is_ok(), "{chat}");
    assert!(
        rest.starts_with(
            "  INFO request{method=POST path=/v1/chat/completions request_id=rid-42 status=200 \
             latency_ms="
        ),
        "{chat}"
    );
    assert!(
        rest.contains(
            " tenant=\"alice\" combo=\"codex-relay\" provider=\"codex\" account=\"acct-a\" \
             handoff=\"none\"}: context_relay_gateway::access: request status=200 latency_ms="
        ),
        "{chat}"
    );
    let health = access("/healthz");
    assert!(
        health.contains("  INFO request{method=GET path=/healthz "),
        "{health}"
    );
    assert!(health.ends_with(|c: char| c.is_ascii_digit()), "{health}");
}

/// A request refused for want of a connection slot (`max_connections`) writes its access line
/// too, with its status and id, as every request does.
#[tokio::test]
async fn a_request_refused_a_connection_slot_has_its_access_line() {
    use std::io::Write as _;
    let (_sim, dir) = codex_relay("key = \"k\"", "[limits]\nmax_connections = 1\n").await;
    let (mut child, url) = listening(
        Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"))
            .arg("--config")
            .arg(dir.path().join("gateway.toml"))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped()),
    );
    let addr = url.trim_start_matches("http://").to_owned();
    // The only slot, held by a keep-alive connection that made one request.
    let mut holder = std::net::TcpStream::connect(&addr).unwrap();
    holder
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 12];
    holder.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let mut refused = std::net::TcpStream::connect(&addr).unwrap();
    refused
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-request-id: rid-refused\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    refused.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    drop(holder);
    let (stderr, _) = stop(&mut child);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("request_id=rid-refused status=503")),
        "{stderr}"
    );
}

/// Stopping: the first SIGTERM drains (a provider's stream held open keeps the gateway
/// running, for up to `shutdown_timeout_secs`); a second one cuts the drain short, and the
/// gateway exits at once with status 0, the held request ended.
#[tokio::test]
async fn a_second_sigterm_cuts_the_drain_short() {
    let (sim, dir) = codex_relay(
        &format!("key = \"{CLIENT_KEY}\""),
        "[limits]\nshutdown_timeout_secs = 120\n",
    )
    .await;
    let gw = Running::start(
        env!("CARGO_BIN_EXE_context-relay-gateway"),
        &dir.path().join("gateway.toml"),
        "info",
    );

    let hold = sim.hold_streams();
    let req = Request::post(format!("{}/v1/chat/completions", gw.url))
        .header("authorization", format!("Bearer {CLIENT_KEY}"))
        .body(Full::new(Bytes::from_static(
            br#"{"model":"codex-relay","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .unwrap();
    let res = http_client().request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    // The first event is through: the request is in flight, held by the provider.
    body.frame().await.unwrap().unwrap();

    let within = Duration::from_secs(20);
    gw.signal("-TERM");
    gw.line(within, |l| l.contains("SIGTERM received, shutting down"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut gw = gw;
    assert!(gw.child.try_wait().unwrap().is_none(), "one SIGTERM drains");

    gw.signal("-TERM");
    gw.line(within, |l| {
        l.contains("SIGTERM received again: cutting the drain short")
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = gw.child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < within, "the cut drain ends the process");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
    // The held request was ended with the process, not left hanging.
    tokio::time::timeout(within, body.collect())
        .await
        .expect("the held answer ends")
        .ok();
    drop(hold);
}

/// `--check` and a start with the configuration at `path` both end with exit 1 and an error
/// that names the damaged `store` and says what to do, with no panic message or backtrace.
fn refused_clearly(path: &std::path::Path, store: &std::path::Path) {
    for check in [true, false] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"));
        cmd.arg("--config").arg(path).env("RUST_BACKTRACE", "1");
        if check {
            cmd.arg("--check");
        }
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(1), "check={check}: {text}");
        assert!(text.contains(&*store.to_string_lossy()), "{text}");
        assert!(text.contains("move it aside"), "{text}");
        assert!(
            !text.contains("panicked") && !text.contains("backtrace"),
            "{text}"
        );
    }
}

/// A damaged store file: `--check` reads it and says what to do, and the gateway refuses to
/// start with the same words (exit 1), instead of a panic at every start.
#[test]
fn a_damaged_store_file_is_a_clear_error_for_check_and_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("handoffs.redb");
    // Not a redb file at all past its first bytes: a file damaged beyond repair.
    std::fs::write(&store, vec![0xA5u8; 64 << 10]).unwrap();
    let path = write_config(
        &dir,
        &format!(
            "listen = \"127.0.0.1:0\"\n[store]\nbackend = \"redb\"\npath = \"{}\"\n[[providers]]\nname = \"p\"\nbase_url = \"http://127.0.0.1:9/v1\"\n  [[providers.accounts]]\n  id = \"a\"\n  api_key = \"k\"\n",
            store.display()
        ),
    );
    refused_clearly(&path, &store);
    // A real store file with its middle zeroed: redb panics in its own checks on reading it.
    // The error says so in plain words, with no panic message or backtrace printed first.
    std::fs::remove_file(&store).unwrap();
    drop(context_relay_store::RedbStore::open(&store).unwrap());
    let mut data = std::fs::read(&store).unwrap();
    let size = data.len();
    data[4096..size - 4096].fill(0);
    std::fs::write(&store, &data).unwrap();
    refused_clearly(&path, &store);
    // A file that is fine reads as such.
    std::fs::remove_file(&store).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"))
        .arg("--config")
        .arg(&path)
        .arg("--check")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("not there yet"));
}

/// `--check` reads the credential file of every login: a file of neither client is a clear
/// error (exit 1) that names the account and the keys it found, never a value; a good one is
/// counted.
#[test]
fn check_reads_the_credential_files() {
    let dir = tempfile::tempdir().unwrap();
    let login = dir.path().join("auth.json");
    let config = |file: &std::path::Path| {
        format!(
            "[[providers]]\nname = \"codex\"\nbase_url = \"https://chatgpt.com/backend-api/codex\"\nauth = \"chatgpt\"\n  [[providers.accounts]]\n  id = \"plus-1\"\n  credentials = {:?}\n",
            file.display().to_string()
        )
    };
    let check = |text: &str| {
        Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"))
            .arg("--config")
            .arg(write_config(&dir, text))
            .arg("--check")
            .output()
            .unwrap()
    };
    std::fs::write(&login, format!(r#"{{"api_token":"{SECRET}"}}"#)).unwrap();
    let out = check(&config(&login));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("providers[\"codex\"].accounts[\"plus-1\"].credentials")
            && stderr.contains("expected a Codex CLI auth.json")
            && stderr.contains("\"api_token\""),
        "{stderr}"
    );
    assert!(!stderr.contains(SECRET), "{stderr}");

    std::fs::write(
        &login,
        format!(r#"{{"OPENAI_API_KEY":null,"tokens":{{"access_token":"{SECRET}","refresh_token":"{SECRET}","account_id":"ws-1"}},"last_refresh":"2026-01-02T03:04:05Z"}}"#),
    )
    .unwrap();
    let out = check(&config(&login));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 accounts (1 subscription logins)"),
        "{stdout}"
    );
    assert!(!stdout.contains(SECRET), "{stdout}");
}

// Transparent huge pages: with them the binary held half as much memory again per open
// stream, in mimalloc's large regions; `MIMALLOC_ALLOW_THP` leaves the choice to mimalloc.
// Read from the kernel's own view, `THP_enabled` in `/proc/PID/status`.

/// Starts the binary with `env` added, reads its `THP_enabled` once it listens, stops it.
#[cfg(target_os = "linux")]
fn thp_enabled(env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&dir, &one_account("http://127.0.0.1:9/v1"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"));
    command
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "warn")
        .env_remove("MIMALLOC_ALLOW_THP")
        .envs(env.iter().copied())
        .stderr(Stdio::null());
    let (mut child, _url) = listening(&mut command);
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    signal(&child, "-TERM");
    child.wait().unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_owned())
        .expect("the kernel reports THP_enabled")
}

#[cfg(target_os = "linux")]
#[test]
fn the_gateway_runs_without_transparent_huge_pages() {
    assert_eq!(thp_enabled(&[]), "0");
}

#[cfg(target_os = "linux")]
#[test]
fn mimalloc_allow_thp_leaves_the_choice_to_mimalloc() {
    // mimalloc keeps them with 1 (its default) and turns them off itself with 0.
    assert_eq!(thp_enabled(&[("MIMALLOC_ALLOW_THP", "1")]), "1");
    assert_eq!(thp_enabled(&[("MIMALLOC_ALLOW_THP", "0")]), "0");
}
