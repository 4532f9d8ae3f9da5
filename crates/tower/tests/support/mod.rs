//! A relay stack over a scripted fake upstream, for layer tests.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_store::{HandoffStore, MemoryStore};
use context_relay_tower::{
    Background, ComboName, ContextRelay, ContextRelayBuilder, ResolvedAccount, SummaryCall,
};
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use tokio::sync::{Semaphore, mpsc};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The parameter rules of real providers, shared with the simulated provider.
pub use context_relay_sim::rules as sim_rules;

pub type Body = BoxBody<Bytes, TestError>;

/// A concrete body error (a `Box<dyn Error>` inside the request type trips higher-ranked
/// lifetime inference when the stack is moved into spawned tasks).
#[derive(Debug)]
pub struct TestError(pub String);

impl std::fmt::Display for TestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TestError {}

impl From<&str> for TestError {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into())
        .map_err(|e: Infallible| match e {})
        .boxed()
}

/// One request the upstream received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    /// The request carried the relay's [`SummaryCall`] marker.
    pub summary_call: bool,
    pub account: Option<String>,
}

impl Seen {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("upstream received JSON")
    }

    pub fn has_handoff(&self) -> bool {
        let needle = b"<context_handoff>";
        self.body.windows(needle.len()).any(|w| w == needle)
    }
}

/// The frames of one streamed turn, sent by the test.
pub type Frames = Arc<Mutex<Option<mpsc::Receiver<Result<Frame<Bytes>, TestError>>>>>;

/// How the fake upstream answers turns.
#[derive(Clone)]
pub enum Turn {
    /// A JSON chat reply.
    Json,
    /// Status only, JSON error body.
    Status(StatusCode),
    /// An SSE body whose frames the test sends itself.
    Stream(Frames),
    /// A body sent as is with these `content-type` and `content-encoding`.
    Encoded {
        content_type: &'static str,
        encoding: &'static str,
        body: Bytes,
    },
}

pub struct Script {
    /// Percent used reported per account (Codex header), default 10.
    pub percent: HashMap<String, f64>,
    pub turn: Turn,
    /// Reply to summary requests (`content` of a chat reply).
    pub summary_content: String,
    pub summary_status: StatusCode,
    /// When set, summary requests wait for a permit (lets a test hold a summary open).
    pub summary_gate: Option<Arc<Semaphore>>,
    /// Whose parameter rules every request must pass (real providers refuse what they do
    /// not support, with their exact error bodies).
    pub backend: sim_rules::Backend,
    pub seen: Vec<Seen>,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            percent: HashMap::new(),
            turn: Turn::Json,
            summary_content: r#"{"summary":"Adding a --json flag to the CLI","keyDecisions":["use serde"],"taskProgress":"flag parsed; tests pending","activeEntities":["src/cli.rs"]}"#.to_owned(),
            summary_status: StatusCode::OK,
            summary_gate: None,
            backend: sim_rules::Backend::Api,
            seen: Vec::new(),
        }
    }
}

#[derive(Clone, Default)]
pub struct Upstream {
    pub script: Arc<Mutex<Script>>,
}

