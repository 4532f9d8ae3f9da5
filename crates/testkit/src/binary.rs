//! The gateway binary as a child process: started on a configuration file, its address read
//! from the line it prints once listening, and signalled with kill(1).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts the gateway binary `bin` (the test's `env!("CARGO_BIN_EXE_context-relay-gateway")`)
/// on `config` with `RUST_LOG=rust_log` and `NO_COLOR=1`, its stderr as `stderr` says, and
/// reads the address it prints once listening: the child and `http://ADDR`.
pub fn start_binary(bin: &str, config: &Path, rust_log: &str, stderr: Stdio) -> (Child, String) {
    let mut command = Command::new(bin);
    command
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", rust_log)
        .env("NO_COLOR", "1")
        .stderr(stderr);
    listening(&mut command)
}

/// Spawns `command` (the gateway binary with the arguments, environment and stderr the caller
/// set; stdin null, stdout piped) and reads the address it prints once listening: the child
/// and `http://ADDR`.
pub fn listening(command: &mut Command) -> (Child, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
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
