//! The pingora proxy end to end on loopback: a real-sized Codex session through the proxy to
//! the strict simulated provider (account-bound state minted per account, another account's
//! state refused with the real error), with a real HTTP client.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay_engine::Relay;
use context_relay_pingora_example::{
    Account, Pool, PoolSummarizer, RelayProxy, RunningProxy, spawn,
};
use context_relay_sim::{RecordedRequest, SimProvider};
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_testkit::clients::{codex_first_turn, codex_next_turn, completed, contains};
use context_relay_testkit::handoff::{HANDOFF_TAG, SUMMARY_NEEDLE, summary_reply};
use flate2::Compression;
use flate2::write::GzEncoder;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

const SESSION: &str = "019a7c1e-55aa-7b3c-9d10-5e55e55e55e5";

struct Setup {
    sim: SimProvider,
    store: Arc<dyn HandoffStore>,
    proxy: RunningProxy,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// A proxy in front of `sim` with the accounts in `order` (new sessions go to the first),
/// rewriting bodies up to `max_body` bytes (the relay's default without).
fn proxy(
    sim: &SimProvider,
    store: Arc<dyn HandoffStore>,
    order: [&str; 2],
    max_body: Option<usize>,
) -> RunningProxy {
    let accounts =
        order.map(|id| Account::new(id, &format!("key-{}", id.trim_start_matches("acct-"))));
    let pool = Arc::new(Pool::new("codex", accounts.to_vec()));
    let mut relay = Relay::builder(store).summarizer(PoolSummarizer::new(sim.addr(), pool.clone()));
    if let Some(max) = max_body {
        relay = relay.max_body_bytes(max);
    }
    let relay = relay.build();
    let proxy = RelayProxy::new(sim.addr(), pool, relay);
    spawn(proxy, "127.0.0.1:0".parse().unwrap(), 2).expect("proxy")
}

impl Setup {
    /// Two accounts of a provider that uses 45 % of an account per turn.
    async fn start() -> Self {
        Self::start_with(None).await
    }

    async fn start_with(max_body: Option<usize>) -> Self {
        let sim = SimProvider::builder()
            .account("acct-a", "key-a")
            .account("acct-b", "key-b")
            .quota_step(45.0)
            .summary_reply(SUMMARY_NEEDLE, summary_reply())
            .start()
            .await
            .expect("simulated provider");
        let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
        let proxy = proxy(&sim, store.clone(), ["acct-a", "acct-b"], max_body);
        let client = Client::builder(TokioExecutor::new()).build_http();
        Self {
            sim,
            store,
            proxy,
            client,
        }
    }

    /// Posts `body` to the proxy's `/v1/responses` with `headers` (gzip-compressed when
    /// `gzip`): the status, the `x-context-relay` header and the whole reply.
    async fn send(
        &self,
        headers: &[(String, String)],
        body: &Value,
        gzip: bool,
    ) -> (StatusCode, Option<String>, Bytes) {
        self.send_to(&self.proxy, headers, body, gzip).await
    }

    async fn send_to(
        &self,
        proxy: &RunningProxy,
        headers: &[(String, String)],
        body: &Value,
        gzip: bool,
    ) -> (StatusCode, Option<String>, Bytes) {
        let mut req = Request::post(format!("{}/v1/responses", proxy.url()));
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let mut bytes = serde_json::to_vec(body).unwrap();
        if gzip {
            let mut e = GzEncoder::new(Vec::new(), Compression::fast());
            e.write_all(&bytes).unwrap();
            bytes = e.finish().unwrap();
            req = req.header("content-encoding", "gzip");
        }
        let bytes = Bytes::from(bytes);
        let res = self
            .client
            .request(req.body(Full::new(bytes)).unwrap())
            .await
            .expect("the proxy answers");
        let status = res.status();
        let acted = res
            .headers()
            .get("x-context-relay")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let reply = res.into_body().collect().await.expect("reply").to_bytes();
        (status, acted, reply)
    }

    /// The handoffs stored for the session, once `want` of them are (or after 10 s).
    async fn handoffs(&self, want: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let n = self
                .store
                .list(None, Some(SESSION))
                .await
                .expect("store")
                .len();
            if n == want || Instant::now() > deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Client turns the provider received (summary calls left out).
    fn turns(&self) -> Vec<RecordedRequest> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| !r.summary)
            .collect()
    }

    /// The accounts that minted the state a request carried.
    fn owners(&self, r: &RecordedRequest) -> Vec<Option<String>> {
        self.sim
            .state_owners(r)
            .into_iter()
            .map(|(_, owner)| owner)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_session_crosses_to_the_other_account_with_its_handoff() {
    crossing(false).await;
}

/// The held body of a compressed request is decided on decoded and goes out decoded: its
/// `content-encoding` left with the head, before the body was known. (Only the turns the relay
/// rewrites are compressed: the simulated provider reads plain JSON only.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_session_crosses_too() {
    crossing(true).await;
}

async fn crossing(gzip: bool) {
    let setup = Setup::start().await;
    let (headers, mut body) = codex_first_turn("gpt-5.5", SESSION);

    // Turns 1 and 2 on acct-a: 45 %, then 90 %, over the 85 % threshold.
    for turn in 1..=2 {
        let (status, _, reply) = setup.send(&headers, &body, false).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "turn {turn}: {}",
            String::from_utf8_lossy(&reply)
        );
        assert!(completed(&reply), "turn {turn} streamed to its end");
        codex_next_turn(&mut body, &reply, &format!("Turn {}: next step.", turn + 1));
    }
    assert_eq!(setup.handoffs(1).await, 1, "a handoff is written at 90 %");
    let handoff = setup.store.list(None, Some(SESSION)).await.unwrap();
    assert_eq!(&*handoff[0].from_account, "acct-a");
    let summaries = setup.sim.requests().iter().filter(|r| r.summary).count();
    assert_eq!(summaries, 1, "one summary call");
    assert!(
        setup
            .turns()
            .iter()
            .all(|r| r.account.as_deref() == Some("acct-a")),
        "the session stays on its account"
    );

