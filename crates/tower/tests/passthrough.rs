//! Nothing changes when nothing applies: real client captures pass through byte for byte,
//! streams are not buffered, and a broken store never hurts a request.

mod support;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use support::{Stack, full};
use tower::ServiceExt;

fn fixtures() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("fixtures dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "json") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/clients");
    let mut out = Vec::new();
    walk(&root, &mut out);
    out.sort();
    assert!(out.len() >= 15, "fixtures found: {}", out.len());
    out
}

/// `body` with its tools declared: a hand-made capture with `tool_use` blocks but no `tools`
/// gets one tool per name it calls, since the Messages API (and the upstream double)
/// refuses tool blocks in a request without tools, and Claude Code always declares them.
fn with_tools(body: &serde_json::Value) -> serde_json::Value {
    let mut body = body.clone();
    let mut names: Vec<serde_json::Value> = Vec::new();
    for b in body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_use")
    {
        if !names.contains(&b["name"]) {
            names.push(b["name"].clone());
        }
    }
    if body.get("tools").is_none() && !names.is_empty() {
        let tools: Vec<serde_json::Value> = names
            .into_iter()
            .map(|n| serde_json::json!({"name": n, "input_schema": {"type": "object"}}))
            .collect();
        body["tools"] = serde_json::Value::Array(tools);
    }
    body
}

fn capture_request(path: &Path) -> (Request<support::Body>, Bytes) {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("read fixture")).expect("fixture JSON");
    let body = match v.get("body") {
        Some(serde_json::Value::Null) | None => Bytes::new(),
        Some(b) => Bytes::from(serde_json::to_vec(&with_tools(b)).expect("serialize")),
    };
    let mut builder = Request::builder()
        .method(v["method"].as_str().unwrap_or("POST"))
        .uri(v["path"].as_str().unwrap_or("/"));
    for (name, value) in v["headers"].as_object().into_iter().flatten() {
        if name == "content-length" {
            builder = builder.header(name, body.len().to_string());
        } else if let Some(value) = value.as_str() {
            builder = builder.header(name, value);
        }
    }
    let mut req = builder.body(full(body.clone())).expect("request");
    req.extensions_mut()
        .insert(context_relay_tower::ComboName::new("codex-relay"));
    (req, body)
}

#[tokio::test]
async fn every_capture_passes_through_byte_identical() {
    let stack = Stack::new();
    for path in fixtures() {
        let (req, body) = capture_request(&path);
        let headers = req.headers().clone();
        let before = stack.upstream.seen().len();
        // Twice: the first request of a session takes the slow path (affinity unknown),
        // the second the fast path.
        for _ in 0..2 {
            let (req, _) = capture_request(&path);
            let (status, _) = stack.send(req).await;
            assert_eq!(status, StatusCode::OK, "{}", path.display());
        }
        stack.idle().await;
        let seen = stack.upstream.seen();
        assert_eq!(seen.len(), before + 2, "{}", path.display());
        for s in &seen[before..] {
            assert_eq!(s.body, body, "{}: body changed", path.display());
            assert_eq!(s.headers, headers, "{}: headers changed", path.display());
        }
    }
    assert!(stack.upstream.summaries().is_empty());
}

#[tokio::test]
async fn streaming_responses_are_not_buffered() {
    let stack = Stack::new();
    stack.upstream.set_percent("acct-a", 88.0); // even a qualifying turn streams through
    let tx = stack.upstream.stream_next_turn();
    let res = stack
        .svc
        .clone()
        .oneshot(support::chat("s1", "k1", 2))
        .await
        .unwrap();
    let mut body = res.into_body();
    tx.send(Ok(http_body::Frame::data(Bytes::from_static(
        b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
    ))))
    .await
    .unwrap();
    // The first frame arrives while the upstream has not finished.
    let first = body.frame().await.expect("a frame").expect("ok");
    assert!(first.data_ref().unwrap().starts_with(b"data: "));
    tx.send(Ok(http_body::Frame::data(Bytes::from_static(
        b"data: [DONE]\n\n",
    ))))
    .await
    .unwrap();
    drop(tx);
    while body.frame().await.is_some() {}
    stack.idle().await;
    assert_eq!(stack.upstream.summaries().len(), 1);
}
