//! The injection side of the engine, driven without any tower service: the calls a transport
//! adapter (a pingora proxy) makes.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::ending::Ending;
use context_relay_core::repair::RepairKind;
use context_relay_core::{Handoff, HandoffKey, HandoffRecord, session};
use context_relay_engine::{
    ComboName, Inject, RELAY_HEADER, Relay, RequestFacts, ResolvedAccount, SkipRelay,
};
use context_relay_store::{Affinity, HandoffStore, MemoryStore};
use http::{HeaderMap, StatusCode, Uri};

const CHAT: &str =
    r#"{"model":"gpt-5","messages":[{"role":"user","content":"add a --json flag"}]}"#;
const RESPONSES_BOUND: &str =
    r#"{"input":[{"type":"reasoning","encrypted_content":"gAAA-of-acct-a"}]}"#;

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

    fn inject(&self, path: &str, account: &ResolvedAccount) -> Inject {
        let uri: Uri = path.parse().unwrap();
        let facts = RequestFacts {
            combo: Some(&self.combo),
            account: Some(account),
            ..Default::default()
        };
        self.relay.inject(&uri, &self.headers, facts, 0)
    }

    /// A handoff written by acct-a, and the session's affinity to acct-a.
    async fn handoff_from_a(&self) {
        let now = SystemTime::now();
        let key = self.key();
        self.store
            .upsert(HandoffRecord {
                version: 1,
                kind: Default::default(),
                tenant: key.tenant.clone(),
                session: key.session.clone(),
                combo: key.combo.clone(),
                from_provider: "codex".into(),
                from_account: "acct-a".into(),
                handoff: Handoff {
                    summary: "Adding a --json flag to the CLI.".into(),
                    key_decisions: vec!["serde for output".into()],
                    task_progress: "flag parsed; tests pending".into(),
                    active_entities: vec!["src/cli.rs".into()],
                },
                message_count: 12,
                conversation: None,
                compaction: false,
                model: "gpt-5".into(),
                threshold: 0.85,
                generated_at: now,
                expires_at: now + Duration::from_secs(3600),
            })
            .await
            .unwrap();
        self.store
            .set_affinity(&key, Affinity::new("codex", "acct-a"))
            .await
            .unwrap();
    }
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
        assert!(matches!(
            f.relay.inject(&uri, &f.headers, facts, 0),
            Inject::Pass
        ));
    }
    // Not an API path.
    assert!(matches!(f.inject("/healthz", &account), Inject::Pass));
}

#[tokio::test]
async fn a_completed_first_turn_records_the_affinity_a_dropped_one_does_not() {
    let f = Fixture::new();
    // A session's first turn is read: its opening is recorded as its primary conversation.
    let first = || async {
        let Inject::ReadBody(d) = f.inject("/v1/chat/completions", &a()) else {
            panic!("a new session's first turn is read")
        };
        let mut h = f.headers.clone();
        let decided = d.decide(&mut h, Bytes::from_static(CHAT.as_bytes())).await;
        assert_eq!(decided.body, CHAT.as_bytes(), "forwarded as sent");
        assert!(
            decided.repair.is_none_or(|r| !r.may_repair()),
            "chat completions carry no account-bound state"
        );
        decided.ticket.expect("a session")
    };
    drop(first().await);
    f.relay.background().idle().await;
    assert_eq!(f.store.affinity(&f.key()).await.unwrap(), None);

    let ticket = first().await;
    assert_eq!(ticket.account(), &a());
    ticket.ended(Ending::Completed);
    f.relay.background().idle().await;
    let affinity = f.store.affinity(&f.key()).await.unwrap().expect("recorded");
    assert!(affinity.is("codex", "acct-a"));
    let opening = session::opening(CHAT.as_bytes()).unwrap();
    assert_eq!(affinity.conversation(), Some(opening.digest));
    // From then on the session stays on the fast path.
    assert!(matches!(
        f.inject("/v1/chat/completions", &a()),
        Inject::Forward { .. }
    ));
}