    // acct-a is used up elsewhere: the next turn gets its 429, passed to the client.
    setup.sim.set_used("acct-a", 100.0);
    setup.sim.clear_requests();
    let (status, acted, _) = setup.send(&headers, &body, false).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(acted, None);
    assert_eq!(
        setup.handoffs(1).await,
        1,
        "the handoff waits for the retry"
    );

    // The client's retry of the same turn lands on acct-b, with the handoff and without
    // acct-a's state.
    let (status, acted, reply) = setup.send(&headers, &body, gzip).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert!(completed(&reply));
    assert!(
        acted.as_deref().is_some_and(|a| a.contains("injected")),
        "{acted:?}"
    );
    let turns = setup.turns();
    assert_eq!(turns.len(), 2);
    let (refused, retry) = (&turns[0], &turns[1]);
    assert_eq!(refused.account.as_deref(), Some("acct-a"));
    assert!(
        setup.owners(refused).contains(&Some("acct-a".into())),
        "the turn carried acct-a's state"
    );
    assert_eq!(retry.account.as_deref(), Some("acct-b"));
    assert_eq!(retry.rejected, None);
    assert!(
        contains(&retry.body, HANDOFF_TAG),
        "the handoff is injected"
    );
    assert!(
        contains(&retry.body, "Adding a --json flag"),
        "with the summary's words"
    );
    assert!(
        setup
            .owners(retry)
            .iter()
            .all(|o| o.as_deref() != Some("acct-a")),
        "no state of acct-a reaches acct-b"
    );
    assert!(
        retry.headers.get("content-length").is_none(),
        "the rewritten body went out chunked"
    );
    assert_eq!(
        retry.headers.get("transfer-encoding").map(|v| v.as_bytes()),
        Some(&b"chunked"[..])
    );
    assert!(retry.headers.get("content-encoding").is_none());
    assert!(retry.json().is_some(), "the provider got plain JSON");
    assert_eq!(
        setup.handoffs(0).await,
        0,
        "the delivered handoff is consumed"
    );

    // The next turn resends the whole history, acct-a's state included: it stays on acct-b,
    // scrubbed again, without a second handoff.
    codex_next_turn(&mut body, &reply, "Turn 4: next step.");
    setup.sim.clear_requests();
    let (status, _, reply) = setup.send(&headers, &body, gzip).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let turns = setup.turns();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].account.as_deref(), Some("acct-b"));
    assert!(!contains(&turns[0].body, HANDOFF_TAG));
    let owners = setup.owners(&turns[0]);
    assert!(
        owners.contains(&Some("acct-b".into())),
        "acct-b's own state is kept"
    );
    assert!(owners.iter().all(|o| o.as_deref() != Some("acct-a")));

    setup.proxy.stop();
    setup.sim.shutdown().await;
}

/// pingora cannot send a request again once the response is known: a rejection of
/// account-bound state that the relay could not foresee (here a second proxy, whose store
/// never saw the session, sends it to acct-b) reaches the client unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_the_relay_could_not_foresee_reaches_the_client() {
    let setup = Setup::start().await;
    let (headers, mut body) = codex_first_turn("gpt-5.5", SESSION);
    let (status, _, reply) = setup.send(&headers, &body, false).await;
    assert_eq!(status, StatusCode::OK);
    codex_next_turn(&mut body, &reply, "Turn 2: next step.");

    let unaware = proxy(
        &setup.sim,
        Arc::new(MemoryStore::new()),
        ["acct-b", "acct-a"],
        None,
    );
    let (status, acted, reply) = setup.send_to(&unaware, &headers, &body, false).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(acted, None);
    assert!(
        contains(&reply, "invalid_encrypted_content"),
        "the provider's own error"
    );
    let refused = setup.turns().pop().expect("a turn");
    assert_eq!(refused.account.as_deref(), Some("acct-b"));
    assert_eq!(
        refused.rejected.as_deref(),
        Some("invalid_encrypted_content")
    );

    unaware.stop();
    setup.proxy.stop();
    setup.sim.shutdown().await;
}

/// A body over the relay's limit is never held: on a switch it goes out as the client sent
/// it (its own `content-length`, every byte), and the provider answers for the state it
/// carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_goes_through_untouched() {
    let setup = Setup::start_with(Some(16 * 1024)).await;
    let (headers, mut body) = codex_first_turn("gpt-5.5", SESSION);
    let (status, _, reply) = setup.send(&headers, &body, false).await;
    assert_eq!(status, StatusCode::OK);
    codex_next_turn(&mut body, &reply, "Turn 2: next step.");
    setup.sim.set_used("acct-a", 100.0);
    let (status, _, _) = setup.send(&headers, &body, false).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

    setup.sim.clear_requests();
    let (status, acted, _) = setup.send(&headers, &body, false).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "acct-a's state reached acct-b"
    );
    assert_eq!(acted, None);
    let sent = setup.turns().pop().expect("a turn");
    assert_eq!(sent.account.as_deref(), Some("acct-b"));
    assert_eq!(
        sent.body,
        serde_json::to_vec(&body).unwrap(),
        "byte for byte"
    );
    assert_eq!(
        sent.headers.get("content-length").map(|v| v.as_bytes()),
        Some(sent.body.len().to_string().as_bytes())
    );

    setup.proxy.stop();
    setup.sim.shutdown().await;
}
