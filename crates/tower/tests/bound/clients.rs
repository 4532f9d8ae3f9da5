//! The relay under test and the clients that drive it: a Codex-like client (`store: false`,
//! whole history resent, turn state echoed) and a Claude Code-like one (thinking on, signed
//! blocks resent).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_tower::injection::RELAY_HEADER;
use context_relay_tower::{Background, ComboName, ContextRelay, ResolvedAccount};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

use super::{Body, Provider, full};

pub const KEY: &str = "sk-client";

pub struct Relay {
    pub svc: BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>,
    pub provider: Provider,
    pub store: Arc<dyn HandoffStore>,
    pub account: Arc<Mutex<ResolvedAccount>>,
    pub background: Background,
}

impl Relay {
    pub fn new() -> Self {
        Self::on(Arc::new(MemoryStore::new()))
    }

    pub fn on(store: Arc<dyn HandoffStore>) -> Self {
        Self::sharing(store, Provider::default())
    }

    /// A relay (one replica) on `store`, in front of `provider`.
    pub fn sharing(store: Arc<dyn HandoffStore>, provider: Provider) -> Self {
        let account = Arc::new(Mutex::new(ResolvedAccount::new("codex", "acct-a")));
        let relay = ContextRelay::builder(store.clone()).build();
        let (layer, background) = (relay.injection_layer(), relay.background());
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

    pub fn use_account(&self, account: &str) {
        *self.account.lock().unwrap() = ResolvedAccount::new("codex", account);
    }

    pub async fn send(&self, req: Request<Body>) -> (StatusCode, http::HeaderMap, Bytes) {
        let res = self.svc.clone().oneshot(req).await.expect("never fails");
        let (parts, body) = res.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        self.background.idle().await;
        (parts.status, parts.headers, bytes)
    }

    pub async fn upsert_handoff(&self, session: &str, from: &str) {
        self.upsert_handoff_of(session, from, None).await;
    }

    /// A handoff of the conversation opened by `opening` (any of the session's when `None`).
    pub async fn upsert_handoff_of(&self, session: &str, from: &str, opening: Option<u64>) {
        let now = SystemTime::now();
        let mut record = HandoffRecord {
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
            conversation: None,
            compaction: false,
            model: "gpt-5".into(),
            threshold: 0.85,
            generated_at: now,
            expires_at: now + Duration::from_secs(3600),
            kind: Default::default(),
        };
        record.set_conversation(opening);
        self.store.upsert(record).await.unwrap();
    }

    pub async fn handoff_left(&self, session: &str) -> bool {
        self.store
            .get(&HandoffKey::new(tenant(), session, "relay"))
            .await
            .unwrap()
            .is_some()
    }
}

pub fn tenant() -> String {
    let mut h = http::HeaderMap::new();
    h.insert("authorization", format!("Bearer {KEY}").parse().unwrap());
    context_relay_core::session::tenant(&h)
}

pub fn post(path: &str, session: &str, body: &Value) -> Request<Body> {
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
pub struct Codex {
    pub session: &'static str,
    pub history: Vec<Value>,
    pub turn_state: Option<String>,
}

impl Codex {
    pub fn new(session: &'static str) -> Self {
        Self {
            session,
            history: vec![
                json!({"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex."}]}),
            ],
            turn_state: None,
        }
    }

    pub fn request(&mut self, prompt: &str) -> Request<Body> {
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
    pub fn absorb(&mut self, headers: &http::HeaderMap, stream: &[u8]) -> bool {
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

    pub async fn turn(&mut self, relay: &Relay, prompt: &str) -> http::HeaderMap {
        let (status, headers, body) = relay.send(self.request(prompt)).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        assert!(self.absorb(&headers, &body), "stream completed");
        headers
    }
}

/// A Claude Code-like client: thinking on, every signed thinking block resent.
pub struct Claude {
    pub session: &'static str,
    pub messages: Vec<Value>,
}

impl Claude {
    pub fn new(session: &'static str) -> Self {
        Self {
            session,
            messages: Vec::new(),
        }
    }

    /// The request of the turn `prompt` (the prompt kept in the history).
    pub fn request(&mut self, prompt: &str) -> Request<Body> {
        self.messages.push(json!({"role":"user","content":prompt}));
        self.resend()
    }

    /// The request of the history as it is (a retry's).
    pub fn resend(&self) -> Request<Body> {
        let body = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 32000,
            "thinking": {"type": "enabled", "budget_tokens": 8000},
            "messages": self.messages,
        });
        let mut req = post("/v1/messages", self.session, &body);
        req.headers_mut().remove("session-id");
        req.headers_mut()
            .insert("x-claude-code-session-id", self.session.parse().unwrap());
        req
    }

    /// Keeps the reply of a turn answered `status`, `body`.
    pub fn absorb(&mut self, status: StatusCode, body: &[u8]) {
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(body));
        let reply: Value = serde_json::from_slice(body).unwrap();
        self.messages
            .push(json!({"role":"assistant","content":reply["content"]}));
    }

    pub async fn turn(&mut self, relay: &Relay, prompt: &str) -> http::HeaderMap {
        let req = self.request(prompt);
        let (status, headers, body) = relay.send(req).await;
        self.absorb(status, &body);
        headers
    }
}

pub fn action(headers: &http::HeaderMap) -> String {
    headers
        .get(RELAY_HEADER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}
