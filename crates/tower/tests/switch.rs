//! The session keeps working after an account switch: the lasting scrub, the repair of a
//! rejected request, success only on a completed response, release before a retry. Against a
//! provider double that mints account-bound state per account and rejects foreign state with
//! the real error bodies.

mod bound;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bound::{Body, Mode, Provider, full};
use bytes::Bytes;
use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_tower::injection::{RELAY_HEADER, RelayAction};
use context_relay_tower::{Background, ComboName, InjectionLayer, ResolvedAccount};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

const KEY: &str = "sk-client";

struct Relay {
    svc: BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>,
    provider: Provider,
    store: Arc<dyn HandoffStore>,
    account: Arc<Mutex<ResolvedAccount>>,
    background: Background,
}

impl Relay {
    fn new() -> Self {
        Self::on(Arc::new(MemoryStore::new()))
    }

    fn on(store: Arc<dyn HandoffStore>) -> Self {
        Self::sharing(store, Provider::default())
    }

    /// A relay (one replica) on `store`, in front of `provider`.
    fn sharing(store: Arc<dyn HandoffStore>, provider: Provider) -> Self {
        let account = Arc::new(Mutex::new(ResolvedAccount::new("codex", "acct-a")));
        let layer = InjectionLayer::new(store.clone());
        let background = layer.background();
        let p = provider.clone();
        let acc = account.clone();
        let svc = ServiceBuilder::new()
            .map_request(move |mut req: Request<Body>| {
                req.extensions_mut().insert(acc.lock().unwrap().clone());
                req
            })
            .map_response(
                |r: Response<context_relay_tower::injection::ResponseBody<Body>>| {
                    r.map(|b| b.boxed())
                },
            )
            .layer(layer)
            .service(tower::service_fn(move |req| p.clone().answer(req)));
        Self {
            svc: BoxCloneSyncService::new(svc),
            provider,
            store,
            account,
            background,
        }
    }

    fn use_account(&self, account: &str) {
        *self.account.lock().unwrap() = ResolvedAccount::new("codex", account);
    }

    async fn send(&self, req: Request<Body>) -> (StatusCode, http::HeaderMap, Bytes) {
        let res = self.svc.clone().oneshot(req).await.expect("never fails");
        let (parts, body) = res.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        self.background.idle().await;
        (parts.status, parts.headers, bytes)
    }

    async fn upsert_handoff(&self, session: &str, from: &str) {
        let now = SystemTime::now();
        let record = HandoffRecord {
            version: 1,
            tenant: tenant().into(),
            session: session.into(),
            combo: "relay".into(),
            from_provider: "codex".into(),
            from_account: from.into(),
            handoff: Handoff {
                summary: "Adding a --json flag to the CLI".into(),
                ..Handoff::default()
            },
            message_count: 12,
            model: "gpt-5".into(),
            threshold: 0.85,
            generated_at: now,
            expires_at: now + Duration::from_secs(3600),
        };
        self.store.upsert(record).await.unwrap();
    }

    async fn handoff_left(&self, session: &str) -> bool {
        self.store
            .get(&HandoffKey::new(tenant(), session, "relay"))
            .await
            .unwrap()
            .is_some()
    }
}

fn tenant() -> String {
    let mut h = http::HeaderMap::new();
    h.insert("authorization", format!("Bearer {KEY}").parse().unwrap());
    context_relay_core::session::tenant(&h)
}

fn post(path: &str, session: &str, body: &Value) -> Request<Body> {
    let mut req = Request::post(path)
        .header("session-id", session)
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .body(full(body.to_string()))
        .unwrap();
    req.extensions_mut().insert(ComboName::new("relay"));
    req
}

/// A Codex-like client: `store: false`, the whole history resent every turn, the turn-state
/// header echoed.
struct Codex {
    session: &'static str,
    history: Vec<Value>,
    turn_state: Option<String>,
}

impl Codex {
    fn new(session: &'static str) -> Self {
        Self {
            session,
            history: vec![
                json!({"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex."}]}),
            ],
            turn_state: None,
        }
    }

    fn request(&mut self, prompt: &str) -> Request<Body> {
        self.history.push(
            json!({"type":"message","role":"user","content":[{"type":"input_text","text":prompt}]}),
        );
        let body = json!({
            "model": "gpt-5.5", "stream": true, "store": false,
            "include": ["reasoning.encrypted_content"],
            "input": self.history,
        });
        let mut req = post("/v1/responses", self.session, &body);
        if let Some(ts) = &self.turn_state {
            req.headers_mut()
                .insert("x-codex-turn-state", ts.parse().unwrap());
        }
        req
    }

    /// Keeps what a completed stream returned, as Codex does.
    fn absorb(&mut self, headers: &http::HeaderMap, stream: &[u8]) -> bool {
        let text = String::from_utf8_lossy(stream);
        let mut completed = false;
        for line in text.lines() {
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            let event: Value = serde_json::from_str(data).unwrap();
            match event["type"].as_str() {
                Some("response.output_item.done") => self.history.push(event["item"].clone()),
                Some("response.completed") => completed = true,
                _ => {}
            }
        }
        self.turn_state = headers
            .get("x-codex-turn-state")
            .map(|v| v.to_str().unwrap().to_owned());
        completed
    }

    async fn turn(&mut self, relay: &Relay, prompt: &str) -> http::HeaderMap {
        let (status, headers, body) = relay.send(self.request(prompt)).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        assert!(self.absorb(&headers, &body), "stream completed");
        headers
    }
}

