//! The summary call end to end: a configured sampling parameter the model refuses (the
//! simulated provider answers the real 400) is dropped, the summary retried once, the handoff
//! stored, and the refusal remembered for the next session; the summary goes to the account
//! and model that served its turn, whatever the pool thinks of that account by then.

use std::sync::Arc;

use bytes::Bytes;
use context_relay_gateway::Gateway;
use context_relay_sim::SimProvider;
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_testkit::handoff::SUMMARY_NEEDLE;
use context_relay_testkit::harness::{CodexGateway, Harness, start_sim};
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::json;

#[tokio::test]
async fn refused_summary_parameter_is_dropped_and_remembered() {
    let sim = start_sim(
        SimProvider::builder()
            .quota_step(30.0)
            .summary_reply(
                SUMMARY_NEEDLE,
                json!({"summary": "Renaming the crate.", "keyDecisions": ["keep the old name as an alias"],
                       "taskProgress": "", "activeEntities": []})
                .to_string(),
            ),
        &["acct-a", "acct-b"],
    )
    .await;
    let config = CodexGateway {
        provider: "  [providers.summary]\n  max_output_tokens = 600\n  params = { temperature = 0.2 }",
        ..CodexGateway::default()
    }
    .config(&sim.base_url());
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let gateway = Gateway::with_store(config, store.clone()).expect("gateway");
    let h = Harness::serve(sim, gateway).await;
    let send = |session: &'static str, turn: usize| {
        let req = Request::post(h.url(0, "/v1/chat/completions"))
            .header("authorization", "Bearer c")
            .header("session-id", session)
            .body(Full::new(Bytes::from(
                json!({"model": "codex-relay",
                       "messages": [{"role": "user", "content": format!("rename the crate, turn {turn}")}]})
                .to_string(),
            )))
            .expect("request");
        let client = h.client.clone();
        async move {
            let res = client.request(req).await.expect("response");
            assert_eq!(res.status(), 200);
            res.into_body().collect().await.expect("body");
        }
    };
    for t in 1..=3 {
        send("s1", t).await;
    }
    h.idle().await;

    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 2, "refused once, then retried");
    let first = summaries[0].json().expect("JSON");
    let second = summaries[1].json().expect("JSON");
    assert_eq!(first["temperature"], 0.2);
    assert_eq!(first["max_completion_tokens"], 600);
    assert!(second.get("temperature").is_none());
    let stored = store.list(None, Some("s1")).await.expect("list");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].handoff.summary, "Renaming the crate.");

    // The next session's summary to the same model leaves the parameter out from the start.
    h.sim.set_used("acct-a", 60.0);
    send("s2", 1).await;
    h.idle().await;
    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 3);
    assert!(
        summaries[2]
            .json()
            .expect("JSON")
            .get("temperature")
            .is_none()
    );
    assert_eq!(store.list(None, Some("s2")).await.expect("list").len(), 1);
    h.shutdown().await;
}

/// One Chat turn of `session` through `combo`.
async fn chat(h: &Harness, combo: &str, session: &str, turn: usize) {
    let req = Request::post(h.url(0, "/v1/chat/completions"))
        .header("authorization", "Bearer c")
        .header("session-id", session)
        .body(Full::new(Bytes::from(
            json!({"model": combo,
                   "messages": [{"role": "user", "content": format!("rename the crate, turn {turn}")}]})
            .to_string(),
        )))
        .expect("request");
    let res = h.client.request(req).await.expect("response");
    assert_eq!(res.status(), 200);
    res.into_body().collect().await.expect("body");
}

fn summary_sim() -> context_relay_sim::SimBuilder {
    SimProvider::builder().quota_step(30.0).summary_reply(
        SUMMARY_NEEDLE,
        json!({"summary": "Renaming the crate.", "keyDecisions": [], "taskProgress": "",
               "activeEntities": []})
        .to_string(),
    )
}

