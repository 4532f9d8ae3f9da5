//! Gemini clients through the gateway, relay included: real gateways on 127.0.0.1:0, a real
//! HTTP client sending what `google-genai` 3.6.1 sends (the captures in
//! `tests/fixtures/gemini/`, rebuilt to a real coding session's size), and the strict simulated
//! provider, which mints `thoughtSignature`s per account, refuses another account's with the
//! real 400, and answers a used-up account with the real 429 `RESOURCE_EXHAUSTED`.

use std::path::Path;

use bytes::Bytes;
use context_relay_gateway::Gateway;
use context_relay_gateway::config::Config;
use context_relay_sim::SimProvider;
use context_relay_testkit::handoff::{HANDOFF_TAG, SUMMARY_NEEDLE, summary_reply};
use context_relay_testkit::harness::{Harness, http_client, key_of, start_sim};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

const CLIENT_KEY: &str = "ck-genai-client";

/// A capture of `tests/fixtures/gemini/`.
fn capture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gemini")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

/// The first request of the capture with a coding agent's system instruction (about 27 KB, as
/// coding clients send). `google-genai` sends no session header: the session is the
/// fingerprint of the conversation's start.
fn first_body() -> Value {
    let mut body = capture("01-generate_content.json")["body"].clone();
    let mut system = String::from("You are a concise weather assistant. Answer in one sentence. ");
    while system.len() < 27_000 {
        system.push_str(
            "Keep edits minimal, explain each change, and run the tests before answering. ",
        );
    }
    body["systemInstruction"]["parts"][0]["text"] = json!(system);
    body
}

/// The headers `google-genai` sends (its key masked in the capture, the client's key here).
fn headers() -> Vec<(String, String)> {
    let c = capture("01-generate_content.json");
    c["headers"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.to_ascii_lowercase().as_str(),
                "host" | "connection" | "content-length" | "accept-encoding" | "x-goog-api-key"
            )
        })
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

fn config(base_url: &str) -> Config {
    let text = format!(
        r#"
[store]
backend = "memory"
[relay]
handoff_providers = ["*"]
[[clients]]
name = "genai"
key = "{CLIENT_KEY}"
[[providers]]
name = "gemini"
base_url = "{base_url}"
auth = "x-goog-api-key"
quota = "codex"
  [[providers.accounts]]
  id = "acct-g1"
  api_key = "{k1}"
  [[providers.accounts]]
  id = "acct-g2"
  api_key = "{k2}"
[[providers]]
name = "down"
base_url = "http://127.0.0.1:{closed}/v1beta"
auth = "x-goog-api-key"
  [[providers.accounts]]
  id = "acct-down"
  api_key = "key-down"
[[combos]]
name = "gemini-relay"
targets = ["gemini/gemini-2.5-flash"]
[[combos]]
name = "gemini3"
targets = ["gemini/gemini-3-pro"]
[[combos]]
name = "fallback"
targets = ["down/gemini-3-pro", "gemini/gemini-2.5-pro"]
"#,
        closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port(),
        k1 = key_of("acct-g1"),
        k2 = key_of("acct-g2"),
    );
    Config::from_toml_str(&text, |_| None).expect("config")
}

/// The harness over [`config`] and a simulator with the two Gemini accounts.
async fn setup() -> Harness {
    let sim = start_sim(
        SimProvider::builder()
            .quota_step(30.0)
            .summary_reply(SUMMARY_NEEDLE, summary_reply()),
        &["acct-g1", "acct-g2"],
    )
    .await;
    let gateway = Gateway::new(config(&sim.base_url())).expect("gateway");
    Harness::serve(sim, gateway).await
}