#[tokio::test]
async fn a_switch_injects_the_handoff_and_a_completed_response_consumes_it() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    let Inject::ReadBody(decision) = f.inject("/v1/chat/completions", &b()) else {
        panic!("a switch reads the body")
    };
    let mut headers = f.headers.clone();
    let decided = decision
        .decide(&mut headers, Bytes::from_static(CHAT.as_bytes()))
        .await;
    let body = String::from_utf8(decided.body.to_vec()).unwrap();
    assert!(body.contains("<context_handoff>") && body.contains("Adding a --json flag"));
    assert_eq!(
        headers["content-length"],
        decided.body.len().to_string().as_str()
    );
    let ticket = decided.ticket.expect("a session");
    assert!(ticket.action().injected && ticket.carries_handoff());

    // The response head is labelled; a 2xx waits for its body.
    let (mut parts, ()) = http::Response::new(()).into_parts();
    let ticket = ticket.label(&mut parts).await.expect("waits for the body");
    assert_eq!(parts.headers[RELAY_HEADER], "injected");
    assert_eq!(parts.extensions.get::<ResolvedAccount>(), Some(&b()));

    ticket.ended(Ending::Completed);
    f.relay.background().idle().await;
    assert!(f.store.get(&f.key()).await.unwrap().is_none(), "consumed");
    let affinity = f.store.affinity(&f.key()).await.unwrap().expect("moved");
    assert!(affinity.is("codex", "acct-b"));
}

#[tokio::test]
async fn the_turn_right_after_a_switch_keeps_the_new_accounts_state_even_before_the_write() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    let Inject::ReadBody(decision) = f.inject("/v1/responses", &b()) else {
        panic!("a switch reads the body")
    };
    let mut headers = f.headers.clone();
    let decided = decision
        .decide(&mut headers, Bytes::from_static(RESPONSES_BOUND.as_bytes()))
        .await;
    assert!(!String::from_utf8_lossy(&decided.body).contains("gAAA-of-acct-a"));
    let ticket = decided.ticket.expect("a session");
    let (mut parts, ()) = http::Response::new(()).into_parts();
    let ticket = ticket.label(&mut parts).await.expect("waits for the body");
    ticket.ended(Ending::Completed);
    // No await since: the background write of the affinity has not run (one thread), as when
    // the client's next turn comes at once (a tool result). That turn carries acct-a's item
    // again and acct-b's own reasoning: acct-b's must stay, or acct-b loses its own state.
    let next = r#"{"input":[{"type":"reasoning","encrypted_content":"gAAA-of-acct-a"},{"type":"reasoning","encrypted_content":"gAAA-of-acct-b"}]}"#;
    let body = match f.inject("/v1/responses", &b()) {
        Inject::ReadBody(decision) => {
            let mut headers = f.headers.clone();
            let decided = decision
                .decide(&mut headers, Bytes::from_static(next.as_bytes()))
                .await;
            let ticket = decided.ticket.expect("a session");
            assert!(!ticket.action().injected, "no second injection");
            String::from_utf8(decided.body.to_vec()).unwrap()
        }
        Inject::Forward { .. } => next.to_owned(),
        Inject::Pass => panic!("the session is relayed"),
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
    let Inject::ReadBody(decision) = f.inject("/v1/chat/completions", &b()) else {
        panic!()
    };
    let mut headers = f.headers.clone();
    let decided = decision
        .decide(&mut headers, Bytes::from_static(CHAT.as_bytes()))
        .await;
    let mut ticket = decided.ticket.expect("a session");
    assert!(
        f.store
            .claim(&f.key(), Duration::from_secs(30))
            .await
            .unwrap()
            .is_none(),
        "leased while the request is out"
    );
    ticket.release_now().await;
    let claim = f
        .store
        .claim(&f.key(), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        claim.is_some(),
        "claimable by the retry, without waiting for background work"
    );
    // A ticket given back records nothing.
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = StatusCode::TOO_MANY_REQUESTS;
    assert!(ticket.label(&mut parts).await.is_none());
}

#[tokio::test]
async fn a_dropped_ticket_releases_its_claim() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    let Inject::ReadBody(decision) = f.inject("/v1/chat/completions", &b()) else {
        panic!()
    };
    let mut headers = f.headers.clone();
    let decided = decision
        .decide(&mut headers, Bytes::from_static(CHAT.as_bytes()))
        .await;
    drop(decided);
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
    let Inject::ReadBody(decision) = relay.inject(&uri, &headers, facts, 100) else {
        panic!()
    };
    assert_eq!(decision.limit(), 8);
    let ticket = decision.too_large().await;
    assert!(ticket.action().is_empty() && !ticket.waits_for_end());
}

