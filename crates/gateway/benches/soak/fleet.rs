//! The processes of the soak: one redis-server and three gateway binaries on fixed loopback
//! ports (so a restarted process answers where the clients already send), each killable and
//! restartable, and their resident memory read from `/proc/PID/status`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use context_relay_testkit::binary::start_binary;
use context_relay_testkit::fleet::{FLEET, providers_toml};
use context_relay_testkit::harness::ADMIN_TOKEN;
use context_relay_testkit::redis_server::{free_port, spawn_ready};

/// Every account of [`FLEET`], with the index of its provider.
pub fn accounts() -> Vec<(usize, &'static str)> {
    FLEET
        .iter()
        .enumerate()
        .flat_map(|(p, provider)| provider.accounts.iter().map(move |id| (p, *id)))
        .collect()
}

/// A redis-server on a fixed port, without persistence: a restart empties it, as a real
/// Redis without AOF or RDB does.
pub struct Redis {
    pub port: u16,
    child: Option<Child>,
}

impl Redis {
    pub fn start() -> Self {
        let port = free_port();
        let mut r = Self { port, child: None };
        r.restart();
        r
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// Starts it again on its port (blocks until it accepts connections).
    pub fn restart(&mut self) {
        let port = self.port.to_string();
        self.child = Some(spawn_ready(
            self.port,
            &["--port", &port, "--bind", "127.0.0.1"],
        ));
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One gateway binary on a fixed port.
pub struct GatewayProcess {
    pub url: String,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl GatewayProcess {
    /// Writes the configuration of a gateway listening on a free port over the simulators at
    /// `sim_urls` and `redis_url` into `dir`, and starts it.
    pub fn start(dir: &Path, index: usize, sim_urls: &[String; 2], redis_url: &str) -> Self {
        let port = free_port();
        let config = dir.join(format!("gateway-{index}.toml"));
        std::fs::write(&config, config_text(port, sim_urls, redis_url)).expect("write config");
        let mut g = Self {
            url: format!("http://127.0.0.1:{port}"),
            config,
            log: dir.join(format!("gateway-{index}.log")),
            child: None,
        };
        g.restart();
        g
    }

    /// The process id of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// Starts the binary again on the same configuration (blocks until it listens); its
    /// stderr is appended to `gateway-N.log` in the soak's directory.
    pub fn restart(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("gateway log");
        let (child, url) = start_binary(
            env!("CARGO_BIN_EXE_context-relay-gateway"),
            &self.config,
            &std::env::var("SOAK_LOG").unwrap_or_else(|_| crate::GATEWAY_LOG.to_owned()),
            Stdio::from(log),
        );
        assert_eq!(url, self.url, "the gateway listens where it was told");
        self.child = Some(child);
    }

    /// Its log lines stamped from `from` to `to`.
    pub fn log_between(&self, from: jiff::Timestamp, to: jiff::Timestamp) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|t| from <= t && t <= to)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Resident memory of process `pid` in KiB (`VmRSS`), if it is alive.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn config_text(port: u16, sim_urls: &[String; 2], redis_url: &str) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\nadmin_token = \"{ADMIN_TOKEN}\"\n\
         [store]\nbackend = \"redis\"\nurl = \"{redis_url}\"\n\
         [relay]\nhandoff_providers = [\"*\"]\n{}",
        providers_toml([&sim_urls[0], &sim_urls[1]], 3)
    )
}