async fn post(url: &str, headers: &[(String, String)], body: &Value) -> (StatusCode, Bytes) {
    let mut b = Request::post(url);
    for (k, v) in headers {
        b = b.header(k.as_str(), v.as_str());
    }
    let res = http_client()
        .request(b.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
        .expect("gateway answers");
    let status = res.status();
    (status, res.into_body().collect().await.unwrap().to_bytes())
}

/// The model's `content` of a JSON reply, or of the events of an SSE reply merged (parts in
/// order), as `google-genai` rebuilds it for the history.
fn model_content(reply: &[u8]) -> Value {
    let text = String::from_utf8_lossy(reply);
    let chunks: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&text).expect("JSON reply")]
    } else {
        text.split("\r\n\r\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).expect("SSE data"))
            .collect()
    };
    let parts: Vec<Value> = chunks
        .iter()
        .flat_map(|c| {
            c["candidates"][0]["content"]["parts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    json!({"parts": parts, "role": "model"})
}

/// The answer's text (thoughts left out), streamed chunks joined.
fn answer(reply: &[u8]) -> String {
    model_content(reply)["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["thought"] != true)
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// The history grows as the SDK grows it: the model's content, signatures re-encoded URL-safe
/// (the SDK decodes the bytes and encodes them again), then the next prompt.
fn next_turn(body: &mut Value, reply: &[u8], prompt: &str) {
    let mut content = model_content(reply);
    for part in content["parts"].as_array_mut().unwrap() {
        if let Some(sig) = part.get_mut("thoughtSignature") {
            let s = sig.as_str().unwrap().replace('+', "-").replace('/', "_");
            *sig = json!(s);
        }
    }
    let contents = body["contents"].as_array_mut().unwrap();
    contents.push(content);
    contents.push(json!({"parts": [{"text": prompt}], "role": "user"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_sse_round_trips_switch_accounts_with_the_handoff() {
    let s = setup().await;
    let mut body = first_body();
    assert!(body.to_string().len() > 27_000);
    let with_header = {
        let mut h = headers();
        h.push(("x-goog-api-key".into(), CLIENT_KEY.into()));
        h
    };
    let json_url = s.url(0, "/v1/models/gemini-relay:generateContent");
    let sse_url = s.url(
        0,
        &format!("/v1beta/models/gemini-relay:streamGenerateContent?alt=sse&key={CLIENT_KEY}"),
    );

    let beta_key_url = s.url(
        0,
        &format!("/v1beta/models/gemini-relay:generateContent?key={CLIENT_KEY}"),
    );
    // Turns 1-3 on the first account (30, 60, 90 %): JSON, JSON on v1beta with `?key=`, then
    // SSE with `?key=`: the handoff is generated when that stream ends (its last chunk carries
    // `finishReason`).
    for (turn, url, h) in [
        (1, &json_url, &with_header),
        (2, &beta_key_url, &headers()),
        (3, &sse_url, &headers()),
    ] {
        let (status, reply) = post(url, h, &body).await;
        assert_eq!(
            status,
            200,
            "turn {turn}: {}",
            String::from_utf8_lossy(&reply)
        );
        let text = answer(&reply);
        assert!(text.contains("from account acct-g1"), "turn {turn}: {text}");
        next_turn(&mut body, &reply, &format!("And on day {turn}?"));
    }
    s.idle().await;
    let stored = s.gateways[0].0.store().list(None, None).await.unwrap();
    assert_eq!(stored.len(), 1, "a handoff was written at 90 %");

    // The first account is used up: its 429 RESOURCE_EXHAUSTED moves the turn to the second,
    // with the handoff in systemInstruction and none of the first account's signatures.
    s.sim.set_used("acct-g1", 100.0);
    s.sim.clear_requests();
    let (status, reply) = post(&sse_url, &headers(), &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert!(answer(&reply).contains("from account acct-g2"));
    let text = String::from_utf8_lossy(&reply);
    assert!(text.contains("\"finishReason\":\"STOP\""), "{text}");
    let turns: Vec<_> = s
        .sim
        .requests()
        .into_iter()
        .filter(|r| !r.summary)
        .collect();
    assert_eq!(turns.len(), 2, "one 429, one retry");
    assert_eq!(turns[0].account.as_deref(), Some("acct-g1"));
    assert_eq!(turns[0].rejected.as_deref(), Some("RESOURCE_EXHAUSTED"));
    assert!(
        s.sim
            .thought_signature_owners(&turns[0])
            .iter()
            .all(|(_, o)| o.as_deref() == Some("acct-g1"))
    );
    let retry = &turns[1];
    assert_eq!(retry.account.as_deref(), Some("acct-g2"));
    assert_eq!(retry.rejected, None);
    assert_eq!(
        retry.uri.to_string(),
        "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        "model from the combo, client key out of the query"
    );
    let sent = retry.json().unwrap();
    let system = sent["systemInstruction"]["parts"].to_string();
    assert!(system.contains(HANDOFF_TAG), "{system}");
    assert!(sent.get("model").is_none(), "the body gains no member");
    let owners = s.sim.thought_signature_owners(retry);
    assert!(
        owners.iter().all(|(_, o)| o.as_deref() != Some("acct-g1")),
        "{owners:?}"
    );

    // The next turn on the second account goes through with its own signature.
    next_turn(&mut body, &reply, "Thanks. Tomorrow?");
    let (status, reply) = post(&json_url, &with_header, &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let last = s
        .sim
        .requests()
        .into_iter()
        .filter(|r| !r.summary)
        .last()
        .unwrap();
    assert_eq!(last.account.as_deref(), Some("acct-g2"));
    assert_eq!(last.rejected, None);

    // The client's key never reached the provider, in a header or in the query.
    for r in s.sim.requests() {
        let key = r
            .headers
            .get("x-goog-api-key")
            .and_then(|v| v.to_str().ok());
        assert!(matches!(key, Some("key-g1" | "key-g2")), "{key:?}");
        assert!(!r.uri.to_string().contains(CLIENT_KEY));
        assert!(
            r.headers
                .iter()
                .all(|(_, v)| v.as_bytes() != CLIENT_KEY.as_bytes())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_auth_errors_and_unknown_paths_speak_gemini() {
    let s = setup().await;
    let body = first_body();
    for url in [
        s.url(0, "/v1/models/gemini-relay:generateContent"),
        s.url(0, "/v1beta/models/gemini-relay:generateContent?key=wrong"),
    ] {
        let (status, reply) = post(&url, &headers(), &body).await;
        assert_eq!(status, 401);
        let v: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(v["error"]["code"], 401);
        assert_eq!(v["error"]["status"], "UNAUTHENTICATED");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("x-goog-api-key")
        );
    }
    let mut h = headers();
    h.push(("x-goog-api-key".into(), CLIENT_KEY.into()));
    let (status, reply) = post(&s.url(0, "/v1/models/nobody:generateContent"), &h, &body).await;
    assert_eq!(status, 404);
    let v: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(v["error"]["status"], "NOT_FOUND");
    let (status, _) = post(&s.url(0, "/v1/models/gemini-relay:countTokens"), &h, &body).await;
    assert_eq!(status, 404);
    // `provider/model` in the path reaches that model.
    let (status, reply) = post(
        &s.url(0, "/v1/models/gemini/gemini-2.5-pro:generateContent"),
        &h,
        &body,
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let last = s.sim.requests().pop().unwrap();
    assert_eq!(last.uri.path(), "/v1/models/gemini-2.5-pro:generateContent");
    // A combo's later target gets its own model in the path.
    let (status, reply) = post(
        &s.url(0, "/v1beta/models/fallback:generateContent"),
        &h,
        &body,
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let last = s.sim.requests().pop().unwrap();
    assert_eq!(last.uri.path(), "/v1/models/gemini-2.5-pro:generateContent");
    assert!(s.sim.requests().iter().all(|r| r.rejected.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_api_is_strict() {
    let s = start_sim(SimProvider::builder(), &["acct-g1", "acct-g2"]).await;
    let url = format!("{}/models/gemini-2.5-flash:generateContent", s.base_url());
    let key = |id: &str| vec![("x-goog-api-key".to_owned(), key_of(id))];
    let mut body = first_body();
    // A member the API does not know, as a relay adding `model` would send.
    body["model"] = json!("gemini-2.5-flash");
    let (status, reply) = post(&url, &key("acct-g1"), &body).await;
    assert_eq!(status, 400);
    assert!(
        String::from_utf8_lossy(&reply).contains("Unknown name \\\"model\\\": Cannot find field.")
    );
    body.as_object_mut().unwrap().remove("model");
    // Another account's signature is refused with the real body, its own accepted.
    let (status, reply) = post(&url, &key("acct-g1"), &body).await;
    assert_eq!(status, 200);
    next_turn(&mut body, &reply, "and tomorrow?");
    let (status, reply) = post(&url, &key("acct-g2"), &body).await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(
        v,
        json!({"error": {"code": 400, "message": "Corrupted thought signature.", "status": "INVALID_ARGUMENT"}})
    );
    let (status, _) = post(&url, &key("acct-g1"), &body).await;
    assert_eq!(status, 200);
    // A used-up account answers the real 429 with its retry delay.
    s.set_used("acct-g1", 100.0);
    let (status, reply) = post(&url, &key("acct-g1"), &body).await;
    assert_eq!(status, 429);
    let v: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
    assert!(v["error"]["details"].to_string().contains("RetryInfo"));
    // Unknown and missing keys.
    let (status, reply) = post(&url, &key("nobody"), &body).await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&reply).contains("API_KEY_INVALID"));
    let (status, _) = post(&url, &[], &body).await;
    assert_eq!(status, 403);
}

/// Gemini 3 refuses a current-turn function call without a signature, so a switch in the middle
/// of a tool round trip must not simply drop the old account's signature: the relay puts the
/// documented placeholder there and the other account serves the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_mid_tool_call_keeps_gemini_3_serving() {
    let s = setup().await;
    let url = s.url(0, "/v1beta/models/gemini3:generateContent");
    let mut h = headers();
    h.push(("x-goog-api-key".into(), CLIENT_KEY.into()));
    let mut body = first_body();
    let (status, reply) = post(&url, &h, &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert!(answer(&reply).contains("from account acct-g1"));
    s.idle().await;
    // The model asked for a tool with acct-g1's signature; the client answers it.
    let signature = s.sim.mint_thought_signature("acct-g1", "tool-call");
    let contents = body["contents"].as_array_mut().unwrap();
    contents.push(json!({"role": "model", "parts": [{
        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
        "thoughtSignature": signature,
    }]}));
    contents.push(json!({"role": "user", "parts": [{
        "functionResponse": {"name": "get_weather", "response": {"temperature": 21}},
    }]}));
    s.sim.set_used("acct-g1", 100.0);
    s.sim.clear_requests();
    let (status, reply) = post(&url, &h, &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert!(answer(&reply).contains("from account acct-g2"));
    let retry = s
        .sim
        .requests()
        .into_iter()
        .filter(|r| !r.summary && r.account.as_deref() == Some("acct-g2"))
        .last()
        .expect("the turn reached acct-g2");
    assert_eq!(retry.rejected, None);
    let sent = retry.json().unwrap();
    let call = sent["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .find(|p| p.get("functionCall").is_some())
        .expect("the call is kept");
    assert_eq!(call["thoughtSignature"], "skip_thought_signature_validator");
}

/// A length the gateway has no reason to change reaches the provider as the client wrote it:
/// a Gemini body is forwarded unchanged (the model is in the path), and the upstream call
/// keeps a `content-length` that says the sent body's length instead of removing it for the
/// upstream client to write anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_right_length_reaches_the_provider_as_written() {
    let s = setup().await;
    let body = first_body();
    let written = format!("00{}", body.to_string().len());
    let mut with_length = headers();
    with_length.push(("x-goog-api-key".into(), CLIENT_KEY.into()));
    with_length.push(("content-length".into(), written.clone()));
    let url = s.url(0, "/v1beta/models/gemini-relay:generateContent");
    let (status, reply) = post(&url, &with_length, &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let turns = s.sim.requests();
    let up = turns.last().expect("the provider was asked");
    assert_eq!(up.body.len(), body.to_string().len(), "the body as sent");
    assert_eq!(up.headers["content-length"], written.as_str());
}

/// Every account used up: after the provider's own 429, the gateway's own one carries the wait
/// where Gemini clients read it, a `google.rpc.RetryInfo` detail, as the API's does (Gemini
/// CLI stops at once on a long one; it kept retrying without it).
#[tokio::test]
async fn the_gateways_own_429_carries_the_retry_info_gemini_clients_read() {
    let s = setup().await;
    s.sim.set_used("acct-g1", 100.0);
    s.sim.set_used("acct-g2", 100.0);
    let mut h = headers();
    h.push(("x-goog-api-key".into(), CLIENT_KEY.into()));
    let url = s.url(0, "/v1beta/models/gemini-relay:generateContent");
    let (status, _) = post(&url, &h, &first_body()).await;
    assert_eq!(status, 429, "the provider's own");
    let res = http_client()
        .request({
            let mut b = Request::post(&url);
            for (k, v) in &h {
                b = b.header(k.as_str(), v.as_str());
            }
            b.body(Full::new(Bytes::from(first_body().to_string())))
                .unwrap()
        })
        .await
        .expect("gateway answers");
    assert_eq!(res.status(), 429);
    let wait: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let v: Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED", "{v}");
    assert_eq!(v["error"]["code"], 429, "{v}");
    let detail = &v["error"]["details"][0];
    assert_eq!(
        detail["@type"], "type.googleapis.com/google.rpc.RetryInfo",
        "{v}"
    );
    assert_eq!(detail["retryDelay"], format!("{wait}s"), "{v}");
}
