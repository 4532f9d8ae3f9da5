//! A throwaway redis-server for tests, shared by the store, tower and gateway suites (it depends
//! on `std` alone).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// `REDIS_URL` when set; otherwise a redis-server of our own on a free loopback port, killed on
/// drop. Panics (never skips) when neither is possible: the suite must run against Redis.
pub struct RedisServer {
    /// The server's URL: `redis://127.0.0.1:PORT/`, or `REDIS_URL`.
    pub url: String,
    child: Option<Child>,
}

impl RedisServer {
    /// `REDIS_URL` when set and not empty, or else a server of our own.
    pub fn start() -> Self {
        if let Ok(url) = std::env::var("REDIS_URL")
            && !url.is_empty()
        {
            return Self { url, child: None };
        }
        Self::start_own()
    }

    /// Always a server of our own (for tests that kill it).
    pub fn start_own() -> Self {
        let (port, child) = spawn_on_free_port(|port| {
            ["--port", port, "--bind", "127.0.0.1"]
                .map(String::from)
                .to_vec()
        });
        Self {
            url: format!("redis://127.0.0.1:{port}/"),
            child: Some(child),
        }
    }

    /// Kills our server now (a no-op on `REDIS_URL`).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// Whether the server is our own (not `REDIS_URL`).
    pub fn is_own(&self) -> bool {
        self.child.is_some()
    }

    /// Sends `CONFIG SET name value` to our own server (for tests that make it refuse writes,
    /// say). Panics on `REDIS_URL` or when the server refuses.
    pub fn config_set(&self, name: &str, value: &str) {
        use std::io::{Read, Write};
        assert!(self.is_own(), "config_set needs a server of our own");
        let addr = self
            .url
            .trim_start_matches("redis://")
            .trim_end_matches('/');
        let mut conn = std::net::TcpStream::connect(addr).expect("connect to redis-server");
        let mut cmd = String::from("*4\r\n");
        for arg in ["CONFIG", "SET", name, value] {
            cmd.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        conn.write_all(cmd.as_bytes()).expect("send CONFIG SET");
        let mut reply = [0u8; 256];
        let n = conn.read(&mut reply).expect("read the reply");
        let reply = String::from_utf8_lossy(&reply[..n]);
        assert!(
            reply.starts_with("+OK"),
            "CONFIG SET {name} {value}: {reply}"
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback port (free when asked: the caller binds it soon after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server started with `args` (plus no persistence), once its log says it accepts
/// connections on `port`. Panics when it cannot be started: the suite must run against Redis.
pub fn spawn_ready(port: u16, args: &[&str]) -> Child {
    try_spawn_ready(port, args).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn_ready`] on a free port, `args` made for it: a port found free can be taken by
/// another process before the server binds it (tests start servers in parallel), so a server
/// that exits before it is ready is started again on another port, a few times.
pub fn spawn_on_free_port(args: impl Fn(&str) -> Vec<String>) -> (u16, Child) {
    let mut failed = String::new();
    for _ in 0..5 {
        let port = free_port();
        let text = port.to_string();
        let args = args(&text);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match try_spawn_ready(port, &args) {
            Ok(child) => return (port, child),
            Err(e) => failed = e,
        }
    }
    panic!("{failed} (five ports tried)")
}

fn try_spawn_ready(port: u16, args: &[&str]) -> Result<Child, String> {
    let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let mut child = Command::new(&bin)
        .args(args)
        .args(["--save", "", "--appendonly", "no", "--loglevel", "notice"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "REDIS_URL is not set and `{bin}` cannot be started ({e}): this \
                 suite needs a real Redis (install redis-server or set REDIS_URL)"
            )
        });
    // Readiness from the server's own log line, not from a sleep.
    let Some(stdout) = child.stdout.take() else {
        child.kill().ok();
        child.wait().ok();
        return Err("redis-server's log could not be read".into());
    };
    let mut lines = BufReader::new(stdout).lines();
    let mut last = String::new();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("Ready to accept connections") => break,
            Some(Ok(line)) => last = line,
            _ => {
                child.kill().ok();
                child.wait().ok();
                return Err(format!(
                    "redis-server on port {port} exited before accepting connections (its last log line: {last:?})"
                ));
            }
        }
    }
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(child)
}
