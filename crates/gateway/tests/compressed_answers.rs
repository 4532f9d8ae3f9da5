//! A provider that compresses its answers (the APIs behind their CDN gzip JSON answers for a
//! client that accepts it, and the agent clients all do): the gateway reads every answer (its
//! usage; for a session the relay tracks, whether the turn completed and what a refusal
//! blames), so it asks for them uncompressed.

use std::io::Read;

use bytes::Bytes;
use context_relay_sim::SimProvider;
use context_relay_testkit::clients::contains;
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY, wire_bytes};
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

/// What Claude Code and the SDKs send.
const ACCEPT: (&str, &str) = ("accept-encoding", "gzip, deflate, br, zstd");

/// One non-streamed turn of `conv` (Claude Code's shape) as a client that accepts gzip reads
/// it: the status, the `x-context-relay` header; a complete answer joins the history with the
/// next prompt.
async fn turn(h: &Harness, conv: &mut Conversation) -> (StatusCode, Option<String>) {
    let mut req = http::Request::post(h.url(0, conv.client.path()));
    for (k, v) in &conv.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(Full::new(Bytes::from(wire_bytes(&conv.body))))
        .unwrap();
    let res = h.client.request(req).await.unwrap();
    let (status, acted) = (res.status(), res.headers().get("x-context-relay").cloned());
    let gzip = res
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v == "gzip");
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let mut text = Vec::new();
    if gzip {
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut text)
            .unwrap();
    } else {
        text = bytes.to_vec();
    }
    if status == 200 {
        let answer: Value = serde_json::from_slice(&text).expect("a JSON answer");
        assert_eq!(answer["type"], "message", "{answer}");
        let messages = conv.body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": answer["content"]}));
        messages.push(json!({"role": "user", "content": "Go on with the next step."}));
    }
    let acted = acted.and_then(|v| v.to_str().ok().map(str::to_owned));
    (status, acted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_crosses_the_switch_when_the_provider_compresses_its_answers() {
    let h = Harness::start(1, MEMORY, SimProvider::builder().gzip_answers(true)).await;
    let [a, b, _] = Client::Claude.accounts();
    let session = "compressed-answers";
    let mut conv = Conversation::new(Client::Claude, session);
    conv.body["stream"] = json!(false);
    conv.headers.push((ACCEPT.0.into(), ACCEPT.1.into()));
    // A second line names more codings: it goes too.
    conv.headers.push((ACCEPT.0.into(), "br;q=0.9".into()));
    // Turns 1–3 on the first account (a handoff is written at 90 %), which is then used up.
    for _ in 1..=3 {
        assert_eq!(turn(&h, &mut conv).await, (StatusCode::OK, None));
    }
    h.idle().await;
    assert_eq!(h.handoffs(session).await, 1);
    h.sim.set_used(a, 100.0);
    h.sim.clear_requests();
    for n in 4..=6 {
        let expected = if n == 4 {
            "injected, scrubbed"
        } else {
            "scrubbed"
        };
        let (status, acted) = turn(&h, &mut conv).await;
        assert_eq!(status, StatusCode::OK, "turn {n}");
        assert_eq!(acted.as_deref(), Some(expected), "turn {n}");
        h.idle().await;
    }
    let turns = h.turns();
    let to_b: Vec<_> = turns
        .iter()
        .filter(|r| r.account.as_deref() == Some(b))
        .collect();
    assert_eq!(
        to_b.len(),
        3,
        "{:?}",
        turns.iter().map(|r| &r.account).collect::<Vec<_>>()
    );
    assert!(to_b.iter().all(|r| r.rejected.is_none()), "nothing refused");
    assert!(
        turns.iter().all(|r| {
            let lines: Vec<_> = r.headers.get_all("accept-encoding").iter().collect();
            lines == ["identity"]
        }),
        "a session's answers are asked for uncompressed"
    );
    let injected = to_b
        .iter()
        .filter(|r| contains(&r.body, HANDOFF_TAG))
        .count();
    assert_eq!(injected, 1, "exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_is_asked_for_uncompressed() {
    let h = Harness::start(1, MEMORY, SimProvider::builder().gzip_answers(true)).await;
    // No session: nothing for the relay to track, and the answer's usage is read all the same.
    let body = json!({"model": "codex-relay", "messages": [{"role": "user", "content": "hi"}]});
    let req = http::Request::post(h.url(0, "/v1/chat/completions"))
        .header("content-type", "application/json")
        .header(ACCEPT.0, "gzip")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let res = h.client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers().get("content-encoding").is_none());
    let answer = res.into_body().collect().await.unwrap().to_bytes();
    let answer: Value = serde_json::from_slice(&answer).expect("plain JSON");
    assert!(answer["usage"].is_object(), "{answer}");
    assert_eq!(h.turns()[0].headers["accept-encoding"], "identity");
}