#[tokio::test]
async fn a_rejection_of_account_bound_state_gives_the_body_to_send_again() {
    let f = Fixture::new();
    f.store
        .set_affinity(&f.key(), Affinity::new("codex", "acct-a"))
        .await
        .unwrap();
    // A turn of the session carries state another account minted: forwarded and kept.
    let Inject::Forward { ticket, repair } = f.inject("/v1/responses", &a()) else {
        panic!("fast path")
    };
    let repair = repair.expect("the Responses API has account-bound state");
    let tee = repair.tee().expect("the forwarded body is kept").clone();
    for chunk in [&RESPONSES_BOUND[..20], &RESPONSES_BOUND[20..]] {
        tee.keep(Some(&Bytes::copy_from_slice(chunk.as_bytes())));
    }
    tee.end();
    assert!(repair.may_repair());
    assert!(repair.wants_look(StatusCode::BAD_REQUEST, &HeaderMap::new()));
    assert!(!repair.wants_look(StatusCode::OK, &HeaderMap::new()));
    let mut ticket = Some(ticket);
    let body = repair
        .resend_body(
            RepairKind::EncryptedContent,
            StatusCode::BAD_REQUEST,
            ticket.as_mut(),
        )
        .expect("stripped");
    assert_eq!(body, Bytes::from_static(br#"{"input":[]}"#));
    let mut headers = f.headers.clone();
    headers.insert("content-encoding", "gzip".parse().unwrap());
    context_relay_engine::injection::resend_headers(&mut headers, body.len());
    assert!(!headers.contains_key("content-encoding"));
    assert_eq!(headers["content-length"], "12");

    // The repaired ticket records the stripped state as foreign to acct-a.
    let ticket = ticket.unwrap();
    assert!(ticket.action().repaired);
    ticket.ended(Ending::Completed);
    f.relay.background().idle().await;
    let affinity = f.store.affinity(&f.key()).await.unwrap().expect("recorded");
    assert!(affinity.foreign_at(SystemTime::now()).is_some());
    // The next turn to acct-a carrying it again is scrubbed before it goes out.
    let Inject::ReadBody(decision) = f.inject("/v1/responses", &a()) else {
        panic!("foreign state to remove: the body is read")
    };
    let mut headers = f.headers.clone();
    let decided = decision
        .decide(&mut headers, Bytes::from_static(RESPONSES_BOUND.as_bytes()))
        .await;
    assert_eq!(decided.body, Bytes::from_static(br#"{"input":[]}"#));
    assert!(decided.ticket.unwrap().action().scrubbed);
}

#[tokio::test]
async fn label_on_an_error_status_gives_the_handoff_back_before_the_retry() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    // Sent to acct-b: a switch, the handoff is claimed and injected.
    let Inject::ReadBody(d) = f.inject("/v1/chat/completions", &b()) else {
        panic!()
    };
    let mut h = f.headers.clone();
    let decided = d.decide(&mut h, Bytes::from_static(CHAT.as_bytes())).await;
    let ticket = decided.ticket.unwrap();
    assert!(ticket.carries_handoff());
    // acct-b answers 429; the adapter labels the head as `label` documents, and retries at once.
    let (mut parts, ()) = http::Response::builder()
        .status(429)
        .body(())
        .unwrap()
        .into_parts();
    assert!(ticket.label(&mut parts).await.is_none());
    let c = ResolvedAccount::new("codex", "acct-c");
    let Inject::ReadBody(d) = f.inject("/v1/chat/completions", &c) else {
        panic!()
    };
    let mut h = f.headers.clone();
    let decided = d.decide(&mut h, Bytes::from_static(CHAT.as_bytes())).await;
    assert!(
        decided.ticket.unwrap().carries_handoff(),
        "the retry on acct-c found the handoff still leased"
    );
}

#[tokio::test]
async fn try_label_refuses_an_error_status_with_a_claim() {
    let f = Fixture::new();
    f.handoff_from_a().await;
    let Inject::ReadBody(d) = f.inject("/v1/chat/completions", &b()) else {
        panic!()
    };
    let mut h = f.headers.clone();
    let decided = d.decide(&mut h, Bytes::from_static(CHAT.as_bytes())).await;
    let ticket = decided.ticket.unwrap();
    let (mut parts, ()) = http::Response::builder()
        .status(429)
        .body(())
        .unwrap()
        .into_parts();
    let ticket = ticket
        .try_label(&mut parts)
        .expect_err("must be released first");
    assert!(parts.headers.get(RELAY_HEADER).is_none(), "head untouched");
    assert!(ticket.carries_handoff());
    // A 2xx needs no release: labelled at once.
    let (mut parts, ()) = http::Response::new(()).into_parts();
    assert!(ticket.try_label(&mut parts).expect("no release").is_some());
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
    for (foreign, ttl, fast) in cases {
        let affinity =
            Affinity::new("codex", "acct-a").with_foreign(foreign, SystemTime::now() + ttl);
        f.store.set_affinity(&key, affinity).await.unwrap();
        let inject = f.inject("/v1/responses", &a());
        assert_eq!(
            matches!(inject, Inject::Forward { .. }),
            fast,
            "{inject:?} with {ttl:?}"
        );
    }
}
