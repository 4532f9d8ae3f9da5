//! The lifecycle's ordering rules, driven phase by phase through [`Attempt`] and [`Turn`]
//! without any HTTP: what every adapter (tower, pingora, the gateway) relies on.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use context_relay_core::{HandoffKey, session};
use context_relay_engine::{
    Attempt, BodyPlan, ComboName, Looked, RELAY_HEADER, Relay, RequestFacts, ResolvedAccount,
    ResponsePlan, SummaryError, SummaryRequest,
};
use context_relay_store::{Affinity, HandoffStore, MemoryStore};
use http::{HeaderMap, StatusCode, Uri};

const CHAT: &str =
    r#"{"model":"gpt-5","messages":[{"role":"user","content":"add a --json flag"}]}"#;
const CHAT_REPLY: &str = r#"{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"Added the flag."}}]}"#;
const RESPONSES_BOUND: &str =
    r#"{"input":[{"type":"reasoning","encrypted_content":"gAAA-of-acct-a"}]}"#;
const REJECTED: &str = r#"{"error":{"message":"The encrypted content gAAA could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}"#;
const CREATED: &str = "event: response.created\ndata: {\"type\":\"response.created\"}\n\n";
const OUTPUT: &str = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n";
const COMPLETED: &str = "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n";
const SUMMARY: &str = r#"{"choices":[{"message":{"content":"{\"summary\":\"Adding a --json flag\",\"keyDecisions\":[\"serde\"]}"}}]}"#;

struct Fixture {
    store: Arc<dyn HandoffStore>,
    relay: Relay,
    combo: ComboName,
    headers: HeaderMap,
    summaries: Arc<AtomicUsize>,
}

impl Fixture {
    fn new() -> Self {
        let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
        let summaries = Arc::new(AtomicUsize::new(0));
        let count = summaries.clone();
        let summarizer = move |_: SummaryRequest| {
            count.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, SummaryError>(Bytes::from_static(SUMMARY.as_bytes())) }
        };
        let mut headers = HeaderMap::new();
        headers.insert("session-id", "s1".parse().unwrap());
        Self {
            relay: Relay::builder(store.clone()).summarizer(summarizer).build(),
            store,
            combo: ComboName::new("codex"),
            headers,
            summaries,
        }
    }

    fn key(&self) -> HandoffKey {
        HandoffKey::new(session::tenant(&self.headers), "s1", "codex")
    }

    fn facts<'a>(&'a self, account: &'a ResolvedAccount) -> RequestFacts<'a> {
        RequestFacts {
            combo: Some(&self.combo),
            account: Some(account),
            ..Default::default()
        }
    }

    fn attempt(&self, path: &str, account: &ResolvedAccount) -> Attempt {
        let uri: Uri = path.parse().unwrap();
        self.relay
            .attempt(&uri, &self.headers, self.facts(account), 0)
    }

    /// An attempt of a switch to acct-b whose body was decided: the handoff is claimed.
    async fn switched(&self) -> Attempt {
        self.handoff_from_a().await;
        let mut attempt = self.attempt("/v1/chat/completions", &b());
        assert!(matches!(attempt.body_plan(), BodyPlan::Hold { .. }));
        let mut headers = self.headers.clone();
        let body = attempt
            .request_body(&mut headers, Bytes::from_static(CHAT.as_bytes()))
            .await;
        assert!(String::from_utf8_lossy(&body).contains("<context_handoff>"));
        assert!(attempt.action().injected);
        attempt
    }

    async fn claimable(&self) -> bool {
        common::claimable(self.store.as_ref(), &self.key()).await
    }

    /// A turn of the session to acct-a that carries acct-a's state, on the fast path (its
    /// affinity is acct-a), its body kept for a repair.
    async fn bound_turn(&self) -> Attempt {
        self.store
            .set_affinity(&self.key(), Affinity::new("codex", "acct-a"))
            .await
            .unwrap();
        let attempt = self.attempt("/v1/responses", &a());
        let BodyPlan::Stream { keep: Some(tee) } = attempt.body_plan() else {
            panic!("the fast path, the body kept for a repair")
        };
        for chunk in [&RESPONSES_BOUND[..20], &RESPONSES_BOUND[20..]] {
            tee.keep(Some(&Bytes::copy_from_slice(chunk.as_bytes())));
        }
        tee.end();
        assert!(attempt.may_resend());
        attempt
    }

    async fn handoff_from_a(&self) {
        common::handoff_from_a(self.store.as_ref(), &self.key()).await;
    }
}

fn a() -> ResolvedAccount {
    ResolvedAccount::new("codex", "acct-a")
}

fn b() -> ResolvedAccount {
    ResolvedAccount::new("codex", "acct-b")
}

fn sse() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("content-type", "text/event-stream".parse().unwrap());
    h
}

