//! The gateway kept healthy and observable: bad bodies, warm-up, models and metrics, an
//! unreachable upstream, graceful shutdown, and the binary's configuration check.

use super::*;

#[tokio::test]
async fn malformed_and_oversized_bodies_leave_the_gateway_healthy() {
    let env = setup().await;
    let (status, body) = env
        .post("/v1/chat/completions", None, "{\"model\": \"codex-relay\",")
        .await;
    assert_eq!(status, 400);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");

    let (status, body) = env.post("/v1/messages", None, "[1,2]").await;
    assert_eq!(status, 400);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["type"], "error");

    let (status, _) = env
        .post("/v1/chat/completions", None, r#"{"model":"nope"}"#)
        .await;
    assert_eq!(status, 404);

    // 9 MiB (the length is declared; the undeclared case is covered in combo.rs).
    let big = format!(
        "{{\"model\":\"codex-relay\",\"input\":\"{}\"}}",
        "a".repeat(9 << 20)
    );
    let (status, body) = env.post("/v1/responses", None, &big).await;
    assert_eq!(status, 413);
    assert!(std::str::from_utf8(&body).unwrap().contains("8388608"));

    assert!(
        env.sim.requests().is_empty(),
        "nothing reached the provider"
    );
    let res = env
        .send(
            Request::get(env.url("/healthz"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    // And it still proxies.
    assert_eq!(env.post("/v1/chat/completions", None, CHAT).await.0, 200);
}

#[tokio::test]
async fn warm_up_models_metrics_and_unknown_routes() {
    let env = setup().await;
    let res = env
        .send(
            Request::builder()
                .method(Method::HEAD)
                .uri(env.url("/"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    let res = env
        .send(
            Request::get(env.url("/v1/models"))
                .header("x-api-key", "k")
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    let v: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "codex-relay",
            "claude-relay",
            "codex/gpt-5.5",
            "anthropic/claude-sonnet-4-5"
        ]
    );
    let res = env
        .send(
            Request::get(env.url("/metrics"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    let res = env
        .send(
            Request::get(env.url("/v2/nothing"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 404);
    let res = env
        .send(
            Request::get(env.url("/v1/chat/completions"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 405);
}

#[tokio::test]
async fn unreachable_upstream_is_a_502() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let config = Config::from_toml_str(&config_text(&format!("http://{addr}/v1"), ""), |_| {
        Some("key-b".into())
    })
    .unwrap();
    // No provider: a gateway alone.
    let (_gateway, server) = spawn(Gateway::new(config).unwrap()).await;
    let res = http_client()
        .request(
            Request::post(format!("{}/v1/messages", server.url()))
                .body(Full::new(Bytes::from_static(
                    br#"{"model":"claude-relay"}"#,
                )))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    let v: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["type"], "error");
    // The message names the provider and what failed, not its address (that is logged).
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not be reached"), "{message}");
    assert!(!message.contains(&addr.to_string()), "{message}");
}

#[tokio::test]
async fn graceful_shutdown_lets_an_open_stream_finish() {
    let env = setup().await;
    let hold = env.sim.hold_streams();
    let res = env
        .send(
            Request::post(env.url("/v1/messages"))
                .body(Full::new(Bytes::from_static(
                    br#"{"model":"claude-relay","stream":true,"max_tokens":64,"messages":[]}"#,
                )))
                .unwrap(),
        )
        .await;
    assert_eq!(res.status(), 200);
    let Harness {
        sim, mut gateways, ..
    } = env.0;
    let (_gateway, server) = gateways.remove(0);
    let shutdown = tokio::spawn(server.shutdown());
    hold.release();
    let out = res.into_body().collect().await.unwrap().to_bytes();
    assert!(std::str::from_utf8(&out).unwrap().contains("message_stop"));
    shutdown.await.unwrap().unwrap();
    sim.shutdown().await;
}

fn temp_config(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cr-gw-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn check(path: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_context-relay-gateway"))
        .arg("--config")
        .arg(path)
        .arg("--check")
        .env_remove("SIM_KEY_B")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn binary_check_reports_config_errors_clearly() {
    let ok = config_text("http://127.0.0.1:9/v1", "")
        .replace("api_key_env = \"SIM_KEY_B\"", "api_key = \"k\"");
    let (success, text) = check(&temp_config("ok", &ok));
    assert!(success, "{text}");
    assert!(
        text.contains("valid (2 providers, 3 accounts, 2 combos)"),
        "{text}"
    );

    let (success, text) = check(&temp_config(
        "env",
        &config_text("http://127.0.0.1:9/v1", ""),
    ));
    assert!(!success);
    assert!(
        text.contains("SIM_KEY_B") && text.contains("not set"),
        "{text}"
    );

    let (success, text) = check(&temp_config("key", &format!("{ok}\nlisten_on = \"x\"\n")));
    assert!(!success);
    assert!(text.contains("unknown field `listen_on`"), "{text}");

    let (success, text) = check(std::path::Path::new("/nonexistent/gateway.toml"));
    assert!(!success);
    assert!(text.contains("/nonexistent/gateway.toml"), "{text}");
}
