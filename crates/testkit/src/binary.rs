//! The gateway binary as a child process: started on a configuration file, its address read
//! from the line it prints once listening, signalled with kill(1), and its log read line by
//! line ([`Running`]).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Starts the gateway binary `bin` (the test's `env!("CARGO_BIN_EXE_context-relay-gateway")`)
/// on `config` with `RUST_LOG=rust_log` and `NO_COLOR=1`, its stderr as `stderr` says, and
/// reads the address it prints once listening: the child and `http://ADDR`.
pub fn start_binary(bin: &str, config: &Path, rust_log: &str, stderr: Stdio) -> (Child, String) {
    start_binary_with(bin, config, &[], rust_log, stderr)
}

/// [`start_binary`] with `args` after `--config FILE`.
fn start_binary_with(
    bin: &str,
    config: &Path,
    args: &[&str],
    rust_log: &str,
    stderr: Stdio,
) -> (Child, String) {
    let mut command = Command::new(bin);
    command
        .arg("--config")
        .arg(config)
        .args(args)
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
    signal_pid(child.id(), sig);
}

/// Sends `sig` to the process `pid` with kill(1) (`std::process::id()`: the caller's own).
pub fn signal_pid(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .expect("kill(1) runs");
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// The gateway binary as a child process, its stderr read line by line on a thread; killed
/// when dropped.
#[derive(Debug)]
pub struct Running {
    /// The process.
    pub child: Child,
    /// `http://ADDR`, where it listens.
    pub url: String,
    log: mpsc::Receiver<String>,
}

impl Running {
    /// Starts `bin` on `config` with `RUST_LOG=rust_log`, as [`start_binary`] does.
    pub fn start(bin: &str, config: &Path, rust_log: &str) -> Self {
        Self::start_with(bin, config, &[], rust_log)
    }

    /// [`start`](Self::start) with `args` after `--config FILE` (`--listen`, `--log-format`).
    pub fn start_with(bin: &str, config: &Path, args: &[&str], rust_log: &str) -> Self {
        let (mut child, url) = start_binary_with(bin, config, args, rust_log, Stdio::piped());
        let (tx, log) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr is piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, url, log }
    }

    /// Sends `sig` (`-TERM`, `-HUP`, …) with kill(1).
    pub fn signal(&self, sig: &str) {
        signal(&self.child, sig);
    }

    /// The next log line that `wanted` accepts, the lines before it skipped; panics when none
    /// comes within `within`.
    pub fn line(&self, within: Duration, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) if wanted(&line) => return line,
                Ok(_) => {}
                Err(e) => panic!("no such log line within {within:?}: {e}"),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}