impl Upstream {
    pub fn set_percent(&self, account: &str, p: f64) {
        self.script
            .lock()
            .unwrap()
            .percent
            .insert(account.to_owned(), p);
    }
    pub fn seen(&self) -> Vec<Seen> {
        self.script.lock().unwrap().seen.clone()
    }
    pub fn turns(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| !s.summary_call)
            .collect()
    }
    pub fn summaries(&self) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.summary_call).collect()
    }
    /// The next turn streams the frames sent on the returned channel (dropping it ends the
    /// stream).
    pub fn stream_next_turn(&self) -> mpsc::Sender<Result<Frame<Bytes>, TestError>> {
        let (tx, rx) = mpsc::channel(4);
        self.with(|s| s.turn = Turn::Stream(Arc::new(Mutex::new(Some(rx)))));
        tx
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut Script) -> R) -> R {
        f(&mut self.script.lock().unwrap())
    }

    async fn answer<B>(self, req: Request<B>) -> Result<Response<Body>, Infallible>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: std::fmt::Debug,
    {
        let summary_call = req.extensions().get::<SummaryCall>().is_some();
        let account = req
            .extensions()
            .get::<ResolvedAccount>()
            .map(|a| a.account().to_string());
        let path = req.uri().path().to_owned();
        let headers = req.headers().clone();
        let body = read_like_hyper(req.into_body()).await;
        let seen_body = body.clone();
        let refused = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| sim_rules::check(self.script.lock().unwrap().backend, &path, &v));
        let (percent, turn, summary, gate) = {
            let mut s = self.script.lock().unwrap();
            s.seen.push(Seen {
                path: path.clone(),
                headers,
                body,
                summary_call,
                account: account.clone(),
            });
            let p = account
                .as_ref()
                .and_then(|a| s.percent.get(a).copied())
                .unwrap_or(10.0);
            (
                p,
                s.turn.clone(),
                (s.summary_status, s.summary_content.clone()),
                s.summary_gate.clone(),
            )
        };
        let mut res = if let Some((status, error)) = refused {
            let mut r = Response::new(full(error));
            *r.status_mut() = StatusCode::from_u16(status).expect("status");
            r
        } else if summary_call {
            if let Some(gate) = gate {
                gate.acquire().await.expect("gate").forget();
            }
            let streamed = serde_json::from_slice::<serde_json::Value>(&seen_body)
                .ok()
                .and_then(|v| v.get("stream").and_then(serde_json::Value::as_bool))
                == Some(true);
            let mut r = if summary.0.is_success() && streamed {
                let mut r = Response::new(full(summary_events(&path, &summary.1)));
                r.headers_mut()
                    .insert("content-type", "text/event-stream".parse().unwrap());
                r
            } else if summary.0.is_success() {
                Response::new(full(summary_reply(&path, &summary.1)))
            } else {
                Response::new(full(
                    r#"{"error":{"message":"summary refused","type":"invalid_request_error"}}"#,
                ))
            };
            *r.status_mut() = summary.0;
            r
        } else {
            match turn {
                Turn::Json => Response::new(full(
                    r#"{"choices":[{"message":{"role":"assistant","content":"Done: the flag parses."}}]}"#,
                )),
                Turn::Status(code) => {
                    let mut r = Response::new(full(r#"{"error":{"message":"upstream failed"}}"#));
                    *r.status_mut() = code;
                    r
                }
                Turn::Encoded {
                    content_type,
                    encoding,
                    body,
                } => {
                    let mut r = Response::new(full(body));
                    r.headers_mut()
                        .insert("content-type", content_type.parse().unwrap());
                    r.headers_mut()
                        .insert("content-encoding", encoding.parse().unwrap());
                    r
                }
                Turn::Stream(rx) => {
                    let rx = rx
                        .lock()
                        .unwrap()
                        .take()
                        .expect("one streamed turn per receiver");
                    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                        rx.recv().await.map(|item| (item, rx))
                    });
                    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
                    r.headers_mut()
                        .insert("content-type", "text/event-stream".parse().unwrap());
                    r
                }
            }
        };
        res.headers_mut().insert(
            "x-codex-primary-used-percent",
            format!("{percent}").parse().unwrap(),
        );
        Ok(res)
    }
}

/// Reads a body the way hyper's client does: frames until the body says it has ended (the
/// trailing `None` is never asked for).
pub async fn read_like_hyper<B>(body: B) -> Bytes
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let mut body = std::pin::pin!(body);
    let mut out = bytes::BytesMut::new();
    while !body.is_end_stream() {
        match body.as_mut().frame().await {
            Some(frame) => {
                if let Ok(data) = frame.expect("body frame").into_data() {
                    out.extend_from_slice(&data);
                }
            }
            None => break,
        }
    }
    out.freeze()
}

/// A streamed reply carrying `text`, in the API shape of `path` (with its terminal event).
pub fn summary_events(path: &str, text: &str) -> String {
    let t = serde_json::Value::String(text.to_owned());
    if path.ends_with("/responses") {
        format!(
            "event: response.created\ndata: {{\"type\":\"response.created\"}}\n\n\
             event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"delta\":{t}}}\n\n\
             event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"status\":\"completed\"}}}}\n\n"
        )
    } else if path.ends_with("/messages") {
        format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{t}}}}}\n\n\
             event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        )
    } else {
        format!(
            "data: {{\"choices\":[{{\"delta\":{{\"content\":{t}}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
        )
    }
}

