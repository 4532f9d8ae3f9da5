//! The `context-relay-sim` binary: it prints its URL and accounts, and serves them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// Kills the simulator on drop.
struct Sim(Child);

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `POST` of `body` to `url` with `key`; the raw answer.
fn post(url: &str, key: &str, body: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    let mut tcp = TcpStream::connect(addr).unwrap();
    write!(
        tcp,
        "POST /{path}/chat/completions HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    tcp.read_to_string(&mut out).unwrap();
    out
}

/// The simulator started with `args` (on a free port): it, its URL and its accounts line.
fn start(args: &[&str]) -> (Sim, String, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_context-relay-sim"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sim = Sim(child);
    let mut lines = BufReader::new(sim.0.stdout.take().unwrap()).lines();
    let url = lines.next().unwrap().unwrap();
    let url = url.strip_prefix("listening on ").unwrap().to_owned();
    let accounts = lines.next().unwrap().unwrap();
    (sim, url, accounts)
}

#[test]
fn serves_the_accounts_it_was_given() {
    let (_sim, url, accounts) = start(&["--accounts", "a,b=sk-b"]);
    assert!(url.ends_with("/v1"), "{url}");
    assert_eq!(accounts, "accounts a=key-a,b=sk-b");

    let turn = r#"{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#;
    let a = post(&url, "key-a", turn);
    assert!(a.starts_with("HTTP/1.1 200"), "{a}");
    assert!(a.contains("from account a."), "{a}");
    let b = post(&url, "sk-b", turn);
    assert!(b.contains("from account b."), "{b}");
    // An unknown key is refused, and the provider's parameter rules hold.
    assert!(post(&url, "key-b", turn).starts_with("HTTP/1.1 401"));
    let refused = post(
        &url,
        "sk-b",
        r#"{"model":"gpt-5","temperature":0.1,"messages":[]}"#,
    );
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    assert!(refused.contains("unsupported_parameter"), "{refused}");
}

/// With `--summaries`, a summary request (the relay's prompt) gets a handoff note in the
/// relay's JSON format naming the account, and uses no quota; a turn is answered as before.
#[test]
fn answers_summary_requests_with_a_handoff_note_when_asked() {
    let (_sim, url, _) = start(&["--accounts", "a", "--quota-step", "50", "--summaries"]);
    let summary = r#"{"model":"gpt-4.1","messages":[{"role":"user","content":"You are writing a handoff note. The conversation below"}]}"#;
    for _ in 0..3 {
        let answer = post(&url, "key-a", summary);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.contains(r#"keyDecisions"#) && answer.contains("written on account a"),
            "{answer}"
        );
    }
    // Three summaries at a 50 % step would have used the account up: they used nothing.
    let turn = r#"{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#;
    let answer = post(&url, "key-a", turn);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("from account a."), "{answer}");
}
