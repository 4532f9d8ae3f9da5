use std::convert::Infallible;
use std::io::Write;

use http_body_util::BodyExt;

use tower::{ServiceExt, service_fn};

use super::*;

fn config() -> Config {
    Config::from_toml_str(
        r#"
[[providers]]
name = "codex"
base_url = "http://127.0.0.1:9/v1"
[[providers.accounts]]
id = "a"
api_key = "k"
[[providers]]
name = "anthropic"
base_url = "http://127.0.0.1:9/v1"
[[providers.accounts]]
id = "a"
api_key = "k"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5", "anthropic/claude"]
[[combos]]
name = "plain"
strategy = "priority"
targets = ["anthropic/claude"]
"#,
        |_| None,
    )
    .unwrap()
}

type Seen = (Request<()>, Bytes);

async fn run(req: Request<Full<Bytes>>) -> (StatusCode, Bytes, Option<Seen>) {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s2 = seen.clone();
    let svc = ComboLayer::new(Routes::from_config(&config()), 1024).layer(service_fn(
        move |req: Request<Full<Bytes>>| {
            let seen = s2.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                *seen.lock().unwrap() = Some((Request::from_parts(parts, ()), bytes));
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            }
        },
    ));
    let res = svc.oneshot(req).await.unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let seen = seen.lock().unwrap().take();
    (status, body, seen)
}

fn post(path: &str, body: &'static [u8]) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("content-length", body.len())
        .body(Full::new(Bytes::from_static(body)))
        .unwrap()
}

#[tokio::test]
async fn combo_sets_extensions_and_rewrites() {
    let (status, _, seen) = run(post(
        "/v1/chat/completions",
        br#"{"model": "codex-relay", "messages":[]}"#,
    ))
    .await;
    assert_eq!(status, 200);
    let (req, body) = seen.unwrap();
    assert_eq!(&body[..], br#"{"model": "gpt-5.5", "messages":[]}"#);
    assert_eq!(
        req.headers()["content-length"],
        body.len().to_string().as_str()
    );
    assert_eq!(
        req.extensions().get::<ComboName>(),
        Some(&ComboName::new("codex-relay"))
    );
    let t = req.extensions().get::<RouteTargets>().unwrap();
    assert_eq!(t.0.len(), 2);
    assert_eq!(&*t.0[1].model, "claude");
}

#[tokio::test]
async fn priority_combo_and_direct_targets_set_no_combo_name() {
    let (_, _, seen) = run(post("/v1/messages", br#"{"model":"plain"}"#)).await;
    assert!(seen.unwrap().0.extensions().get::<ComboName>().is_none());
    let (_, _, seen) = run(post("/v1/messages", br#"{"model":"anthropic/claude-x/y"}"#)).await;
    let (req, body) = seen.unwrap();
    assert_eq!(&body[..], br#"{"model":"claude-x/y"}"#);
    assert!(req.extensions().get::<ComboName>().is_none());
    assert_eq!(
        &*req.extensions().get::<RouteTargets>().unwrap().0[0].provider,
        "anthropic"
    );
}

#[tokio::test]
async fn errors_in_the_api_shape() {
    let (status, body, seen) = run(post("/v1/responses", b"{not json")).await;
    assert_eq!(status, 400);
    assert!(seen.is_none());
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("JSON"));

    let (status, body, _) = run(post("/v1/messages", br#"{"messages":[]}"#)).await;
    assert_eq!(status, 400);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["type"], "error");
    assert!(v["error"]["message"].as_str().unwrap().contains("model"));

    let (status, body, _) = run(post("/v1/messages", br#"{"model":"gpt-4"}"#)).await;
    assert_eq!(status, 404);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "not_found_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("codex-relay")
    );
}

#[tokio::test]
async fn too_large_bodies() {
    // Declared length over the limit.
    let big: &'static [u8] = Box::leak(vec![b' '; 2000].into_boxed_slice());
    let (status, _, seen) = run(post("/v1/responses", big)).await;
    assert_eq!(status, 413);
    assert!(seen.is_none());
    // Undeclared length over the limit.
    let req = Request::post("/v1/responses")
        .body(Full::new(Bytes::from_static(big)))
        .unwrap();
    assert_eq!(run(req).await.0, 413);
    // Compressed under the limit, decoded over it.
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&[b' '; 5000]).unwrap();
    let gz = e.finish().unwrap();
    let req = Request::post("/v1/responses")
        .header("content-encoding", "gzip")
        .body(Full::new(Bytes::from(gz)))
        .unwrap();
    assert_eq!(run(req).await.0, 413);
}

#[tokio::test]
async fn compressed_bodies_are_forwarded_decoded() {
    let plain = br#"{"model":"codex-relay","input":"x"}"#;
    let z =
        ruzstd::encoding::compress_to_vec(&plain[..], ruzstd::encoding::CompressionLevel::Fastest);
    let req = Request::post("/v1/responses")
        .header("content-encoding", "zstd")
        .header("content-length", z.len())
        .body(Full::new(Bytes::from(z)))
        .unwrap();
    let (status, _, seen) = run(req).await;
    assert_eq!(status, 200);
    let (req, body) = seen.unwrap();
    assert_eq!(&body[..], br#"{"model":"gpt-5.5","input":"x"}"#);
    assert!(req.headers().get("content-encoding").is_none());
    assert_eq!(
        req.headers()["content-length"],
        body.len().to_string().as_str()
    );

    let req = Request::post("/v1/responses")
        .header("content-encoding", "lz4")
        .body(Full::new(Bytes::from_static(plain)))
        .unwrap();
    assert_eq!(run(req).await.0, 415);
}

#[test]
fn model_ids() {
    let ids = Routes::from_config(&config()).model_ids();
    let names: Vec<&str> = ids.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(
        names,
        ["codex-relay", "plain", "codex/gpt-5.5", "anthropic/claude"]
    );
}
