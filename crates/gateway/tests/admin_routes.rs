//! The admin routes: every answer carries the console's headers (no caching, a content
//! security policy), and the console's event stream (`/admin/events`) ends when a reload
//! changes or removes the admin token: a reader signed in with the old token sees nothing from
//! then on.

use std::time::Duration;

use bytes::Bytes;
use context_relay_gateway::Gateway;
use context_relay_gateway::config::Config;
use context_relay_testkit::harness::{http_client, spawn};
use http::Request;
use http_body_util::{BodyExt, Full};

fn config(admin: Option<&str>) -> Config {
    let admin = admin.map_or(String::new(), |t| format!("admin_token = \"{t}\"\n"));
    let text = format!(
        "{admin}[store]\nbackend = \"memory\"\n[[providers]]\nname = \"codex\"\n\
         base_url = \"http://127.0.0.1:9/v1\"\n  [[providers.accounts]]\n  id = \"a\"\n  \
         api_key = \"k\"\n[[combos]]\nname = \"c\"\ntargets = [\"codex/gpt-5.5\"]\n"
    );
    Config::from_toml_str(&text, |_| None).unwrap()
}

#[tokio::test]
async fn the_event_stream_ends_when_a_reload_changes_or_removes_the_admin_token() {
    for next in [Some("two"), None] {
        let (gateway, server) = spawn(Gateway::new(config(Some("one"))).unwrap()).await;
        let req = Request::get(format!("{}/admin/events", server.url()))
            .header("authorization", "Bearer one")
            .body(Full::<Bytes>::default())
            .unwrap();
        let res = http_client().request(req).await.unwrap();
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        // Open: nothing to read yet (the first keep-alive comes after 15 s).
        assert!(
            tokio::time::timeout(Duration::from_millis(200), body.frame())
                .await
                .is_err()
        );
        let _reloaded = gateway.reload(config(next)).await.unwrap();
        let rest = tokio::time::timeout(Duration::from_secs(10), body.collect())
            .await
            .unwrap_or_else(|_| panic!("the stream outlived the admin token ({next:?})"));
        assert!(rest.is_ok());
        server.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn a_reload_that_keeps_the_admin_token_keeps_the_stream() {
    let (gateway, server) = spawn(Gateway::new(config(Some("one"))).unwrap()).await;
    let req = Request::get(format!("{}/admin/events", server.url()))
        .header("authorization", "Bearer one")
        .body(Full::<Bytes>::default())
        .unwrap();
    let mut body = http_client().request(req).await.unwrap().into_body();
    let _reloaded = gateway.reload(config(Some("one"))).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), body.frame())
            .await
            .is_err(),
        "the stream ended though the token stayed"
    );
    drop(body);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_admin_answer_carries_the_consoles_headers() {
    let (_gateway, server) = spawn(Gateway::new(config(Some("one"))).unwrap()).await;
    let client = http_client();
    for (path, token, status) in [
        ("/admin/handoffs", Some("one"), 200),
        ("/admin/accounts", Some("one"), 200),
        ("/admin/usage", Some("one"), 200),
        ("/admin/handoffs", None, 401),
        ("/admin/accounts", Some("two"), 401),
    ] {
        let mut req = Request::get(format!("{}{path}", server.url()));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let res = client
            .request(req.body(Full::<Bytes>::default()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), status, "{path}");
        let h = res.headers();
        assert_eq!(h["cache-control"], "no-store", "{path} {status}");
        assert!(
            h["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("default-src 'none'"),
            "{path} {status}"
        );
        assert_eq!(h["content-type"], "application/json", "{path} {status}");
    }
    server.shutdown().await.unwrap();
}
