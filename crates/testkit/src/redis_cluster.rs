//! A throwaway Redis Cluster on loopback for tests: masters (and replicas) started in a
//! temporary directory, joined with `redis-cli --cluster create`, killed and removed on drop.
//! It depends on `std` and [`redis_server`](crate::redis_server) alone.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::redis_server::{free_port, spawn_ready};

/// A cluster of our own: `ports[..masters]` are the masters `redis-cli` made, each of the
/// others a replica.
pub struct RedisCluster {
    /// The masters' URLs, comma-separated: what a store's `url` takes with `cluster = true`.
    pub url: String,
    /// Every node's port, masters first.
    pub ports: Vec<u16>,
    nodes: Vec<Option<Child>>,
    dir: PathBuf,
}

/// Longest wait for the cluster to agree on its state (a few hundred ms on an idle machine).
const SETTLE: Duration = Duration::from_secs(30);

impl RedisCluster {
    /// Three masters, no replica: what the conformance suite runs on.
    pub fn start() -> Self {
        Self::start_with(3, 0)
    }

    /// `masters` masters, each with `replicas` replicas.
    pub fn start_with(masters: usize, replicas: usize) -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("cr-redis-cluster-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = Self {
            url: String::new(),
            ports: Vec::new(),
            nodes: Vec::new(),
            dir,
        };
        let dir = cluster.dir.to_string_lossy().into_owned();
        for _ in 0..masters * (1 + replicas) {
            let port = free_port();
            // The bus port is named: `port + 10000` may be past 65535 for an ephemeral port.
            let bus = free_port().to_string();
            let (p, conf) = (port.to_string(), format!("nodes-{port}.conf"));
            let child = spawn_ready(
                port,
                &[
                    "--port",
                    &p,
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus,
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "1000",
                    // A replica syncs at once (not after the default 5 s): one that never
                    // synced may not be promoted.
                    "--repl-diskless-sync-delay",
                    "0",
                    "--dir",
                    &dir,
                ],
            );
            cluster.ports.push(port);
            cluster.nodes.push(Some(child));
        }
        let addrs: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new(cli())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("`redis-cli --cluster create` cannot run: {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster.url = cluster.ports[..masters]
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect::<Vec<_>>()
            .join(",");
        cluster.settle();
        cluster
    }

    /// Waits (bounded) until every live node says the cluster is ok and knows every node, and
    /// every replica is in sync with its master.
    pub fn settle(&self) {
        let deadline = Instant::now() + SETTLE;
        let live = self.nodes.iter().filter(|n| n.is_some()).count();
        for (i, port) in self.ports.iter().enumerate() {
            if self.nodes[i].is_none() {
                continue;
            }
            // No event to await from another process: ask it until it agrees.
            loop {
                let info = self.cli_at(*port, &["cluster", "info"]);
                let known = info
                    .lines()
                    .find_map(|l| l.strip_prefix("cluster_known_nodes:"))
                    .and_then(|n| n.trim().parse::<usize>().ok());
                let replication = self.cli_at(*port, &["info", "replication"]);
                let synced = !replication.contains("role:slave")
                    || replication.contains("master_link_status:up");
                if info.contains("cluster_state:ok") && known >= Some(live) && synced {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the cluster never settled; port {port} says: {info}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// `redis-cli -p port args…`, its output.
    pub fn cli_at(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new(cli())
            .args(["-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("redis-cli cannot run: {e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Kills the node on `port` at once (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        let i = self.ports.iter().position(|p| *p == port).unwrap();
        if let Some(mut child) = self.nodes[i].take() {
            child.kill().ok();
            child.wait().ok();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for mut child in self.nodes.iter_mut().filter_map(Option::take) {
            child.kill().ok();
            child.wait().ok();
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

fn cli() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}
