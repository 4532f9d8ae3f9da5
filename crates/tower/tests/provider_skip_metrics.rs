//! A turn that would qualify for a summary but whose provider gets no handoffs is counted as
//! skipped (`reason="provider"`), while the pass-through path counts nothing. Its own test
//! binary (its own process): it installs the global metrics recorder.

mod support;

use std::sync::Arc;

use context_relay_store::MemoryStore;
use context_relay_tower::ResolvedAccount;
use support::{Stack, chat};

#[tokio::test]
async fn provider_skip_is_counted() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("recorder");
    let stack = Stack::with(Arc::new(MemoryStore::new()), |r| r.providers(["codex"]));
    *stack.account.lock().unwrap() = ResolvedAccount::new("anthropic", "x");
    // Below the threshold: nothing would happen anyway, nothing is counted.
    stack.upstream.set_percent("x", 40.0);
    stack.send(chat("s1", "k1", 2)).await;
    stack.idle().await;
    let line = "context_relay_generations_skipped_total{reason=\"provider\"}";
    assert!(
        !handle.render().contains(line),
        "counted below the threshold"
    );

    stack.upstream.set_percent("x", 90.0);
    stack.send(chat("s1", "k1", 3)).await;
    stack.idle().await;
    assert!(stack.upstream.summaries().is_empty());
    let text = handle.render();
    assert!(
        text.contains(&format!("{line} 1")),
        "{line} 1 missing in\n{text}"
    );
}