#[tokio::test]
async fn an_error_head_gives_the_claim_back_before_it_returns() {
    let f = Fixture::new();
    let mut attempt = f.switched().await;
    assert!(!f.claimable().await, "leased while the request is out");
    let status = StatusCode::TOO_MANY_REQUESTS;
    assert_eq!(
        attempt.response_head_now(status, &HeaderMap::new()),
        None,
        "a claim to give back first: the head must wait"
    );
    let plan = attempt.response_head(status, &HeaderMap::new()).await;
    assert_eq!(plan, ResponsePlan::Forward);
    assert!(
        f.claimable().await,
        "claimable by the client's retry as soon as the head is handed on"
    );
    attempt.end(false);
    f.relay.background().idle().await;
    let affinity = f.store.affinity(&f.key()).await.unwrap().expect("kept");
    assert!(affinity.is("codex", "acct-a"), "an error moves nothing");
}

#[tokio::test]
async fn no_response_gives_the_claim_back_at_once() {
    let f = Fixture::new();
    let mut attempt = f.switched().await;
    attempt.failed().await;
    assert!(f.claimable().await);
}

#[tokio::test]
async fn only_a_completed_body_consumes_the_handoff_and_moves_the_affinity() {
    let f = Fixture::new();
    let mut attempt = f.switched().await;
    let plan = attempt
        .response_head(StatusCode::OK, &HeaderMap::new())
        .await;
    assert_eq!(plan, ResponsePlan::Forward);
    let (mut parts, ()) = http::Response::new(()).into_parts();
    attempt.label(&mut parts);
    assert_eq!(parts.headers[RELAY_HEADER], "injected");
    assert_eq!(parts.extensions.get::<ResolvedAccount>(), Some(&b()));
    attempt.response_chunk(&CHAT_REPLY.as_bytes()[..40]);
    attempt.response_chunk(&CHAT_REPLY.as_bytes()[40..]);
    attempt.end(false);
    f.relay.background().idle().await;
    common::consumed_and_moved_to(f.store.as_ref(), &f.key(), "acct-b").await;
}

#[tokio::test]
async fn a_cut_or_unfinished_body_gives_the_claim_back() {
    for how in ["dropped", "unfinished", "errored"] {
        let f = Fixture::new();
        let mut attempt = f.switched().await;
        attempt
            .response_head(StatusCode::OK, &HeaderMap::new())
            .await;
        attempt.response_chunk(&CHAT_REPLY.as_bytes()[..40]);
        match how {
            "dropped" => drop(attempt),
            "unfinished" => attempt.end(false),
            // Cut by an error before its end. (An error after the whole answer went out
            // completes the turn: the client has it.)
            _ => {
                attempt.response_chunk(&CHAT_REPLY.as_bytes()[40..60]);
                attempt.end(true)
            }
        }
        f.relay.background().idle().await;
        assert!(f.claimable().await, "{how}: released for the next attempt");
        let affinity = f.store.affinity(&f.key()).await.unwrap().expect("kept");
        assert!(affinity.is("codex", "acct-a"), "{how}: the affinity stays");
    }
}

#[tokio::test]
async fn a_response_is_read_ahead_only_when_a_repair_may_follow() {
    let f = Fixture::new();
    // Chat Completions carries no account-bound state: a 400 is handed on.
    let mut chat = f.attempt("/v1/chat/completions", &a());
    let mut headers = f.headers.clone();
    chat.request_body(&mut headers, Bytes::from_static(CHAT.as_bytes()))
        .await;
    assert!(!chat.may_resend());
    let none = HeaderMap::new();
    let plan = chat.response_head(StatusCode::BAD_REQUEST, &none).await;
    assert_eq!(plan, ResponsePlan::Forward);

    // A Responses turn that carries state: a 400 and a stream are read ahead, a JSON 2xx not.
    let mut bound = f.bound_turn().await;
    let plan = bound.response_head_now(StatusCode::BAD_REQUEST, &HeaderMap::new());
    assert_eq!(plan, Some(ResponsePlan::LookAhead { deadline: None }));
    let mut bound = f.bound_turn().await;
    let plan = bound.response_head(StatusCode::OK, &sse()).await;
    assert!(matches!(
        plan,
        ResponsePlan::LookAhead { deadline: Some(_) }
    ));
    let mut bound = f.bound_turn().await;
    let plan = bound.response_head(StatusCode::OK, &HeaderMap::new()).await;
    assert_eq!(plan, ResponsePlan::Forward);

    // An adapter that cannot send again never reads ahead.
    let mut streaming = f.bound_turn().await.without_resend();
    assert!(!streaming.may_resend());
    let plan = streaming
        .response_head(StatusCode::BAD_REQUEST, &none)
        .await;
    assert_eq!(plan, ResponsePlan::Forward);
    streaming.response_chunk(REJECTED.as_bytes());
    streaming.end(false);
}

