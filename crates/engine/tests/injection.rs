//! The injection side of the engine, driven without any tower service through [`Attempt`]:
//! the calls a transport adapter (a pingora proxy) makes.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::{HandoffKey, session};
use context_relay_engine::{
    Attempt, BodyPlan, ComboName, Looked, RELAY_HEADER, Relay, RequestFacts, ResolvedAccount,
    ResponsePlan, SkipRelay,
};
use context_relay_store::{Affinity, HandoffStore, MemoryStore};
use http::{HeaderMap, StatusCode, Uri};

const CHAT: &str =
    r#"{"model":"gpt-5","messages":[{"role":"user","content":"add a --json flag"}]}"#;
const RESPONSES_BOUND: &str =
    r#"{"input":[{"type":"reasoning","encrypted_content":"gAAA-of-acct-a"}]}"#;
const CHAT_REPLY: &str =
    r#"{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"Done."}}]}"#;
const COMPLETED: &str = "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n";
const REJECTED: &str = r#"{"error":{"message":"The encrypted content gAAA could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}"#;

struct Fixture {
    store: Arc<dyn HandoffStore>,
    relay: Relay,
    combo: ComboName,
    headers: HeaderMap,
}

impl Fixture {
    fn new() -> Self {
        let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
        let mut headers = HeaderMap::new();
        headers.insert("session-id", "s1".parse().unwrap());
        Self {
            relay: Relay::builder(store.clone()).build(),
            store,
            combo: ComboName::new("codex"),
            headers,
        }
    }

    fn key(&self) -> HandoffKey {
        HandoffKey::new(session::tenant(&self.headers), "s1", "codex")
    }

    fn attempt(&self, path: &str, account: &ResolvedAccount) -> Attempt {
        let uri: Uri = path.parse().unwrap();
        let facts = RequestFacts {
            combo: Some(&self.combo),
            account: Some(account),
            ..Default::default()
        };
        self.relay.attempt(&uri, &self.headers, facts, 0)
    }

    /// An attempt whose body was held and decided: the body sent and the headers it goes with.
    async fn decided(
        &self,
        path: &str,
        account: &ResolvedAccount,
        body: &'static str,
    ) -> (Attempt, Bytes, HeaderMap) {
        let mut attempt = self.attempt(path, account);
        assert!(held(&attempt), "the body is read");
        let mut headers = self.headers.clone();
        let sent = attempt
            .request_body(&mut headers, Bytes::from_static(body.as_bytes()))
            .await;
        (attempt, sent, headers)
    }

    /// Whether the session's handoff can be claimed now (a claim taken here is given back).
    async fn claimable(&self) -> bool {
        common::claimable(self.store.as_ref(), &self.key()).await
    }

    /// A handoff written by acct-a, and the session's affinity to acct-a.
    async fn handoff_from_a(&self) {
        common::handoff_from_a(self.store.as_ref(), &self.key()).await;
    }
}

/// The relay leaves the request alone.
fn passes(attempt: &Attempt) -> bool {
    !attempt.is_relayed() && matches!(attempt.body_plan(), BodyPlan::Stream { keep: None })
}

/// The fast path: relayed, the body forwarded as it comes.
fn fast(attempt: &Attempt) -> bool {
    attempt.is_relayed() && matches!(attempt.body_plan(), BodyPlan::Stream { .. })
}

/// The body is held for a decision.
fn held(attempt: &Attempt) -> bool {
    matches!(attempt.body_plan(), BodyPlan::Hold { .. })
}

/// A 2xx whose body completed with `reply`.
async fn complete(mut attempt: Attempt, reply: &str) {
    let plan = attempt
        .response_head(StatusCode::OK, &HeaderMap::new())
        .await;
    assert_eq!(plan, ResponsePlan::Forward);
    attempt.response_chunk(reply.as_bytes());
    attempt.end(false);
}

fn a() -> ResolvedAccount {
    ResolvedAccount::new("codex", "acct-a")
}

fn b() -> ResolvedAccount {
    ResolvedAccount::new("codex", "acct-b")
}

