//! The binary turns transparent huge pages off for its process (with them it held half as much
//! memory again per open stream, in mimalloc's large regions), unless `MIMALLOC_ALLOW_THP` leaves the
//! choice to mimalloc. Read from the kernel's own view, `THP_enabled` in `/proc/PID/status`.
#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};

use context_relay_testkit::binary::{listening, signal};

const CONFIG: &str = r#"
listen = "127.0.0.1:0"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "http://127.0.0.1:9/v1"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
"#;

/// Starts the binary with `env` added, reads its `THP_enabled` once it listens, stops it.
fn thp_enabled(env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, CONFIG).unwrap();
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

#[test]
fn the_gateway_runs_without_transparent_huge_pages() {
    assert_eq!(thp_enabled(&[]), "0");
}

#[test]
fn mimalloc_allow_thp_leaves_the_choice_to_mimalloc() {
    // mimalloc keeps them with 1 (its default) and turns them off itself with 0.
    assert_eq!(thp_enabled(&[("MIMALLOC_ALLOW_THP", "1")]), "1");
    assert_eq!(thp_enabled(&[("MIMALLOC_ALLOW_THP", "0")]), "0");
}