#[tokio::test]
async fn a_rejection_read_ahead_gives_the_stripped_body_to_send_again() {
    let f = Fixture::new();
    let mut attempt = f.bound_turn().await;
    let none = HeaderMap::new();
    let plan = attempt.response_head(StatusCode::BAD_REQUEST, &none).await;
    assert!(matches!(plan, ResponsePlan::LookAhead { .. }));
    assert!(attempt.look_chunk(&REJECTED.as_bytes()[..30]), "read on");
    attempt.look_chunk(&REJECTED.as_bytes()[30..]);
    let looked = attempt.looked(StatusCode::BAD_REQUEST, true).await;
    assert_eq!(
        looked,
        Looked::Resend(Bytes::from_static(br#"{"input":[]}"#))
    );
    assert!(attempt.action().repaired);

    // The response to the body sent again is handed on and settles the attempt.
    let plan = attempt.response_head(StatusCode::OK, &sse()).await;
    assert_eq!(plan, ResponsePlan::Forward, "one repair: no second look");
    for chunk in [CREATED, OUTPUT, COMPLETED] {
        attempt.response_chunk(chunk.as_bytes());
    }
    attempt.end(false);
    f.relay.background().idle().await;
    let affinity = f.store.affinity(&f.key()).await.unwrap().expect("recorded");
    assert!(
        affinity.foreign_at(SystemTime::now()).is_some(),
        "what the rejected request carried is foreign to acct-a from now on"
    );
}

#[tokio::test]
async fn a_stream_opening_is_held_until_its_first_output() {
    let f = Fixture::new();
    let mut attempt = f.bound_turn().await;
    let plan = attempt.response_head(StatusCode::OK, &sse()).await;
    assert!(matches!(
        plan,
        ResponsePlan::LookAhead { deadline: Some(_) }
    ));
    assert!(
        attempt.look_chunk(CREATED.as_bytes()),
        "no output yet: held"
    );
    assert!(
        !attempt.look_chunk(OUTPUT.as_bytes()),
        "output: the rest flows"
    );
    assert_eq!(attempt.looked(StatusCode::OK, false).await, Looked::Forward);
    // The end watch goes on from the chunks read ahead.
    attempt.response_chunk(COMPLETED.as_bytes());
    attempt.end(false);
    f.relay.background().idle().await;
    let affinity = f.store.affinity(&f.key()).await.unwrap().expect("kept");
    assert!(affinity.is("codex", "acct-a"));
}

#[tokio::test]
async fn a_turn_starts_its_summary_only_after_a_complete_reply() {
    let uri: Uri = "/v1/chat/completions".parse().unwrap();
    let mut quota = HeaderMap::new();
    quota.insert("x-codex-primary-used-percent", "88".parse().unwrap());
    for how in ["completed", "errored", "dropped", "body unfinished"] {
        let f = Fixture::new();
        let mut turn = f.relay.turn(&uri, &f.headers, f.facts(&a()));
        assert!(turn.is_active());
        let body = Bytes::from_static(CHAT.as_bytes());
        turn.request_chunk(&body.slice(..20), false);
        if how != "body unfinished" {
            turn.request_chunk(&body.slice(20..), true);
        }
        turn.response(StatusCode::OK, &quota, Some(&a()), None, None);
        assert!(turn.watches_reply(), "{how}: over the threshold");
        turn.response_chunk(&CHAT_REPLY.as_bytes()[..30]);
        assert_eq!(f.summaries.load(Ordering::SeqCst), 0, "not before the end");
        match how {
            "errored" => turn.end(true),
            "dropped" => drop(turn),
            _ => {
                turn.response_chunk(&CHAT_REPLY.as_bytes()[30..]);
                turn.end(false);
            }
        }
        f.relay.background().idle().await;
        let stored = f.store.get(&f.key()).await.unwrap();
        let want = how == "completed";
        assert_eq!(stored.is_some(), want, "{how}");
        assert_eq!(
            f.summaries.load(Ordering::SeqCst),
            usize::from(want),
            "{how}"
        );
    }
}

#[tokio::test]
async fn a_request_that_cannot_lead_to_a_summary_gets_an_idle_turn() {
    let f = Fixture::new();
    let uri: Uri = "/healthz".parse().unwrap();
    let mut turn = f.relay.turn(&uri, &f.headers, f.facts(&a()));
    assert!(!turn.is_active());
    turn.request_chunk(&Bytes::from_static(b"{}"), true);
    turn.response(StatusCode::OK, &HeaderMap::new(), Some(&a()), None, None);
    assert!(!turn.watches_reply());
    turn.end(false);
}
