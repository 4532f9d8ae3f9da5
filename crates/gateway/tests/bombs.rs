//! Decompression bombs do not stall the gateway: bodies are decoded off the async workers, so
//! `/healthz` keeps answering at once while they decode.

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_gateway::Gateway;
use context_relay_testkit::harness::{CodexGateway, http_client, spawn};
use http::Request;
use http_body_util::{BodyExt, Full};

const LIMIT: usize = 8 << 20;
const BOMBS: usize = 12;

/// A brotli body of a few hundred bytes that decodes to `LIMIT` bytes: a small JSON request,
/// then padding that no reader of the gateway goes through (the work measured is the
/// decoding; the provider would refuse the trailing bytes).
fn bomb() -> Vec<u8> {
    let mut json = br#"{"model":"codex-relay","input":"hi"}"#.to_vec();
    json.resize(LIMIT, b'a');
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 11, 22);
        w.write_all(&json).unwrap();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_while_bombs_decode() {
    // No provider listens there: each bomb, once decoded, is a quick 502.
    let config = CodexGateway {
        accounts: &["acct-a"],
        top: &format!("max_request_bytes = {LIMIT}"),
        store: "backend = \"memory\"",
        provider: "quota = \"none\"",
    }
    .config("http://127.0.0.1:9/v1");
    let (_gateway, server) = spawn(Gateway::new(config).unwrap()).await;
    let bomb = Bytes::from(bomb());
    assert!(bomb.len() < 4096, "{} bytes", bomb.len());

    let client = http_client();
    let mut bombs = Vec::new();
    for _ in 0..BOMBS {
        let req = Request::post(format!("{}/v1/responses", server.url()))
            .header("content-type", "application/json")
            .header("content-encoding", "br")
            .body(Full::new(bomb.clone()))
            .unwrap();
        let client = client.clone();
        bombs.push(tokio::spawn(async move {
            let res = client.request(req).await.unwrap();
            res.into_body().collect().await.ok();
        }));
    }
    let probe = http_client();
    let mut worst = Duration::ZERO;
    let mut probes = 0;
    let started = Instant::now();
    while bombs.iter().any(|b| !b.is_finished()) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the bombs never finished"
        );
        let at = Instant::now();
        let res = probe
            .request(
                Request::get(format!("{}/healthz", server.url()))
                    .body(Full::default())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        res.into_body().collect().await.unwrap();
        worst = worst.max(at.elapsed());
        probes += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for b in bombs {
        b.await.unwrap();
    }
    eprintln!("{probes} probes; the slowest /healthz took {worst:?}");
    assert!(probes > 1);
    assert!(
        worst < Duration::from_millis(100),
        "/healthz took {worst:?} while bombs decoded"
    );
}
