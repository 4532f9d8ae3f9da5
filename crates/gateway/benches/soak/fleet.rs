//! The processes of the soak: one redis-server and three gateway binaries on fixed loopback
//! ports (so a restarted process answers where the clients already send), each killable and
//! restartable, and their resident memory read from `/proc/PID/status`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use context_relay_testkit::binary::start_binary;
use context_relay_testkit::harness::{ADMIN_TOKEN, key_of};
use context_relay_testkit::redis_server::{free_port, spawn_ready};

/// The providers of the soak: (name, `auth`, accounts, combo, target). One per API shape;
/// each reads the quota headers of the simulator [`sim_index`] gives it.
pub const PROVIDERS: [(&str, &str, [&str; 3], &str, &str); 4] = [
    (
        "codex",
        "",
        ["c1", "c2", "c3"],
        "codex-relay",
        "codex/gpt-5.5",
    ),
    (
        "anthropic",
        "auth = \"x-api-key\"\n",
        ["a1", "a2", "a3"],
        "claude-relay",
        "anthropic/claude-opus-4-8",
    ),
    (
        "openai",
        "",
        ["o1", "o2", "o3"],
        "chat-relay",
        "openai/gpt-4.1",
    ),
    (
        "gemini",
        "auth = \"x-goog-api-key\"\n",
        ["g1", "g2", "g3"],
        "gemini-relay",
        "gemini/gemini-3-pro",
    ),
];

/// Which of the two simulators serves provider `provider` of [`PROVIDERS`]: 1 (Anthropic's
/// quota headers) for `anthropic`, 0 (Codex's) for the others.
pub fn sim_index(provider: usize) -> usize {
    usize::from(PROVIDERS[provider].0 == "anthropic")
}

/// Every account of [`PROVIDERS`], with the index of its provider.
pub fn accounts() -> Vec<(usize, &'static str)> {
    PROVIDERS
        .iter()
        .enumerate()
        .flat_map(|(p, (_, _, ids, _, _))| ids.iter().map(move |id| (p, *id)))
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
    let mut text = format!(
        "listen = \"127.0.0.1:{port}\"\nadmin_token = \"{ADMIN_TOKEN}\"\n\
         [store]\nbackend = \"redis\"\nurl = \"{redis_url}\"\n\
         [relay]\nhandoff_providers = [\"*\"]\n"
    );
    for (p, (name, auth, ids, _, _)) in PROVIDERS.into_iter().enumerate() {
        let sim_url = &sim_urls[sim_index(p)];
        let quota = ["codex", "anthropic"][sim_index(p)];
        text.push_str(&format!(
            "[[providers]]\nname = \"{name}\"\nbase_url = \"{sim_url}\"\nquota = \"{quota}\"\n{auth}"
        ));
        for id in ids {
            text.push_str(&format!(
                "  [[providers.accounts]]\n  id = \"{id}\"\n  api_key = \"{}\"\n",
                key_of(id)
            ));
        }
    }
    for (_, _, _, combo, target) in PROVIDERS {
        text.push_str(&format!(
            "[[combos]]\nname = \"{combo}\"\ntargets = [\"{target}\"]\n"
        ));
    }
    text
}
