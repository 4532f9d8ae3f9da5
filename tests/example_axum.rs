//! The stack of `examples/axum.rs`, run as written: a summary request at 87 %, then the
//! handoff injected into the other account's request after a 429.

#[allow(dead_code)]
#[path = "../examples/axum.rs"]
mod axum_example;
mod examples_support;

use std::sync::Arc;

use context_relay::store::{HandoffStore, MemoryStore};
use examples_support::{scenario, sim, with_timeout};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_example_stack_summarises_and_hands_off() {
    for stream in [false, true] {
        let sim = sim().await;
        let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
        let accounts = axum_example::resolver::Accounts::new(
            "openai",
            &sim.base_url(),
            &["key-a".to_owned(), "key-b".to_owned()],
        )
        .expect("accounts");
        let (app, background) = axum_example::router(store, accounts);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        with_timeout(scenario(&url, &sim, &background, stream)).await;
        server.abort();
        sim.shutdown().await;
    }
}