#[tokio::test]
async fn passes_what_is_not_relayed() {
    let f = Fixture::new();
    let uri: Uri = "/v1/chat/completions".parse().unwrap();
    let account = a();
    let skip = SkipRelay;
    let mut ext = http::Extensions::new();
    ext.insert(skip);
    ext.insert(f.combo.clone());
    ext.insert(account.clone());
    let cases = [
        RequestFacts {
            account: Some(&account),
            ..Default::default()
        },
        RequestFacts {
            combo: Some(&f.combo),
            ..Default::default()
        },
        RequestFacts::from_extensions(&ext),
    ];
    for facts in cases {
        assert!(passes(&f.relay.attempt(&uri, &f.headers, facts, 0)));
    }
    // Not an API path.
    assert!(passes(&f.attempt("/healthz", &account)));
}

#[tokio::test]
async fn a_completed_first_turn_records_the_affinity_a_dropped_one_does_not() {
    let f = Fixture::new();
    // A session's first turn is read: its opening is recorded as its primary conversation.
    let first = || async {
        let (attempt, sent, _) = f.decided("/v1/chat/completions", &a(), CHAT).await;
        assert_eq!(sent, CHAT.as_bytes(), "forwarded as sent");
        assert!(
            !attempt.may_resend(),
            "chat completions carry no account-bound state"
        );
        assert!(attempt.is_relayed(), "a session");
        attempt
    };
    drop(first().await);
    f.relay.background().idle().await;
    assert_eq!(f.store.affinity(&f.key()).await.unwrap(), None);

    let attempt = first().await;
    assert_eq!(attempt.account(), Some(&a()));
    complete(attempt, CHAT_REPLY).await;
    f.relay.background().idle().await;
    let affinity = f.store.affinity(&f.key()).await.unwrap().expect("recorded");
    assert!(affinity.is("codex", "acct-a"));
    let opening = session::opening(CHAT.as_bytes()).unwrap();
    assert_eq!(affinity.conversation(), Some(opening.digest));
    // From then on the session stays on the fast path.
    assert!(fast(&f.attempt("/v1/chat/completions", &a())));
}

#[tokio::test]
async fn a_switch_injects_the_handoff_and_a_completed_response_consumes_it() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    // Uploaded chunked: the body goes whole, framed by its length alone.
    let mut attempt = f.attempt("/v1/chat/completions", &b());
    let mut headers = f.headers.clone();
    headers.insert("transfer-encoding", "chunked".parse().unwrap());
    let sent = attempt
        .request_body(&mut headers, Bytes::from_static(CHAT.as_bytes()))
        .await;
    let body = String::from_utf8(sent.to_vec()).unwrap();
    assert!(body.contains("<context_handoff>") && body.contains("Adding a --json flag"));
    assert_eq!(headers["content-length"], sent.len().to_string().as_str());
    assert!(!headers.contains_key("transfer-encoding"), "{headers:?}");
    assert!(attempt.action().injected && !f.claimable().await);

    // The response head is labelled; a 2xx waits for its body.
    let plan = attempt
        .response_head(StatusCode::OK, &HeaderMap::new())
        .await;
    assert_eq!(plan, ResponsePlan::Forward);
    let (mut parts, ()) = http::Response::new(()).into_parts();
    attempt.label(&mut parts);
    assert_eq!(parts.headers[RELAY_HEADER], "injected");
    assert_eq!(parts.extensions.get::<ResolvedAccount>(), Some(&b()));
    assert!(attempt.watches_end(), "waits for the body");

    attempt.response_chunk(CHAT_REPLY.as_bytes());
    attempt.end(false);
    f.relay.background().idle().await;
    common::consumed_and_moved_to(f.store.as_ref(), &f.key(), "acct-b").await;
}

