//! Usage accounting against the simulated provider: the tokens counted per account, model and
//! kind match what the provider reported, for JSON answers, streams of every API and a stream
//! cut half way (what arrived is counted); the relay's summary calls are counted apart; the
//! counters reach `/metrics` with their `# HELP` lines.

use std::collections::BTreeMap;

use context_relay_gateway::{Gateway, prometheus_builder};
use context_relay_sim::{SimFault, SimUsage};
use context_relay_testkit::clients::sse_events;
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::handoff::{SUMMARY_NEEDLE, summary_reply};
use context_relay_testkit::harness::{ADMIN_TOKEN, Harness, MEMORY, config};
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

/// input, cached input, output, reasoning output.
type Counts = [u64; 4];

fn add(into: &mut Counts, u: &SimUsage) {
    into[0] += u.input;
    into[1] += u.cached;
    into[2] += u.output;
    into[3] += u.reasoning;
}

async fn get(h: &Harness, path: &str) -> (u16, String) {
    let req = Request::get(h.url(0, path))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .body(Full::default())
        .unwrap();
    let res = h.client.request(req).await.unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn usage_counts_match_what_the_provider_reported() {
    let recorder = prometheus_builder()
        .install_recorder()
        .expect("one recorder");
    context_relay_gateway::describe_metrics();
    let sim = context_relay_sim::SimProvider::builder()
        .quota_step(30.0)
        .summary_reply(SUMMARY_NEEDLE, summary_reply());
    let mut sim = sim;
    for id in ["acct-a", "acct-b", "acct-c", "acct-x", "acct-y", "acct-z"] {
        sim = sim.account(id, format!("key-{id}"));
    }
    let sim = sim.start().await.unwrap();
    let gateway = Gateway::connect(config(&sim.base_url(), MEMORY))
        .await
        .unwrap()
        .with_metrics(recorder);
    let h = Harness::serve(sim, gateway).await;
    let key = ("authorization".to_owned(), "Bearer client-key".to_owned());
    let chat = |stream: bool| {
        json!({"model": "codex-relay", "stream": stream,
               "stream_options": {"include_usage": true},
               "messages": [{"role": "user", "content": "count my tokens"}]})
    };

    // Chat JSON and Chat SSE on acct-a.
    let (status, _, body) = h
        .send(
            0,
            "/v1/chat/completions",
            std::slice::from_ref(&key),
            &chat(false),
        )
        .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let (status, _, body) = h
        .send(
            0,
            "/v1/chat/completions",
            std::slice::from_ref(&key),
            &chat(true),
        )
        .await;
    assert_eq!(status, 200);
    assert!(sse_events(&body).iter().any(|e| e["usage"].is_object()));
    // A Codex turn (Responses SSE) crosses the handoff threshold: a summary call follows.
    let mut codex = Conversation::new(Client::Codex, "usage-codex");
    codex.headers.push(key.clone());
    assert_eq!(codex.turn(&h, 0).await.0, 200);
    // Gemini, streamed, with thoughts.
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                        "generationConfig": {"thinkingConfig": {"includeThoughts": true}}});
    let (status, _, _) = h
        .send(
            0,
            "/v1beta/models/codex-relay:streamGenerateContent?alt=sse",
            std::slice::from_ref(&key),
            &gemini,
        )
        .await;
    assert_eq!(status, 200);
    // Claude Code (Messages SSE), then Messages JSON, then a stream cut after its first delta.
    let mut claude = Conversation::new(Client::Claude, "usage-claude");
    claude.headers.push(key.clone());
    assert_eq!(claude.turn(&h, 0).await.0, 200);
    let messages = json!({"model": "claude-relay", "max_tokens": 64,
                          "messages": [{"role": "user", "content": "hello"}]});
    let (status, _, _) = h
        .send(0, "/v1/messages", std::slice::from_ref(&key), &messages)
        .await;
    assert_eq!(status, 200);
    h.sim.fail_next(None, SimFault::Truncated);
    let mut cut_body = messages.clone();
    cut_body["stream"] = json!(true);
    let (status, _, cut) = h
        .send(0, "/v1/messages", std::slice::from_ref(&key), &cut_body)
        .await;
    assert_eq!(status, 200);
    h.idle().await;

    // What the provider reported, per account and kind, read from its own record; the cut
    // stream reported what its `message_start` said (read from what the client received).
    let mut expected: BTreeMap<(String, &str), Counts> = BTreeMap::new();
    for r in h.sim.requests() {
        if let (Some(account), Some(u)) = (r.account.clone(), r.usage) {
            let kind = if r.summary { "summary" } else { "client" };
            add(expected.entry((account, kind)).or_default(), &u);
        }
    }
    let start = sse_events(&cut)
        .into_iter()
        .find(|e| e["type"] == "message_start")
        .expect("the cut stream began");
    let u = &start["message"]["usage"];
    let cut_account = h.sim.requests().last().unwrap().account.clone().unwrap();
    let read = |k: &str| u[k].as_u64().unwrap_or(0);
    add(
        expected.entry((cut_account, "client")).or_default(),
        &SimUsage {
            input: read("input_tokens") + read("cache_read_input_tokens"),
            cached: read("cache_read_input_tokens"),
            output: read("output_tokens"),
            reasoning: 0,
        },
    );
    assert!(
        expected.keys().any(|(_, kind)| *kind == "summary"),
        "a summary call was made: {expected:?}"
    );

    let (status, page) = get(&h, "/admin/usage").await;
    assert_eq!(status, 200);
    let rows: Value = serde_json::from_str(&page).unwrap();
    let mut counted: BTreeMap<(String, &str), Counts> = BTreeMap::new();
    for row in rows["usage"].as_array().unwrap() {
        let kind = if row["kind"] == "summary" {
            "summary"
        } else {
            "client"
        };
        assert_eq!(row["client"], "open", "{row}");
        let c = counted
            .entry((row["account"].as_str().unwrap().to_owned(), kind))
            .or_default();
        for (i, field) in ["input", "cached_input", "output", "reasoning_output"]
            .iter()
            .enumerate()
        {
            c[i] += row[field].as_u64().unwrap();
        }
    }
    assert_eq!(counted, expected);

    // The same totals on /metrics, with their help text.
    let (_, metrics) = get(&h, "/metrics").await;
    assert!(
        metrics.contains("# HELP context_relay_gateway_tokens_total "),
        "{metrics}"
    );
    let mut from_metrics: BTreeMap<(String, String), u64> = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("context_relay_gateway_tokens_total{"))
    {
        let label = |name: &str| {
            let start = line.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
            line[start..].split('"').next().unwrap().to_owned()
        };
        let value: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        *from_metrics
            .entry((label("account"), label("type")))
            .or_default() += value;
    }
    for ((account, _), counts) in &counted {
        let total = |t: &str| from_metrics.get(&(account.clone(), t.to_owned())).copied();
        let all: u64 = counted
            .iter()
            .filter(|((a, _), _)| a == account)
            .map(|(_, c)| c[0])
            .sum();
        assert_eq!(total("input"), Some(all), "{account}: {counts:?}");
    }
}
