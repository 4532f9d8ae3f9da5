use std::sync::Arc;

use bytes::Bytes;
use context_relay_core::usage::Usage;
use http_body_util::{BodyExt, Full, StreamBody};
use metrics_exporter_prometheus::PrometheusBuilder;

use super::*;

fn labels(kind: Traffic) -> Labels {
    Labels {
        client: Arc::from("alice"),
        provider: Arc::from("codex"),
        account: Arc::from("acct-a"),
        serving: Arc::from("codex/gpt-5.5"),
        kind,
    }
}

const SSE: &[u8] = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n";

#[tokio::test]
async fn a_whole_body_a_cut_body_and_a_dropped_body_are_each_counted_once() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let ledger = UsageLedger::default();
    metrics::with_local_recorder(&recorder, || {
        // Registers the handles with this recorder.
        ledger.record(labels(Traffic::Summary), &Usage::default());
        ledger.record(labels(Traffic::Client), &Usage::default());
    });
    // Whole: the end of the body counts it.
    let body = MeteredBody::new(
        Full::new(Bytes::from_static(SSE)),
        ledger.clone(),
        labels(Traffic::Client),
        "",
        None,
    );
    body.collect().await.unwrap();
    // Cut after the first event: the input arrived.
    let second = SSE
        .windows(20)
        .position(|w| w == b"event: message_delta")
        .unwrap();
    let first = &SSE[..second + 10];
    let chunks: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = vec![
        Ok(http_body::Frame::data(Bytes::copy_from_slice(first))),
        Err(std::io::Error::other("connection reset")),
    ];
    let mut cut = MeteredBody::new(
        StreamBody::new(futures_util::stream::iter(chunks)),
        ledger.clone(),
        labels(Traffic::Client),
        "",
        None,
    );
    while let Some(Ok(_)) = cut.frame().await {}
    drop(cut);
    // Dropped before it was read at all: nothing arrived, nothing counted.
    drop(MeteredBody::new(
        Full::new(Bytes::from_static(SSE)),
        ledger.clone(),
        labels(Traffic::Summary),
        "",
        None,
    ));

    let rows = ledger.rows();
    assert_eq!(rows.len(), 2);
    let client = &rows[0];
    assert_eq!(
        (client.kind, client.model.as_str()),
        (Traffic::Client, "gpt-5.5")
    );
    // Two answers with usage (and the registering one): 10 + 10 input, 7 + 1 output.
    assert_eq!((client.responses, client.input, client.output), (3, 20, 8));
    let page = handle.render();
    let line = page
        .lines()
        .find(|l| {
            l.starts_with("context_relay_gateway_tokens_total{")
                && l.contains("kind=\"client\"")
                && l.contains("type=\"input\"")
        })
        .unwrap_or_else(|| panic!("{page}"));
    assert!(
        line.contains("client=\"alice\"") && line.contains("model=\"gpt-5.5\""),
        "{line}"
    );
    assert!(line.ends_with(" 20"), "{line}");
}

#[test]
fn labels_come_from_the_attempt() {
    use context_relay_tower::{ResolvedAccount, ServingModel, SkipRelay, SummaryCall, Tenant};
    let ledger = UsageLedger::default();
    let mut ext = http::Extensions::new();
    assert_eq!(ledger.labels(&ext), None, "not routed");
    ext.insert(ResolvedAccount::new("codex", "acct-b"));
    ext.insert(ServingModel::new("codex/gpt-5.5"));
    ext.insert(Tenant::new("bob"));
    let l = ledger.labels(&ext).unwrap();
    assert_eq!(
        (&*l.client, &*l.account, l.model(), l.kind),
        ("bob", "acct-b", "gpt-5.5", Traffic::Client)
    );
    // Anonymous traffic, which the relay leaves alone, is a client's all the same.
    ext.insert(SkipRelay);
    assert_eq!(ledger.labels(&ext).unwrap().kind, Traffic::Client);
    ext.insert(SummaryCall);
    assert_eq!(ledger.labels(&ext).unwrap().kind, Traffic::Summary);
    ledger.set_open(true);
    assert_eq!(&*ledger.labels(&ext).unwrap().client, "open");
}

/// A provider that answers any model name (a direct route lets a client name one) cannot
/// grow the ledger without bound: past the limits, names are counted as one model.
#[test]
fn client_chosen_model_names_are_bounded_per_provider() {
    let ledger = UsageLedger::default();
    let usage = Usage {
        input: 3,
        ..Usage::default()
    };
    let with = |provider: &str, model: &str| Labels {
        serving: Arc::from(format!("{provider}/{model}")),
        provider: Arc::from(provider),
        ..labels(Traffic::Client)
    };
    for i in 0..MAX_MODELS_PER_PROVIDER + 50 {
        ledger.record(with("codex", &format!("m-{i}")), &usage);
    }
    let long = "x".repeat(MAX_MODEL_LABEL_CHARS + 1);
    ledger.record(with("anthropic", &long), &usage);
    // A name labelled before the limit keeps its label.
    ledger.record(with("codex", "m-0"), &usage);
    let rows = ledger.rows();
    let codex: Vec<_> = rows.iter().filter(|r| r.provider == "codex").collect();
    assert_eq!(codex.len(), MAX_MODELS_PER_PROVIDER + 1);
    let other = codex.iter().find(|r| r.model == OTHER_MODEL).unwrap();
    assert_eq!((other.responses, other.input), (50, 150));
    let m0 = codex.iter().find(|r| r.model == "m-0").unwrap();
    assert_eq!(m0.responses, 2);
    let anthropic: Vec<_> = rows.iter().filter(|r| r.provider == "anthropic").collect();
    assert_eq!(anthropic.len(), 1);
    assert_eq!(anthropic[0].model, OTHER_MODEL);
}

/// The models the configuration names keep their label whatever names clients sent first.
#[test]
fn configured_models_keep_their_label() {
    let config: crate::config::Config = toml::from_str(
        r#"
        [[providers]]
        name = "codex"
        base_url = "http://127.0.0.1:9/v1"
        summary = { model = "gpt-5-mini" }
        [[providers.accounts]]
        id = "a"
        api_key = "k"
        [[combos]]
        name = "relay"
        targets = ["codex/gpt-5.5"]
        "#,
    )
    .expect("config");
    let ledger = UsageLedger::default();
    ledger.know_models(&config);
    let with = |model: &str| Labels {
        serving: Arc::from(format!("codex/{model}")),
        ..labels(Traffic::Client)
    };
    for i in 0..MAX_MODELS_PER_PROVIDER + 10 {
        ledger.record(with(&format!("junk-{i}")), &Usage::default());
    }
    ledger.record(with("gpt-5.5"), &Usage::default());
    ledger.record(with("gpt-5-mini"), &Usage::default());
    let rows = ledger.rows();
    for kept in ["gpt-5.5", "gpt-5-mini", OTHER_MODEL] {
        assert!(rows.iter().any(|r| r.model == kept), "{kept}");
    }
    assert_eq!(rows.len(), MAX_MODELS_PER_PROVIDER + 1);
}