/// A compaction request that meets the switch is scrubbed but carries no handoff (its answer
/// keeps only the user's messages and the account's compaction item): the next turn does.
#[tokio::test]
async fn a_compaction_request_leaves_the_handoff_to_the_next_turn() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    let compact = r#"{"model":"gpt-5.5","input":[{"type":"message","role":"user","content":"add a --json flag"},{"type":"reasoning","encrypted_content":"gAAA-of-acct-a"},{"type":"message","role":"assistant","content":"Parsing works."}]}"#;
    let (mut attempt, sent, _) = f.decided("/v1/responses/compact", &b(), compact).await;
    let body = String::from_utf8(sent.to_vec()).unwrap();
    assert!(!body.contains("<context_handoff>"), "{body}");
    assert!(!body.contains("gAAA-of-acct-a"), "scrubbed: {body}");
    assert!(!attempt.action().injected && attempt.action().scrubbed);
    assert!(f.claimable().await, "left for the next turn");
    attempt
        .response_head(StatusCode::OK, &HeaderMap::new())
        .await;
    attempt
        .response_chunk(br#"{"output":[{"type":"compaction","encrypted_content":"c-of-acct-b"}]}"#);
    attempt.end(false);
    f.relay.background().idle().await;
    let next = r#"{"model":"gpt-5.5","input":[{"type":"message","role":"user","content":"add a --json flag"},{"type":"compaction","encrypted_content":"c-of-acct-b"},{"type":"message","role":"user","content":"now the tests"}]}"#;
    let (attempt, sent, _) = f.decided("/v1/responses", &b(), next).await;
    let body = String::from_utf8(sent.to_vec()).unwrap();
    assert!(
        body.contains("<context_handoff>") && body.contains("c-of-acct-b"),
        "{body}"
    );
    assert!(attempt.action().injected);
}

/// The same with no handoff stored: the one a switch builds from the compaction's history
/// is stored, not carried, and the turn after the compaction (whose history the compaction
/// folded away) carries it.
#[tokio::test]
async fn a_compaction_request_at_a_switch_without_a_handoff_stores_one_for_the_next_turn() {
    let f = Fixture::new();
    let first = r#"{"model":"gpt-5.5","input":[{"type":"message","role":"user","content":"add a --json flag"}]}"#;
    let (attempt, _, _) = f.decided("/v1/responses", &a(), first).await;
    complete(attempt, COMPLETED).await;
    f.relay.background().idle().await;
    let compact = r#"{"model":"gpt-5.5","input":[{"type":"message","role":"user","content":"add a --json flag"},{"type":"message","role":"assistant","content":"Parsing works; tests next."},{"type":"message","role":"user","content":"go on"}]}"#;
    let (attempt, sent, _) = f.decided("/v1/responses/compact", &b(), compact).await;
    assert!(!String::from_utf8_lossy(&sent).contains("<context_handoff>"));
    assert!(!attempt.action().injected);
    assert!(f.claimable().await, "built and stored for the next turn");
    complete(
        attempt,
        r#"{"output":[{"type":"compaction","encrypted_content":"c-of-acct-b"}]}"#,
    )
    .await;
    f.relay.background().idle().await;
    let next = r#"{"model":"gpt-5.5","input":[{"type":"message","role":"user","content":"add a --json flag"},{"type":"compaction","encrypted_content":"c-of-acct-b"},{"type":"message","role":"user","content":"now the tests"}]}"#;
    let (attempt, sent, _) = f.decided("/v1/responses", &b(), next).await;
    let body = String::from_utf8(sent.to_vec()).unwrap();
    assert_eq!(body.matches("<context_handoff>").count(), 1, "{body}");
    assert!(body.contains("Parsing works; tests next."), "{body}");
    assert!(attempt.action().injected);
}

#[tokio::test]
async fn the_turn_right_after_a_switch_keeps_the_new_accounts_state_even_before_the_write() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    let (mut attempt, sent, _) = f.decided("/v1/responses", &b(), RESPONSES_BOUND).await;
    assert!(!String::from_utf8_lossy(&sent).contains("gAAA-of-acct-a"));
    assert!(attempt.is_relayed(), "a session");
    attempt
        .response_head(StatusCode::OK, &HeaderMap::new())
        .await;
    assert!(attempt.watches_end(), "waits for the body");
    attempt.response_chunk(COMPLETED.as_bytes());
    attempt.end(false);
    // No await since: the background write of the affinity has not run (one thread), as when
    // the client's next turn comes at once (a tool result). That turn carries acct-a's item
    // again and acct-b's own reasoning: acct-b's must stay, or acct-b loses its own state.
    let next = r#"{"input":[{"type":"reasoning","encrypted_content":"gAAA-of-acct-a"},{"type":"reasoning","encrypted_content":"gAAA-of-acct-b"}]}"#;
    let mut attempt = f.attempt("/v1/responses", &b());
    assert!(attempt.is_relayed(), "the session is relayed");
    let body = if held(&attempt) {
        let mut headers = f.headers.clone();
        let sent = attempt
            .request_body(&mut headers, Bytes::from_static(next.as_bytes()))
            .await;
        assert!(!attempt.action().injected, "no second injection");
        String::from_utf8(sent.to_vec()).unwrap()
    } else {
        next.to_owned()
    };
    assert!(
        body.contains("gAAA-of-acct-b"),
        "acct-b's own state kept: {body}"
    );
    assert!(
        !body.contains("gAAA-of-acct-a"),
        "acct-a's still scrubbed: {body}"
    );
}