/// The turn that reaches the band also reaches `rotate_at`: the pool sends the next turns
/// elsewhere, but the summary of that turn goes to the account that served it (its request
/// may carry state only that account can read).
#[tokio::test]
async fn the_summary_goes_to_the_account_that_served_its_turn() {
    let sim = start_sim(summary_sim(), &["acct-a", "acct-b"]).await;
    let config = CodexGateway {
        provider: "rotate_at = 0.9",
        ..CodexGateway::default()
    }
    .config(&sim.base_url());
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let h = Harness::serve(
        sim,
        Gateway::with_store(config, store.clone()).expect("gateway"),
    )
    .await;
    for t in 1..=3 {
        chat(&h, "codex-relay", "s1", t).await;
    }
    h.idle().await;
    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].account.as_deref(), Some("acct-a"));
    let stored = store.list(None, Some("s1")).await.expect("list");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].from_account, "acct-a");
    h.shutdown().await;
}

/// A turn the combo sent to its second target (the first one's account used up): the summary
/// goes to that target's account and model, and the handoff names that model, though the
/// request as it reached the relay named the first target's.
#[tokio::test]
async fn the_summary_is_written_by_the_model_that_served_its_turn() {
    let sim = start_sim(summary_sim(), &["acct-a", "acct-b"]).await;
    let base = sim.base_url();
    let text = format!(
        "[store]\nbackend = \"memory\"\n\
         [[providers]]\nname = \"codex\"\nbase_url = \"{base}\"\n  [[providers.accounts]]\n  id = \"acct-a\"\n  api_key = \"key-a\"\n\
         [[providers]]\nname = \"backup\"\nbase_url = \"{base}\"\n  [[providers.accounts]]\n  id = \"acct-b\"\n  api_key = \"key-b\"\n\
         [[combos]]\nname = \"two\"\ntargets = [\"codex/gpt-5.5\", \"backup/gpt-4.1\"]\n"
    );
    let config =
        context_relay_gateway::config::Config::from_toml_str(&text, |_| None).expect("config");
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let h = Harness::serve(
        sim,
        Gateway::with_store(config, store.clone()).expect("gateway"),
    )
    .await;
    h.sim.set_used("acct-a", 100.0);
    for t in 1..=3 {
        chat(&h, "two", "s1", t).await;
    }
    h.idle().await;
    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].account.as_deref(), Some("acct-b"));
    assert_eq!(summaries[0].json().expect("JSON")["model"], "gpt-4.1");
    let stored = store.list(None, Some("s1")).await.expect("list");
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (stored[0].from_account.as_str(), stored[0].model.as_str()),
        ("acct-b", "gpt-4.1")
    );
    h.shutdown().await;
}

/// `[relay] handoff_model` names the summary model of the providers that have none of their
/// own: a provider's `[providers.summary] model` is the one it is known to serve, and wins.
#[tokio::test]
async fn a_providers_own_summary_model_wins_over_the_relays() {
    let sim = start_sim(summary_sim(), &["acct-a", "acct-b"]).await;
    let base = sim.base_url();
    let text = format!(
        "[store]\nbackend = \"memory\"\n[relay]\nhandoff_model = \"gpt-5-nano\"\n\
         [[providers]]\nname = \"codex\"\nbase_url = \"{base}\"\n  [[providers.accounts]]\n  id = \"acct-a\"\n  api_key = \"key-a\"\n\
         [providers.summary]\nmodel = \"gpt-4.1-mini\"\n\
         [[providers]]\nname = \"backup\"\nbase_url = \"{base}\"\n  [[providers.accounts]]\n  id = \"acct-b\"\n  api_key = \"key-b\"\n\
         [[combos]]\nname = \"one\"\ntargets = [\"codex/gpt-5.5\"]\n\
         [[combos]]\nname = \"two\"\ntargets = [\"backup/gpt-4.1\"]\n"
    );
    let config =
        context_relay_gateway::config::Config::from_toml_str(&text, |_| None).expect("config");
    let h = Harness::serve(sim, Gateway::new(config).expect("gateway")).await;
    for t in 1..=3 {
        chat(&h, "one", "s1", t).await;
        chat(&h, "two", "s2", t).await;
    }
    h.idle().await;
    let mut written: Vec<(String, String)> = h
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.summary)
        .map(|r| {
            let model = r.json().expect("JSON")["model"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            (r.account.unwrap_or_default(), model)
        })
        .collect();
    written.sort();
    assert_eq!(
        written,
        [
            ("acct-a".to_owned(), "gpt-4.1-mini".to_owned()),
            ("acct-b".to_owned(), "gpt-5-nano".to_owned())
        ]
    );
    h.shutdown().await;
}

