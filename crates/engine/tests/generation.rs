//! The generation side of the engine, driven without any tower service: the quota gates, the
//! request and reply capture, and the summary job through a custom summarizer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use context_relay_core::{HandoffKey, session};
use context_relay_engine::{
    ComboName, Relay, RelayBuilder, RequestFacts, ResolvedAccount, SummaryError, SummaryRequest,
    Tenant,
};
use context_relay_store::{HandoffStore, MemoryStore};
use http::{HeaderMap, StatusCode, Uri};

const TURN: &str = r#"{"model":"gpt-5","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"add a --json flag to the CLI"}]}"#;
const SUMMARY: &str = r#"{"choices":[{"message":{"content":"{\"summary\":\"Adding a --json flag\",\"keyDecisions\":[\"serde\"]}"}}]}"#;
const REPLY: &str = r#"{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"Added the flag in src/cli.rs."}}]}"#;

struct Fixture {
    store: Arc<dyn HandoffStore>,
    relay: Relay,
    calls: Arc<AtomicUsize>,
    seen: Arc<Mutex<Option<SummaryRequest>>>,
    headers: HeaderMap,
}

impl Fixture {
    fn new(configure: impl FnOnce(RelayBuilder) -> RelayBuilder) -> Self {
        let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(None));
        let (c, s) = (calls.clone(), seen.clone());
        let summarizer = move |req: SummaryRequest| {
            c.fetch_add(1, Ordering::SeqCst);
            *s.lock().unwrap() = Some(req);
            async { Ok::<_, SummaryError>(Bytes::from_static(SUMMARY.as_bytes())) }
        };
        let relay = configure(Relay::builder(store.clone()).summarizer(summarizer)).build();
        let mut headers = HeaderMap::new();
        headers.insert("x-session-id", "s1".parse().unwrap());
        headers.insert("authorization", "Bearer sk-client".parse().unwrap());
        Self {
            store,
            relay,
            calls,
            seen,
            headers,
        }
    }

    /// One turn served by `account` at `used` percent; the status of the response.
    async fn turn(&self, account: &str, used: &str, status: StatusCode) {
        self.turn_of(None, account, used, status).await;
    }

    /// [`turn`](Self::turn) of a request with an explicit `tenant`.
    async fn turn_of(
        &self,
        tenant: Option<&Tenant>,
        account: &str,
        used: &str,
        status: StatusCode,
    ) {
        self.turn_at("/v1/chat/completions", tenant, account, used, status)
            .await;
    }

    /// [`turn_of`](Self::turn_of) sent to `path` (a query included).
    async fn turn_at(
        &self,
        path: &str,
        tenant: Option<&Tenant>,
        account: &str,
        used: &str,
        status: StatusCode,
    ) {
        let combo = ComboName::new("codex-relay");
        let facts = RequestFacts {
            combo: Some(&combo),
            tenant,
            ..Default::default()
        };
        self.turn_of_body(path, facts, TURN.as_bytes(), (account, used, status))
            .await;
    }

    /// One turn of `body` sent to `path`, served by `account` at `used` percent with `status`.
    async fn turn_of_body(
        &self,
        path: &str,
        facts: RequestFacts<'_>,
        body: &'static [u8],
        (account, used, status): (&str, &str, StatusCode),
    ) {
        let uri: Uri = path.parse().unwrap();
        let mut turn = self.relay.turn(&uri, &self.headers, facts);
        assert!(turn.is_active(), "can lead to a summary");
        // The body goes out in two chunks, then ends.
        turn.request_chunk(&Bytes::from_static(&body[..30]), false);
        turn.request_chunk(&Bytes::from_static(&body[30..]), false);
        turn.request_chunk(&Bytes::new(), true);
        let mut response = HeaderMap::new();
        response.insert("x-codex-primary-used-percent", used.parse().unwrap());
        let served_by = ResolvedAccount::new("codex", account);
        turn.response(status, &response, Some(&served_by), None, None);
        turn.response_chunk(REPLY.as_bytes());
        turn.end(false);
        self.relay.background().idle().await;
    }

    fn key(&self) -> HandoffKey {
        HandoffKey::new(session::tenant(&self.headers), "s1", "codex-relay")
    }
}