/// A Claude Code-like client: thinking on, every signed thinking block resent.
struct Claude {
    session: &'static str,
    messages: Vec<Value>,
}

impl Claude {
    fn new(session: &'static str) -> Self {
        Self {
            session,
            messages: Vec::new(),
        }
    }

    async fn turn(&mut self, relay: &Relay, prompt: &str) -> http::HeaderMap {
        self.messages.push(json!({"role":"user","content":prompt}));
        let body = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 32000,
            "thinking": {"type": "enabled", "budget_tokens": 8000},
            "messages": self.messages,
        });
        let mut req = post("/v1/messages", self.session, &body);
        req.headers_mut().remove("session-id");
        req.headers_mut()
            .insert("x-claude-code-session-id", self.session.parse().unwrap());
        let (status, headers, body) = relay.send(req).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let reply: Value = serde_json::from_slice(&body).unwrap();
        self.messages
            .push(json!({"role":"assistant","content":reply["content"]}));
        headers
    }
}

fn action(headers: &http::HeaderMap) -> String {
    headers
        .get(RELAY_HEADER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn codex_history_keeps_working_for_three_turns_after_a_switch() {
    let relay = Relay::new();
    let mut codex = Codex::new("codex-1");
    for i in 0..3 {
        codex.turn(&relay, &format!("step {i}")).await;
    }
    relay.upsert_handoff("codex-1", "acct-a").await;
    relay.use_account("acct-b");
    for i in 3..6 {
        let headers = codex.turn(&relay, &format!("step {i}")).await;
        if i == 3 {
            assert_eq!(action(&headers), "injected, scrubbed");
        } else {
            assert_eq!(action(&headers), "scrubbed");
        }
    }
    let received = relay.provider.received();
    assert!(
        received.iter().all(|r| r.status == StatusCode::OK),
        "no rejection, no repair"
    );
    assert_eq!(received.len(), 6);
    let on_b: Vec<_> = received.iter().filter(|r| r.account == "acct-b").collect();
    assert_eq!(on_b.len(), 3);
    for (turn, r) in on_b.iter().enumerate() {
        assert!(
            !r.carries_state_of("acct-a"),
            "turn {turn} on B carried A's state"
        );
        // B's own reasoning from its earlier turns is forwarded.
        let own = r.text.matches(":acct-b:").count();
        assert!(own >= turn, "turn {turn}: {own} of B's items");
    }
    assert!(on_b[2].text.contains("enc:acct-b:4") && on_b[2].text.contains("enc:acct-b:5"));
    assert_eq!(received.iter().map(|r| r.handoffs()).sum::<usize>(), 1);
    assert_eq!(on_b[0].handoffs(), 1);
    assert!(!relay.handoff_left("codex-1").await);
}

#[tokio::test]
async fn claude_history_keeps_working_for_three_turns_after_a_switch() {
    let relay = Relay::new();
    let mut claude = Claude::new("claude-1");
    for i in 0..3 {
        claude.turn(&relay, &format!("question {i}")).await;
    }
    relay.upsert_handoff("claude-1", "acct-a").await;
    relay.use_account("acct-b");
    for i in 3..6 {
        claude.turn(&relay, &format!("question {i}")).await;
    }
    let received = relay.provider.received();
    assert!(received.iter().all(|r| r.status == StatusCode::OK));
    let on_b: Vec<_> = received.iter().filter(|r| r.account == "acct-b").collect();
    assert_eq!(on_b.len(), 3);
    for r in &on_b {
        assert!(!r.carries_state_of("acct-a"));
    }
    assert!(on_b[2].text.contains("sig:acct-b:4") && on_b[2].text.contains("sig:acct-b:5"));
    assert_eq!(received.iter().map(|r| r.handoffs()).sum::<usize>(), 1);
}

#[tokio::test]
async fn a_late_handoff_strips_only_the_old_accounts_state() {
    let relay = Relay::new();
    let mut codex = Codex::new("late-1");
    codex.turn(&relay, "a").await;
    relay.use_account("acct-b");
    codex.turn(&relay, "b").await;
    // The summary of A's part arrives only now.
    relay.upsert_handoff("late-1", "acct-a").await;
    let headers = codex.turn(&relay, "c").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    let last = relay.provider.received().pop().unwrap();
    assert_eq!(last.handoffs(), 1);
    assert!(!last.carries_state_of("acct-a"));
    assert!(last.text.contains("enc:acct-b:2"), "B's own reasoning kept");
}

#[tokio::test]
async fn a_rejected_request_is_repaired_once_even_without_a_known_switch() {
    // The client comes from another gateway: its history holds acct-x's state, and the relay
    // has never seen the session.
    let relay = Relay::new();
    let mut codex = Codex::new("stranger");
    codex.history.push(
        json!({"type":"reasoning","id":"rs_x","summary":[],"encrypted_content":"enc:acct-x:1"}),
    );
    let headers = codex.turn(&relay, "go on").await;
    assert_eq!(action(&headers), "repaired");
    let received = relay.provider.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].status, StatusCode::BAD_REQUEST);
    assert!(received[0].carries_state_of("acct-x"));
    assert_eq!(received[1].status, StatusCode::OK);
    assert!(!received[1].carries_state_of("acct-x"));
    assert_eq!(received[1].account, "acct-a", "retried on the same account");

    // The same for Anthropic's signed thinking blocks.
    let mut claude = Claude::new("claude-stranger");
    claude.messages.push(json!({"role":"user","content":"q"}));
    claude.messages.push(json!({"role":"assistant","content":[
        {"type":"thinking","thinking":"t","signature":"sig:acct-x:9"},{"type":"text","text":"a"}]}));
    let headers = claude.turn(&relay, "next").await;
    assert_eq!(action(&headers), "repaired");
    let received = relay.provider.received();
    assert_eq!(received.len(), 4);
    assert!(!received[3].carries_state_of("acct-x"));
}