/// A reload removes the account while the turn that reached the band still streams: its
/// summary, due when the stream ends, goes nowhere (the removed key sees no more traffic), and
/// the session keeps an extractive handoff.
#[tokio::test]
async fn the_summary_of_a_turn_whose_account_a_reload_removed_goes_nowhere() {
    let sim = start_sim(summary_sim(), &["acct-a", "acct-b"]).await;
    let base = sim.base_url();
    let config = |accounts: &'static [&'static str]| {
        CodexGateway {
            accounts,
            ..CodexGateway::default()
        }
        .config(&base)
    };
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let gateway =
        Gateway::with_store(config(&["acct-a", "acct-b"]), store.clone()).expect("gateway");
    let h = Harness::serve(sim, gateway).await;
    for t in 1..=2 {
        chat(&h, "codex-relay", "s1", t).await;
    }
    h.idle().await;
    // The third turn (90 %) streams while the reload removes acct-a.
    let hold = h.sim.hold_streams();
    let req = Request::post(h.url(0, "/v1/chat/completions"))
        .header("authorization", "Bearer c")
        .header("session-id", "s1")
        .body(Full::new(Bytes::from(
            json!({"model": "codex-relay", "stream": true,
                   "messages": [{"role": "user", "content": "rename the crate, turn 3"}]})
            .to_string(),
        )))
        .expect("request");
    let res = h.client.request(req).await.expect("response");
    assert_eq!(res.status(), 200);
    let reloaded = h.gateways[0]
        .0
        .reload(config(&["acct-b"]))
        .await
        .expect("reload");
    drop(hold);
    res.into_body().collect().await.expect("body");
    h.idle().await;
    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert!(
        summaries.is_empty(),
        "{:?}",
        summaries.iter().map(|r| &r.account).collect::<Vec<_>>()
    );
    // The turn did qualify: its summary went nowhere, and an extractive handoff stands in.
    let stored = store.list(None, Some("s1")).await.expect("list");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].kind, context_relay_core::HandoffKind::Extractive);
    drop(reloaded);
    h.shutdown().await;
}

/// A provider whose summaries are streamed (`summary_stream`) on Chat Completions, by a model
/// of their own: the summary asks for its usage (a Chat stream carries none unless asked), and
/// its cost is counted under the model that wrote it.
#[tokio::test]
async fn a_streamed_chat_summary_asks_for_its_usage_and_is_counted() {
    let sim = start_sim(summary_sim(), &["acct-a", "acct-b"]).await;
    let config = CodexGateway {
        top: "admin_token = \"adm-token\"",
        provider: "summary_stream = true\n[providers.summary]\nmodel = \"gpt-4.1-mini\"",
        ..CodexGateway::default()
    }
    .config(&sim.base_url());
    let h = Harness::serve(sim, Gateway::new(config).expect("gateway")).await;
    for t in 1..=3 {
        chat(&h, "codex-relay", "s1", t).await;
    }
    h.idle().await;
    let summaries: Vec<_> = h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 1);
    let body = summaries[0].json().expect("JSON");
    assert_eq!(body["stream"], true, "{body}");
    assert_eq!(body["stream_options"]["include_usage"], true, "{body}");
    assert_eq!(body["model"], "gpt-4.1-mini", "{body}");
    assert_eq!(summaries[0].account.as_deref(), Some("acct-a"));
    let req = Request::get(h.url(0, "/admin/usage"))
        .header("authorization", "Bearer adm-token")
        .body(Full::default())
        .expect("request");
    let res = h.client.request(req).await.expect("response");
    assert_eq!(res.status(), 200);
    let page: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.expect("body").to_bytes())
            .expect("JSON");
    let rows: Vec<&serde_json::Value> = page["usage"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|row| row["kind"] == "summary")
        .collect();
    assert_eq!(rows.len(), 1, "{page}");
    assert!(rows[0]["output"].as_u64().unwrap_or(0) > 0, "{page}");
    assert_eq!(rows[0]["model"], "gpt-4.1-mini", "{page}");
    h.shutdown().await;
}