#[tokio::test]
async fn a_turn_over_the_threshold_is_summarised_into_a_handoff() {
    let f = Fixture::new(|b| b);
    f.turn("acct-a", "88", StatusCode::OK).await;
    assert_eq!(f.calls.load(Ordering::SeqCst), 1);
    let request = f.seen.lock().unwrap().take().expect("summary request");
    assert_eq!(request.combo, ComboName::new("codex-relay"));
    assert_eq!(request.headers["authorization"], "Bearer sk-client");
    let stored = f.store.get(&f.key()).await.unwrap().expect("stored");
    assert_eq!(stored.handoff.summary, "Adding a --json flag");
    assert_eq!(stored.from_account, "acct-a");
}

#[tokio::test]
async fn the_gates_keep_the_summary_call_for_turns_that_need_it() {
    // Below the threshold, at exhaustion, an error status: nothing.
    let f = Fixture::new(|b| b);
    f.turn("acct-a", "40", StatusCode::OK).await;
    f.turn("acct-a", "97", StatusCode::OK).await;
    f.turn("acct-a", "90", StatusCode::INTERNAL_SERVER_ERROR)
        .await;
    assert_eq!(f.calls.load(Ordering::SeqCst), 0);
    assert!(f.store.get(&f.key()).await.unwrap().is_none());

    // A provider that gets no handoffs.
    let f = Fixture::new(|b| b.providers(["anthropic"]));
    f.turn("acct-a", "90", StatusCode::OK).await;
    assert_eq!(f.calls.load(Ordering::SeqCst), 0);

    // A fresh model handoff is not summarised again on the next turn.
    let f = Fixture::new(|b| b);
    f.turn("acct-a", "88", StatusCode::OK).await;
    f.turn("acct-a", "89", StatusCode::OK).await;
    assert_eq!(f.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn no_active_turn_without_a_combo_or_an_api_path_or_when_off() {
    let f = Fixture::new(|b| b);
    let uri: Uri = "/v1/chat/completions".parse().unwrap();
    assert!(
        !f.relay
            .turn(&uri, &f.headers, RequestFacts::default())
            .is_active()
    );
    let combo = ComboName::new("codex-relay");
    let facts = RequestFacts {
        combo: Some(&combo),
        ..Default::default()
    };
    let health: Uri = "/healthz".parse().unwrap();
    assert!(!f.relay.turn(&health, &f.headers, facts).is_active());
    let off = Fixture::new(|b| b.providers(Vec::<String>::new()));
    assert!(!off.relay.turn(&uri, &off.headers, facts).is_active());
}

#[tokio::test]
async fn a_reply_that_failed_starts_nothing() {
    let f = Fixture::new(|b| b);
    let combo = ComboName::new("codex-relay");
    let facts = RequestFacts {
        combo: Some(&combo),
        ..Default::default()
    };
    let uri: Uri = "/v1/chat/completions".parse().unwrap();
    let mut turn = f.relay.turn(&uri, &f.headers, facts);
    turn.request_chunk(&Bytes::from_static(TURN.as_bytes()), true);
    let mut response = HeaderMap::new();
    response.insert("x-codex-primary-used-percent", "88".parse().unwrap());
    let served_by = ResolvedAccount::new("codex", "acct-a");
    turn.response(StatusCode::OK, &response, Some(&served_by), None, None);
    assert!(turn.watches_reply(), "qualifies");
    turn.response_chunk(&REPLY.as_bytes()[..10]);
    turn.end(true);
    f.relay.background().idle().await;
    assert_eq!(f.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_gemini_key_client_gets_its_handoff_under_its_own_tenant() {
    let mut f = Fixture::new(|b| b);
    f.headers.remove("authorization");
    f.headers
        .insert("x-goog-api-key", "AIza-client".parse().unwrap());
    f.turn("acct-a", "88", StatusCode::OK).await;
    assert_eq!(f.calls.load(Ordering::SeqCst), 1);
    let request = f.seen.lock().unwrap().take().expect("summary request");
    let anon = HandoffKey::new("anonymous", "s1", "codex-relay");
    assert!(
        f.store.get(&anon).await.unwrap().is_none(),
        "stored under the anonymous tenant"
    );
    assert!(
        f.store.get(&f.key()).await.unwrap().is_some(),
        "not under the client's tenant"
    );
    assert!(
        request.headers.contains_key("x-goog-api-key"),
        "summary request lost the client's key"
    );
}

#[tokio::test]
async fn a_query_key_client_gets_its_handoff_under_its_own_tenant() {
    let mut f = Fixture::new(|b| b);
    f.headers.remove("authorization");
    f.turn_at(
        "/v1/chat/completions?key=AIza-query",
        None,
        "acct-a",
        "88",
        StatusCode::OK,
    )
    .await;
    assert_eq!(f.calls.load(Ordering::SeqCst), 1);
    let request = f.seen.lock().unwrap().take().expect("summary request");
    assert_eq!(
        request.uri.query(),
        Some("key=AIza-query"),
        "summary keeps the key"
    );
    let own = HandoffKey::new(session::tenant_of(Some(b"AIza-query")), "s1", "codex-relay");
    assert!(
        f.store.get(&own).await.unwrap().is_some(),
        "not under the key's tenant"
    );
    let anon = HandoffKey::new("anonymous", "s1", "codex-relay");
    assert!(
        f.store.get(&anon).await.unwrap().is_none(),
        "stored as anonymous"
    );
}

/// The tenant is derived when the response qualifies, not at header time: an explicit
/// `Tenant` given with the request still wins over the credential.
#[tokio::test]
async fn an_explicit_tenant_keys_the_handoff() {
    let f = Fixture::new(|b| b);
    f.turn_of(Some(&Tenant::new("team-a")), "acct-a", "88", StatusCode::OK)
        .await;
    assert_eq!(f.calls.load(Ordering::SeqCst), 1);
    let team_key = HandoffKey::new("team-a", "s1", "codex-relay");
    assert!(f.store.get(&team_key).await.unwrap().is_some());
    assert!(f.store.get(&f.key()).await.unwrap().is_none());
}

#[tokio::test]
async fn the_event_sink_hears_each_outcome_and_each_skip_with_its_reason() {
    let events: Arc<Mutex<Vec<context_relay_engine::RelayEvent>>> = Arc::default();
    let sink = events.clone();
    let f = Fixture::new(|b| {
        b.events(move |e: context_relay_engine::RelayEvent| sink.lock().unwrap().push(e))
    });
    f.turn("acct-a", "40", StatusCode::OK).await; // below the threshold: nothing to tell
    f.turn("acct-a", "88", StatusCode::OK).await; // generated
    f.turn("acct-a", "89", StatusCode::OK).await; // skipped: a fresh handoff exists
    f.turn("acct-a", "97", StatusCode::OK).await; // skipped: the account is about to be cut off
    let events = events.lock().unwrap();
    let told: Vec<(&str, Option<&str>)> = events.iter().map(|e| (e.kind, e.reason)).collect();
    assert_eq!(
        told,
        [
            ("generated", None),
            ("skipped", Some("fresh")),
            ("skipped", Some("exhausted"))
        ]
    );
    assert_eq!(events[0].key.as_ref(), Some(&f.key()));
    assert_eq!(
        events[0].account.as_ref().map(|a| &**a.account()),
        Some("acct-a")
    );
    assert_eq!(
        events[0].handoff,
        Some(context_relay_core::HandoffKind::Generated)
    );
    assert_eq!(events[2].key, None, "skipped before the session was read");
}

#[tokio::test]
async fn a_provider_with_its_own_quota_rules_is_read_with_them_only() {
    use context_relay_core::quota::QuotaKind;
    // `none`: the codex usage header at 88 % is not read, no summary follows.
    let none = Fixture::new(|b| b.provider_quota("codex", QuotaKind::None));
    none.turn("acct-a", "88", StatusCode::OK).await;
    assert_eq!(none.calls.load(Ordering::SeqCst), 0);
    // Another provider's rules do not read the codex header either.
    let other = Fixture::new(|b| b.provider_quota("Codex", QuotaKind::Anthropic));
    other.turn("acct-a", "88", StatusCode::OK).await;
    assert_eq!(other.calls.load(Ordering::SeqCst), 0);
    // The provider's own rules apply whatever the default source says.
    let own = Fixture::new(|b| {
        b.quota_source(|_: StatusCode, _: &HeaderMap, _| None)
            .provider_quota("codex", QuotaKind::Codex)
    });
    own.turn("acct-a", "88", StatusCode::OK).await;
    assert_eq!(own.calls.load(Ordering::SeqCst), 1);
}

/// A summary stream that fails in band (the account ran out while writing it) gives no reply
/// to judge: the session does not cool down as after an unparseable one, and the next
/// qualifying turn tries again.
#[tokio::test]
async fn a_summary_stream_that_failed_in_band_cools_nothing_down() {
    const FAILED: &[u8] = b"data: {\"error\":{\"message\":\"Rate limit reached. Please try again in 20s.\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n\n";
    let replies = Arc::new(AtomicUsize::new(0));
    let r = replies.clone();
    let f = Fixture::new(move |b| {
        b.summarizer(move |_: SummaryRequest| {
            let first = r.fetch_add(1, Ordering::SeqCst) == 0;
            let reply = if first { FAILED } else { SUMMARY.as_bytes() };
            async move { Ok::<_, SummaryError>(Bytes::from_static(reply)) }
        })
    });
    f.turn("acct-a", "88", StatusCode::OK).await;
    assert_eq!(replies.load(Ordering::SeqCst), 1);
    f.turn("acct-a", "89", StatusCode::OK).await;
    assert_eq!(replies.load(Ordering::SeqCst), 2, "not cooling down");
    let stored = f.store.get(&f.key()).await.unwrap().expect("stored");
    assert_eq!(stored.handoff.summary, "Adding a --json flag");
}

/// A summary reply cut before its end (a stream with no terminal event, a JSON body that
/// never closed) is a transport failure, not an answer to judge: no cool-down either.
#[tokio::test]
async fn a_summary_reply_cut_before_its_end_cools_nothing_down() {
    const CUT: &[u8] =
        b"data: {\"choices\":[{\"delta\":{\"content\":\"{\\\"summary\\\":\\\"Add\"}}]}\n\n";
    let replies = Arc::new(AtomicUsize::new(0));
    let r = replies.clone();
    let f = Fixture::new(move |b| {
        b.summarizer(move |_: SummaryRequest| {
            let first = r.fetch_add(1, Ordering::SeqCst) == 0;
            let reply = if first { CUT } else { SUMMARY.as_bytes() };
            async move { Ok::<_, SummaryError>(Bytes::from_static(reply)) }
        })
    });
    f.turn("acct-a", "88", StatusCode::OK).await;
    f.turn("acct-a", "89", StatusCode::OK).await;
    assert_eq!(replies.load(Ordering::SeqCst), 2, "not cooling down");
}

/// A chained Responses session's refresh that fails keeps what its turns added: the next turn
/// in the band tries again, as a message-resending client's would (the count restarted from
/// nothing, and the handoff waited for as many items again).
#[tokio::test]
async fn a_chained_refresh_that_fails_is_tried_again_on_the_next_turn() {
    const CHAINED: &[u8] = br#"{"model":"gpt-5","previous_response_id":"resp_1","input":[{"role":"user","content":"step on with the --json flag"}]}"#;
    const FAILED: &[u8] = b"data: {\"error\":{\"message\":\"Rate limit reached. Please try again in 20s.\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n\n";
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let f = Fixture::new(move |b| {
        b.config(context_relay_core::RelayConfig {
            refresh_after_messages: 3,
            ..Default::default()
        })
        .summarizer(move |_: SummaryRequest| {
            // The second summary (the first refresh) fails; the others succeed.
            let reply = match c.fetch_add(1, Ordering::SeqCst) {
                1 => FAILED,
                _ => SUMMARY.as_bytes(),
            };
            async move { Ok::<_, SummaryError>(Bytes::from_static(reply)) }
        })
    });
    let combo = ComboName::new("codex-relay");
    let facts = RequestFacts {
        combo: Some(&combo),
        ..Default::default()
    };
    for _ in 0..4 {
        f.turn_of_body(
            "/v1/responses",
            facts,
            CHAINED,
            ("acct-a", "88", StatusCode::OK),
        )
        .await;
    }
    // Two items a turn (its input, the reply): turn 1 writes it; turn 3 has added enough, and
    // its summary fails; turn 4 tries again at once.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}