/// A non-streamed reply carrying `text`, in the API shape of `path`.
pub fn summary_reply(path: &str, text: &str) -> String {
    let v = if path.ends_with("/responses") {
        serde_json::json!({"object": "response", "status": "completed", "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        ]})
    } else if path.ends_with("/messages") {
        serde_json::json!({"type": "message", "role": "assistant", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": text}]})
    } else {
        serde_json::json!({"choices":[{"index": 0, "finish_reason": "stop",
            "message":{"role":"assistant","content": text}}]})
    };
    v.to_string()
}

/// Sets `ResolvedAccount` on the request and the response, like a real account resolver.
#[derive(Clone)]
pub struct Resolver<S> {
    inner: S,
    pub account: Arc<Mutex<ResolvedAccount>>,
}

impl<S, B> Service<Request<B>> for Resolver<S>
where
    S: Service<Request<B>, Response = Response<Body>> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let account = self.account.lock().unwrap().clone();
        req.extensions_mut().insert(account.clone());
        let fut = self.inner.call(req);
        Box::pin(async move {
            let mut res = fut.await?;
            res.extensions_mut().insert(account);
            Ok(res)
        })
    }
}

/// The whole relay stack (generation, resolver, injection, upstream; minus the combo service:
/// tests set `ComboName` themselves).
pub struct Stack {
    pub svc: BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>,
    pub upstream: Upstream,
    pub store: Arc<dyn HandoffStore>,
    pub account: Arc<Mutex<ResolvedAccount>>,
    /// The background work of both layers (one tracker: one relay).
    pub background: Background,
}

impl Stack {
    pub fn new() -> Self {
        Self::with(Arc::new(MemoryStore::new()), |r| r)
    }

    pub fn with(
        store: Arc<dyn HandoffStore>,
        configure: impl FnOnce(ContextRelayBuilder) -> ContextRelayBuilder,
    ) -> Self {
        let upstream = Upstream::default();
        let account = Arc::new(Mutex::new(ResolvedAccount::new("codex", "acct-a")));
        let relay = configure(ContextRelay::builder(store.clone())).build();
        let up = upstream.clone();
        let up_svc = tower::service_fn(move |req| up.clone().answer(req));
        let acc = account.clone();
        let svc = ServiceBuilder::new()
            .map_response(|r: Response<_>| {
                r.map(|b: context_relay_tower::generation::ResponseBody<_>| BodyExt::boxed(b))
            })
            .layer(relay.generation_layer())
            .layer_fn(move |inner| Resolver {
                inner,
                account: acc.clone(),
            })
            .map_response(|r: Response<_>| {
                r.map(|b: context_relay_tower::injection::ResponseBody<Body>| BodyExt::boxed(b))
            })
            .layer(relay.injection_layer())
            .service(up_svc);
        Self {
            svc: BoxCloneSyncService::new(svc),
            upstream,
            store,
            account,
            background: relay.background(),
        }
    }

    pub fn use_account(&self, account: &str) {
        *self.account.lock().unwrap() = ResolvedAccount::new("codex", account);
    }

    /// Sends a request and reads the whole response.
    pub fn send(
        &self,
        req: Request<Body>,
    ) -> Pin<Box<dyn Future<Output = (StatusCode, Bytes)> + Send + 'static>> {
        let svc = self.svc.clone();
        Box::pin(async move {
            let res = svc.oneshot(req).await.expect("stack never fails");
            let status = res.status();
            let body = res
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            (status, body)
        })
    }

    pub async fn idle(&self) {
        // Work started meanwhile (a completion spawned by a body's end) is waited for too.
        self.background.idle().await;
    }
}

/// A Chat Completions turn of session `session`, tenant credential `key`.
pub fn chat(session: &str, key: &str, user_turns: usize) -> Request<Body> {
    let mut messages =
        vec![serde_json::json!({"role":"system","content":"You are a coding agent."})];
    for i in 0..user_turns {
        messages.push(
            serde_json::json!({"role":"user","content": format!("step {i}: add the --json flag")}),
        );
        if i + 1 < user_turns {
            messages
                .push(serde_json::json!({"role":"assistant","content": format!("did step {i}")}));
        }
    }
    let body = serde_json::json!({"model":"gpt-5","messages": messages});
    request("/v1/chat/completions", session, key, body.to_string())
}

pub fn request(path: &str, session: &str, key: &str, body: impl Into<Bytes>) -> Request<Body> {
    let mut req = Request::post(path)
        .header("x-session-id", session)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(full(body))
        .unwrap();
    req.extensions_mut().insert(ComboName::new("codex-relay"));
    req
}

/// The bytes of a request body (to compare with what the upstream received).
pub async fn collect_request(req: Request<Body>) -> (http::request::Parts, Bytes) {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (parts, bytes)
}