#[tokio::test]
async fn an_error_status_gives_the_handoff_back_at_once() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    let (mut attempt, _, _) = f.decided("/v1/chat/completions", &b(), CHAT).await;
    assert!(attempt.is_relayed(), "a session");
    assert!(
        f.store
            .claim(&f.key(), Duration::from_secs(30))
            .await
            .unwrap()
            .is_none(),
        "leased while the request is out"
    );
    attempt.failed().await;
    let claim = f
        .store
        .claim(&f.key(), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        claim.is_some(),
        "claimable by the retry, without waiting for background work"
    );
    // An attempt given back records nothing.
    let status = StatusCode::TOO_MANY_REQUESTS;
    attempt.response_head(status, &HeaderMap::new()).await;
    assert!(!attempt.watches_end());
}

#[tokio::test]
async fn a_dropped_attempt_releases_its_claim() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    let (attempt, _, _) = f.decided("/v1/chat/completions", &b(), CHAT).await;
    drop(attempt);
    f.relay.background().idle().await;
    let claim = f
        .store
        .claim(&f.key(), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(claim.is_some());
    let affinity = f.store.affinity(&f.key()).await.unwrap().expect("kept");
    assert!(affinity.is("codex", "acct-a"), "the affinity did not move");
}

#[tokio::test]
async fn a_body_over_the_limit_goes_out_unchanged() {
    let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
    let relay = Relay::builder(store.clone()).max_body_bytes(8).build();
    let mut headers = HeaderMap::new();
    headers.insert("session-id", "s1".parse().unwrap());
    let combo = ComboName::new("codex");
    let account = b();
    let facts = RequestFacts {
        combo: Some(&combo),
        account: Some(&account),
        ..Default::default()
    };
    let key = HandoffKey::new(session::tenant(&headers), "s1", "codex");
    store
        .set_affinity(&key, Affinity::new("codex", "acct-a"))
        .await
        .unwrap();
    let uri: Uri = "/v1/chat/completions".parse().unwrap();
    let mut attempt = relay.attempt(&uri, &headers, facts, 100);
    let BodyPlan::Hold { limit } = attempt.body_plan() else {
        panic!()
    };
    assert_eq!(limit, 8);
    attempt.body_too_large().await;
    attempt
        .response_head(StatusCode::OK, &HeaderMap::new())
        .await;
    assert!(attempt.action().is_empty() && !attempt.watches_end());
}