#[tokio::test]
async fn an_unrelated_400_is_passed_on_unretried() {
    let relay = Relay::new();
    relay.provider.with(|s| {
        s.next_error = Some((StatusCode::BAD_REQUEST, bound::UNRELATED_400));
    });
    let mut codex = Codex::new("plain");
    let (status, headers, body) = relay.send(codex.request("x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, Bytes::from_static(bound::UNRELATED_400.as_bytes()));
    assert!(headers.get(RELAY_HEADER).is_none());
    assert_eq!(relay.provider.received().len(), 1);
}

#[tokio::test]
async fn a_failure_in_band_before_any_output_is_repaired_invisibly() {
    let relay = Relay::new();
    relay.provider.with(|s| s.mode = Mode::FailInBand);
    let mut codex = Codex::new("inband");
    codex.history.push(
        json!({"type":"reasoning","id":"rs_x","summary":[],"encrypted_content":"enc:acct-x:1"}),
    );
    let (status, _, body) = relay.send(codex.request("go")).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8_lossy(&body);
    assert!(!text.contains("response.failed"), "{text}");
    assert_eq!(text.matches("event: response.created").count(), 1, "{text}");
    assert!(text.contains("response.completed"));
    assert_eq!(relay.provider.received().len(), 2);
}

#[tokio::test]
async fn an_in_band_failure_keeps_the_handoff_and_the_affinity() {
    let relay = Relay::new();
    let mut codex = Codex::new("fails");
    codex.turn(&relay, "a").await;
    relay.upsert_handoff("fails", "acct-a").await;
    relay.use_account("acct-b");
    // Not repairable: a server error in band.
    relay.provider.with(|s| {
        s.mode = Mode::FailInBand;
        s.next_error = Some((
            StatusCode::BAD_REQUEST,
            r#"{"error":{"code":"server_error","message":"boom"}}"#,
        ));
    });
    let (status, _, body) = relay.send(codex.request("b")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("response.failed"));
    assert!(
        relay.handoff_left("fails").await,
        "the next attempt gets it again"
    );
    // The affinity did not move: the retry is still a switch, injected and scrubbed.
    relay.provider.with(|s| s.mode = Mode::Reject);
    let headers = codex.turn(&relay, "b again").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    assert!(!relay.handoff_left("fails").await);
}

#[tokio::test]
async fn an_error_status_releases_the_claim_before_the_response_is_handed_back() {
    let relay = Relay::new();
    let mut codex = Codex::new("rotate");
    codex.turn(&relay, "a").await;
    relay.upsert_handoff("rotate", "acct-a").await;
    relay.use_account("acct-b");
    relay.provider.with(|s| {
        s.next_error = Some((
            StatusCode::TOO_MANY_REQUESTS,
            r#"{"error":{"code":"rate_limit_exceeded"}}"#,
        ));
    });
    let res = relay.svc.clone().oneshot(codex.request("b")).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // No waiting for background work: a retry on the next account can claim it now.
    let key = HandoffKey::new(tenant(), "rotate", "relay");
    let claim = relay
        .store
        .claim(&key, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(claim.is_some(), "released synchronously");
    relay.store.release(&claim.unwrap()).await.unwrap();
    drop(res);
    relay.use_account("acct-c");
    let headers = codex.turn(&relay, "b").await;
    assert_eq!(action(&headers), "injected, scrubbed");
    assert_eq!(relay.provider.received().last().unwrap().handoffs(), 1);
}

#[tokio::test]
async fn a_session_that_never_switched_is_passed_through_untouched() {
    let relay = Relay::new();
    let mut codex = Codex::new("steady");
    for i in 0..3 {
        let headers = codex.turn(&relay, &format!("{i}")).await;
        assert!(headers.get(RELAY_HEADER).is_none());
    }
    let received = relay.provider.received();
    // Every request reached the provider byte for byte, turn state included.
    assert!(received.iter().all(|r| r.status == StatusCode::OK));
    assert!(received[2].headers.get("x-codex-turn-state").is_some());
    assert!(received[2].text.contains("enc:acct-a:1") && received[2].text.contains("enc:acct-a:2"));
    assert_eq!(RelayAction::default().header_value(), None);
}

#[tokio::test]
async fn affinity_is_kept_per_combo() {
    let relay = Relay::new();
    let mut codex = Codex::new("two-combos");
    codex.turn(&relay, "on combo relay").await;
    // The same session through another combo, served by another account: that combo's first
    // request, not a switch of the first combo.
    relay.use_account("acct-b");
    let mut req = codex.request("on combo fast");
    req.extensions_mut().insert(ComboName::new("fast"));
    let (status, headers, body) = relay.send(req).await;
    // acct-b rejects acct-a's reasoning: repaired, not scrubbed as a switch.
    assert_eq!(status, StatusCode::OK);
    assert_eq!(action(&headers), "repaired");
    codex.absorb(&headers, &body);
    // Back on the first combo with its own account: not a switch, nothing touched but what
    // acct-a cannot read (the repair strips it).
    relay.use_account("acct-a");
    let before = relay.provider.received().len();
    let headers = codex.turn(&relay, "on combo relay again").await;
    assert_eq!(action(&headers), "repaired");
    let received = relay.provider.received();
    assert_eq!(received.len(), before + 2);
    assert!(
        received[before].carries_state_of("acct-a"),
        "not scrubbed as a switch"
    );
}

/// A redis-server of our own on a free loopback port (or `REDIS_URL`), stopped on drop.
struct Redis {
    url: String,
    child: Option<std::process::Child>,
}

impl Redis {
    fn start() -> Self {
        use std::io::BufRead;
        if let Ok(url) = std::env::var("REDIS_URL")
            && !url.is_empty()
        {
            return Self { url, child: None };
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("redis-server (install it or set REDIS_URL)");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        while let Some(Ok(line)) = lines.next() {
            if line.contains("Ready to accept connections") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Self {
            url: format!("redis://127.0.0.1:{port}/"),
            child: Some(child),
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_alternate_a_session_across_a_switch() {
    let redis = Redis::start();
    let prefix = format!(
        "cr-switch-test:{}:{:?}:",
        std::process::id(),
        SystemTime::now()
    );
    let provider = Provider::default();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let store = context_relay_store::RedisStore::builder(redis.url.clone())
            .prefix(prefix.clone())
            .connect()
            .await
            .unwrap();
        replicas.push(Relay::sharing(Arc::new(store), provider.clone()));
    }
    let mut codex = Codex::new("replicated");
    codex.turn(&replicas[0], "a1").await;
    codex.turn(&replicas[1], "a2").await;
    replicas[0].upsert_handoff("replicated", "acct-a").await;
    for r in &replicas {
        r.use_account("acct-b");
    }
    for (turn, i) in [0, 1, 0, 1].into_iter().enumerate() {
        let headers = codex.turn(&replicas[i], &format!("b{turn}")).await;
        let expected = if turn == 0 {
            "injected, scrubbed"
        } else {
            "scrubbed"
        };
        assert_eq!(action(&headers), expected, "turn {turn} on replica {i}");
    }
    // And back to acct-a on the other replica: a switch again, seen at once.
    for r in &replicas {
        r.use_account("acct-a");
    }
    let headers = codex.turn(&replicas[1], "a3").await;
    assert_eq!(action(&headers), "scrubbed");
    let received = provider.received();
    assert!(
        received.iter().all(|r| r.status == StatusCode::OK),
        "no rejection, no repair"
    );
    for r in received.iter().filter(|r| r.account == "acct-b") {
        assert!(!r.carries_state_of("acct-a"));
    }
    assert!(!received.last().unwrap().carries_state_of("acct-b"));
    assert_eq!(received.iter().map(|r| r.handoffs()).sum::<usize>(), 1);
}
