//! Codex's remote compaction, `POST /v1/responses/compact`, through the gateway: proxied like
//! `/v1/responses` (same session and account, same relay), and the `compaction` item an account
//! returns is that account's state, scrubbed when the session moves to another account.
//!
//! Real gateways on 127.0.0.1:0, a real HTTP client sending a real-sized Codex history
//! (rebuilt from the captures), and the strict simulated provider, which mints the compaction
//! item per account and refuses another account's.

use context_relay_sim::SimProvider;
use context_relay_testkit::clients::compact_body;
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::{Harness, MEMORY};
use serde_json::{Value, json};

const SESSION: &str = "0199d00d-5c3a-7b21-9c4d-5e6f7a8b9c0d";

/// Codex replaces its history by the compacted one, then asks the next question.
fn compacted(conv: &mut Conversation, reply: &[u8], prompt: &str) {
    let v: Value = serde_json::from_slice(reply).expect("JSON compaction reply");
    let mut input = v["output"].as_array().expect("output").clone();
    assert!(input.iter().any(|i| i["type"] == "compaction"), "{v}");
    input.push(json!({"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": prompt}]}));
    conv.body["input"] = Value::Array(input);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_is_proxied_and_its_item_is_scrubbed_on_a_switch() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let [a, b, _] = Client::Codex.accounts();
    let mut conv = Conversation::new(Client::Codex, SESSION);
    assert!(serde_json::to_vec(&conv.body).unwrap().len() > 36_000);

    // Turn 1, then a compaction on the same account (the session sticks to it).
    assert_eq!(conv.turn(&h, 0).await.0, 200);
    let (status, acted, reply) = h
        .send(
            0,
            "/v1/responses/compact",
            &conv.headers,
            &compact_body(&conv.body),
        )
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert_eq!(acted, None, "no switch: nothing to do for the relay");
    let last = h.sim.requests().pop().unwrap();
    assert_eq!(last.uri.path(), "/v1/responses/compact");
    assert_eq!(last.account.as_deref(), Some(a));
    assert_eq!(last.rejected, None);
    assert_eq!(
        last.headers["authorization"],
        format!("Bearer key-{a}").as_str()
    );
    assert_eq!(last.json().unwrap()["model"], "gpt-5.5", "combo resolved");
    compacted(
        &mut conv,
        &reply,
        "Now add the --json flag to the help text.",
    );

    // Next turn on the same account carries the compaction item: it is a's and accepted.
    // At 90 % a handoff is written.
    assert_eq!(conv.turn(&h, 0).await.0, 200);
    let turn = h.last_turn();
    assert_eq!(turn.account.as_deref(), Some(a));
    assert_eq!(turn.rejected, None);
    assert!(h.owners(&turn).contains(&Some(a.to_owned())));
    h.idle().await;
    assert_eq!(
        h.handoffs(SESSION).await,
        1,
        "a handoff was written at 90 %"
    );

    // a is used up: the compaction request itself moves to b, without a's compaction item (b
    // would refuse it) and without the handoff (the compaction's answer would drop it): the
    // next turn carries it.
    h.sim.set_used(a, 100.0);
    h.sim.clear_requests();
    let (status, acted, reply) = h
        .send(
            0,
            "/v1/responses/compact",
            &conv.headers,
            &compact_body(&conv.body),
        )
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert!(acted.is_some(), "the relay acted on the switch");
    let turns = h.turns();
    let retry = turns.last().unwrap();
    assert_eq!(retry.uri.path(), "/v1/responses/compact");
    assert_eq!(retry.account.as_deref(), Some(b));
    assert_eq!(retry.rejected, None);
    let owners = h.owners(retry);
    assert!(owners.iter().all(|o| o.as_deref() != Some(a)), "{owners:?}");
    assert!(
        !String::from_utf8_lossy(&retry.body).contains(HANDOFF_TAG),
        "no handoff in the compaction request"
    );
    compacted(&mut conv, &reply, "Then update the changelog.");

    // The history now holds b's compaction item: the next turn is served by b unrejected.
    // (The relay's bookkeeping of the switch runs in the background; a client's next turn
    // comes seconds later.)
    h.idle().await;
    assert_eq!(conv.turn(&h, 0).await.0, 200);
    let turn = h.last_turn();
    assert_eq!(turn.account.as_deref(), Some(b));
    assert_eq!(turn.rejected, None);
    assert!(h.owners(&turn).contains(&Some(b.to_owned())));
    assert!(!h.owners(&turn).contains(&Some(a.to_owned())));
    assert_eq!(
        String::from_utf8_lossy(&turn.body)
            .matches(HANDOFF_TAG)
            .count(),
        1,
        "the turn after the compaction carries the handoff"
    );
    h.idle().await;
    assert_eq!(h.handoffs(SESSION).await, 0, "consumed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_compaction_is_account_bound() {
    let h = Harness::start(1, MEMORY, SimProvider::builder()).await;
    let [a, b, _] = Client::Codex.accounts();
    let conv = Conversation::new(Client::Codex, SESSION);
    let url = format!("{}/responses/compact", h.sim.base_url());
    let post = |key: String, body: Value| {
        let client = h.client.clone();
        let url = url.clone();
        async move {
            use http_body_util::BodyExt;
            let req = http::Request::post(url)
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(bytes::Bytes::from(
                    body.to_string(),
                )))
                .unwrap();
            let res = client.request(req).await.unwrap();
            let status = res.status();
            (status, res.into_body().collect().await.unwrap().to_bytes())
        }
    };
    let mut body = compact_body(&conv.body);
    body["model"] = json!("gpt-5.5");
    let (status, reply) = post(format!("key-{a}"), body.clone()).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&reply).unwrap();
    let item = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "compaction")
        .unwrap()
        .clone();
    body["input"].as_array_mut().unwrap().push(item);
    let (status, reply) = post(format!("key-{b}"), body.clone()).await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&reply));
    assert!(String::from_utf8_lossy(&reply).contains("invalid_encrypted_content"));
    let (status, _) = post(format!("key-{a}"), body).await;
    assert_eq!(status, 200);
}
