//! The gateway listens with an accept queue of [`LISTEN_BACKLOG`] (clamped by the kernel to
//! `net.core.somaxconn`), not tokio's default of 1024: a burst of connections beyond the
//! queue meets SYN cookies, and a cookie that fails validation resets a connection the client
//! believed open. Linux shows a listener's queue length as its `Send-Q` in `ss -lnt`.

use std::process::Command;

use context_relay_gateway::{Gateway, LISTEN_BACKLOG};
use context_relay_testkit::harness::{config, spawn};

/// The accept queue length `ss` shows for the listener on `port`.
fn backlog_of(port: u16) -> u32 {
    let out = Command::new("ss")
        .args(["-lntH", &format!("sport = :{port}")])
        .output()
        .expect("`ss` (iproute2) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().expect("ss lists the listener");
    // State Recv-Q Send-Q Local Peer
    line.split_whitespace()
        .nth(2)
        .and_then(|q| q.parse().ok())
        .expect("a Send-Q column")
}

#[tokio::test]
async fn the_gateway_listens_with_its_own_accept_queue() {
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096);
    let expected = LISTEN_BACKLOG.min(somaxconn);
    assert!(
        expected > 1024,
        "this machine's somaxconn ({somaxconn}) cannot tell the two apart"
    );
    let gateway = Gateway::new(config("http://127.0.0.1:9/v1", "backend = \"memory\"")).unwrap();
    let (_gateway, server) = spawn(gateway).await;
    assert_eq!(backlog_of(server.addr().port()), expected);
    server.shutdown().await.unwrap();
}