#[tokio::test]
async fn a_rejection_of_account_bound_state_gives_the_body_to_send_again() {
    let f = Fixture::new();
    f.store
        .set_affinity(&f.key(), Affinity::new("codex", "acct-a"))
        .await
        .unwrap();
    // A turn of the session carries state another account minted: forwarded and kept.
    let bound = || {
        let attempt = f.attempt("/v1/responses", &a());
        let BodyPlan::Stream { keep: Some(tee) } = attempt.body_plan() else {
            panic!("fast path; the Responses API has account-bound state: the body is kept")
        };
        for chunk in [&RESPONSES_BOUND[..20], &RESPONSES_BOUND[20..]] {
            tee.keep(Some(&Bytes::copy_from_slice(chunk.as_bytes())));
        }
        tee.end();
        attempt
    };
    let none = HeaderMap::new();
    let mut ok = bound();
    assert_eq!(
        ok.response_head(StatusCode::OK, &none).await,
        ResponsePlan::Forward
    );
    let mut attempt = bound();
    assert!(attempt.may_resend());
    let plan = attempt.response_head(StatusCode::BAD_REQUEST, &none).await;
    assert!(matches!(plan, ResponsePlan::LookAhead { .. }));
    attempt.look_chunk(REJECTED.as_bytes());
    let Looked::Resend(body) = attempt.looked(StatusCode::BAD_REQUEST, true).await else {
        panic!("stripped")
    };
    assert_eq!(body, Bytes::from_static(br#"{"input":[]}"#));
    let mut headers = f.headers.clone();
    headers.insert("content-encoding", "gzip".parse().unwrap());
    headers.insert("transfer-encoding", "chunked".parse().unwrap());
    context_relay_engine::injection::resend_headers(&mut headers, body.len());
    assert!(!headers.contains_key("content-encoding"));
    assert!(!headers.contains_key("transfer-encoding"));
    assert_eq!(headers["content-length"], "12");

    // The repaired attempt records the stripped state as foreign to acct-a.
    assert!(attempt.action().repaired);
    complete(attempt, COMPLETED).await;
    f.relay.background().idle().await;
    let affinity = f.store.affinity(&f.key()).await.unwrap().expect("recorded");
    assert!(affinity.foreign_at(SystemTime::now()).is_some());
    // The next turn to acct-a carrying it again is scrubbed before it goes out.
    let (attempt, sent, _) = f.decided("/v1/responses", &a(), RESPONSES_BOUND).await;
    assert_eq!(sent, Bytes::from_static(br#"{"input":[]}"#));
    assert!(attempt.action().scrubbed);
}

#[tokio::test]
async fn an_error_head_gives_the_handoff_back_before_the_retry() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    // Sent to acct-b: a switch, the handoff is claimed and injected.
    let (mut attempt, _, _) = f.decided("/v1/chat/completions", &b(), CHAT).await;
    assert!(attempt.action().injected);
    // acct-b answers 429; the adapter hands the head on once `response_head` returned, and
    // the client retries at once.
    let status = StatusCode::TOO_MANY_REQUESTS;
    assert_eq!(
        attempt.response_head(status, &HeaderMap::new()).await,
        ResponsePlan::Forward
    );
    assert!(!attempt.watches_end());
    let c = ResolvedAccount::new("codex", "acct-c");
    let (retry, _, _) = f.decided("/v1/chat/completions", &c, CHAT).await;
    assert!(
        retry.action().injected,
        "the retry on acct-c found the handoff still leased"
    );
}

#[tokio::test]
async fn response_head_now_refuses_an_error_status_with_a_claim() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    let (mut attempt, _, _) = f.decided("/v1/chat/completions", &b(), CHAT).await;
    let none = HeaderMap::new();
    assert_eq!(
        attempt.response_head_now(StatusCode::TOO_MANY_REQUESTS, &none),
        None,
        "must be released first"
    );
    assert!(!f.claimable().await, "still claimed");
    // A 2xx needs no release: planned and labelled at once.
    assert_eq!(
        attempt.response_head_now(StatusCode::OK, &none),
        Some(ResponsePlan::Forward)
    );
    let (mut parts, ()) = http::Response::new(()).into_parts();
    attempt.label(&mut parts);
    assert_eq!(parts.headers[RELAY_HEADER], "injected");
}

/// The fast path reads the clock only when the affinity records a switch: within the switch
/// window the request goes to the slow path (where it is scrubbed, and other conversations of
/// the session cross), whether or not foreign state was recorded; after it, it does not.
#[tokio::test]
async fn the_fast_path_is_taken_only_outside_the_switch_window() {
    use context_relay_core::portable::ForeignSet;
    let f = Fixture::new();
    let key = f.key();
    let cases = [
        (ForeignSet::default(), Duration::from_secs(3600), false),
        (ForeignSet::default(), Duration::ZERO, true),
        (ForeignSet::from_digests([7]), Duration::ZERO, true),
        (
            ForeignSet::from_digests([7]),
            Duration::from_secs(3600),
            false,
        ),
    ];
    let is_fast = fast;
    for (foreign, ttl, fast) in cases {
        let affinity =
            Affinity::new("codex", "acct-a").with_foreign(foreign, SystemTime::now() + ttl);
        f.store.set_affinity(&key, affinity).await.unwrap();
        let attempt = f.attempt("/v1/responses", &a());
        assert_eq!(is_fast(&attempt), fast, "{attempt:?} with {ttl:?}");
    }
}
