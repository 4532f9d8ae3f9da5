//! Where a request goes: new sessions fill the first account and bound ones stay (over
//! loopback), and a later target's model written where the first one's was.

use super::*;

/// End to end (a gateway server, the simulated provider, a real client): new sessions fill the
/// first available account, a bound session stays on its account.
#[tokio::test]
async fn fill_first_and_sticky_sessions_over_loopback() {
    use context_relay_sim::SimProvider;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .account("acct-b", "key-b")
        .start()
        .await
        .unwrap();
    let config = Config::from_toml_str(
        &format!(
            r#"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "{}"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key = "key-b"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
"#,
            sim.base_url()
        ),
        |_| None,
    )
    .unwrap();
    let gateway = crate::Gateway::new(config).unwrap();
    let server = gateway.spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http();
    let post = |session: Option<&str>| {
        let mut b = Request::post(format!("{}/v1/chat/completions", server.url()))
            .header("authorization", "Bearer client-key");
        if let Some(s) = session {
            b = b.header("session-id", s);
        }
        let req = b
            .body(Full::new(Bytes::from_static(
                br#"{"model":"codex-relay","messages":[{"role":"user","content":"hi"}]}"#,
            )))
            .unwrap();
        let client = client.clone();
        async move { client.request(req).await.unwrap().status() }
    };
    let served = || -> Vec<String> {
        sim.requests()
            .iter()
            .map(|r| r.account.clone().unwrap_or_default())
            .collect()
    };
    // s1 lands on acct-b: acct-a answers 429 once.
    sim.set_used("acct-a", 100.0);
    assert_eq!(post(Some("s1")).await, 200);
    assert_eq!(served(), ["acct-a", "acct-b"]);
    // acct-a recovers (its reset passed).
    sim.set_used("acct-a", 0.0);
    gateway
        .pools
        .get("codex")
        .unwrap()
        .mark_exhausted(0, std::time::UNIX_EPOCH);
    sim.clear_requests();
    // s1 stays on acct-b; new sessions and session-less requests fill acct-a first.
    assert_eq!(post(Some("s1")).await, 200);
    assert_eq!(post(Some("s2")).await, 200);
    assert_eq!(post(None).await, 200);
    assert_eq!(post(Some("s1")).await, 200);
    assert_eq!(served(), ["acct-b", "acct-a", "acct-a", "acct-b"]);
    server.shutdown().await.unwrap();
    sim.shutdown().await;
}

/// A body ComboService rewrote: a later target's model goes where the first one's was
/// written, every other byte (a nested `"model"` included) as the client sent it.
#[tokio::test]
async fn a_later_target_gets_its_model_where_the_first_was_written() {
    use crate::collect::Buffered;
    use crate::model::{find_model, rewrite_model};

    let (p, log) = (pools(), Log::default());
    let client = br#"{ "model" : "relay-combo", "tools": [{"model": "kept"}], "n": 1.50 }"#;
    let field = find_model(client).unwrap();
    let (body, written) = rewrite_model(
        Buffered::Chunk(Bytes::from_static(client)),
        &field,
        &Arc::from("gpt-5.5"),
    );
    let mut req = request("s", &[("codex", "gpt-5.5"), ("claude", "claude-x")]);
    *req.body_mut() = Full::new(body);
    let targets = Routing::targets_mut(req.extensions_mut()).unwrap();
    targets.written = Some(written);
    let res = call(&p, &log, &["a", "b"], "10", req).await;
    assert_eq!(res.status(), 200);
    let log = log.lock().unwrap();
    assert_eq!(
        &log[0].1[..],
        br#"{ "model" : "gpt-5.5", "tools": [{"model": "kept"}], "n": 1.50 }"#
    );
    assert_eq!(
        &log[2].1[..],
        br#"{ "model" : "claude-x", "tools": [{"model": "kept"}], "n": 1.50 }"#
    );
}

/// A large turn ComboService kept in its chunks: its first target's name is a chunk of its
/// own, and a later target's goes in its place; every other chunk goes as it came.
#[tokio::test]
async fn a_later_target_of_a_body_kept_in_chunks_gets_its_model_in_place() {
    use crate::chunks::Chunks;
    use crate::model::{find_model, rewrite_model_in_chunks};

    let (p, log) = (pools(), Log::default());
    let pieces: [&'static [u8]; 3] = [
        br#"{ "model" : "relay-combo", "tools": [{"model""#,
        br#": "kept"}], "input": ""#,
        br#"history" }"#,
    ];
    let whole = pieces.concat();
    let field = find_model(&whole).unwrap();
    let mut chunks = Chunks::default();
    for piece in pieces {
        chunks.push(Bytes::from_static(piece));
    }
    let (body, written) = rewrite_model_in_chunks(chunks, &field, &Arc::from("gpt-5.5"));
    let req = request("s", &[("codex", "gpt-5.5"), ("claude", "claude-x")]);
    // The later target's body is written in place: still in chunks, not joined and searched.
    let later = &Routing::targets(req.extensions()).unwrap().targets[1];
    let retargeted = super::body_for_target(&body, later, Some(&written), Some("gpt-5.5"));
    assert_eq!(retargeted.count(), body.count());
    let mut req = req.map(|_| body);
    let targets = Routing::targets_mut(req.extensions_mut()).unwrap();
    targets.written = Some(written);
    let res = call(&p, &log, &["a", "b"], "10", req).await;
    assert_eq!(res.status(), 200);
    let log = log.lock().unwrap();
    let sent = String::from_utf8_lossy(&whole).into_owned();
    assert_eq!(
        String::from_utf8_lossy(&log[0].1),
        sent.replacen("relay-combo", "gpt-5.5", 1)
    );
    assert_eq!(
        String::from_utf8_lossy(&log[2].1),
        sent.replacen("relay-combo", "claude-x", 1)
    );
}
