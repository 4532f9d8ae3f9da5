//! A gateway killed (`kill -9`) right after it refreshed a login restarts with a working pair:
//! the rotated pair was saved (redb store and credential file) before the request that needed
//! it went out. The real binary runs as a child process; the simulated issuer and backends run
//! in the test, and the kill lands while the refreshed request is still being answered.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use context_relay_testkit::binary::start_binary;
use context_relay_testkit::clients::{completed, json_headers};
use context_relay_testkit::conversation::Client;
use context_relay_testkit::harness::http_client;
use context_relay_testkit::logins::Logins;

/// The gateway binary as a child, killed (SIGKILL) when dropped.
struct Process {
    child: Child,
    url: String,
}

impl Process {
    fn start(config: &Path) -> Self {
        let (child, url) = start_binary(
            env!("CARGO_BIN_EXE_context-relay-gateway"),
            config,
            "info",
            Stdio::piped(),
        );
        Self { child, url }
    }

    /// SIGKILL; what it logged.
    fn kill9(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut logged = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut logged);
        }
        logged
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn post(url: &str, l: &Logins, text: &str) -> (u16, Vec<u8>) {
    let (path, body) = l.small_turn(text);
    let mut req = http::Request::post(format!("{url}{path}"));
    for (k, v) in json_headers() {
        req = req.header(k, v);
    }
    let req = req
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    // The first life's request loses its gateway: no answer is an answer too.
    let Ok(res) = http_client().request(req).await else {
        return (0, Vec::new());
    };
    let status = res.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(res.into_body())
        .await
        .map(|c| c.to_bytes().to_vec())
        .unwrap_or_default();
    (status, bytes)
}

async fn killed_right_after_a_refresh(client: Client) {
    let l = Logins::new(client);
    let sim = l.sim().quota_step(0.0).start().await.unwrap();
    let [a, b] = l.accounts();
    // The first login's access token is about to expire: the first request refreshes it.
    l.log_in(&sim, a, Some(60));
    l.log_in(&sim, b, None);
    let before = l.refresh_token(a);
    let store = format!(
        "backend = \"redb\"\npath = {:?}",
        l.dir.path().join("relay.redb").display().to_string()
    );
    let config = l.dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!("listen = \"127.0.0.1:0\"\n{}", l.config(&sim, &store)),
    )
    .unwrap();

    // First life: the refreshed request reaches the backend, whose answer is held; the
    // gateway is killed then.
    let gw = Process::start(&config);
    let hold = sim.hold_streams();
    let url = gw.url.clone();
    let waiting = {
        let l = Logins::new(client);
        tokio::spawn(async move { post(&url, &l, "first").await })
    };
    let mut arrivals = sim.arrivals();
    let reached = arrivals.wait_for(|_| {
        sim.requests()
            .iter()
            .any(|r| r.account.as_deref() == Some(a))
    });
    tokio::time::timeout(Duration::from_secs(20), reached)
        .await
        .expect("the refreshed request reached the backend")
        .expect("the simulator runs");
    assert_eq!(sim.refreshes(a), 1);
    let logged = gw.kill9();
    drop(hold);
    let _ = waiting.await;
    assert!(logged.contains("login refreshed"), "{logged}");

    // What the killed gateway saved: the rotated pair, in a private file.
    let rotated = l.refresh_token(a);
    assert_ne!(
        rotated, before,
        "the rotated pair was in the file before it was used"
    );
    for token in [&before, &rotated] {
        assert!(
            !logged.contains(token.as_str()),
            "a token in the log: {logged}"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(l.path(a)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // Second life: the pair works, and refreshes again (with the rotated refresh token: the
    // old one would be refused as reused, and the login lost).
    let gw = Process::start(&config);
    sim.expire_access(a);
    sim.clear_requests();
    let (status, reply) = post(&gw.url, &l, "second").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert!(completed(&reply));
    assert_eq!(sim.refreshes(a), 2);
    assert!(
        sim.requests()
            .iter()
            .filter(|r| r.rejected.is_none())
            .all(|r| r.account.as_deref() == Some(a)),
        "served by the same login"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_gateway_killed_right_after_a_refresh_restarts_with_a_working_pair() {
    killed_right_after_a_refresh(Client::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_gateway_killed_right_after_a_refresh_restarts_with_a_working_pair() {
    killed_right_after_a_refresh(Client::Claude).await;
}
