//! Model switches, driven without any tower service: a session whose request goes to another
//! model (`provider/model`) than the one that last served it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::render::{MODEL_SWITCH_INSTRUCTION, NO_SUMMARY_NOTE};
use context_relay_core::{
    Handoff, HandoffKey, HandoffKind, HandoffRecord, HandoffSlot, RelayConfig, session,
};
use context_relay_engine::{
    Attempt, BodyPlan, ComboName, RELAY_HEADER, Relay, RelayAction, RelayBuilder, RequestFacts,
    ResolvedAccount, ResponsePlan, ServingModel, SummaryError, SummaryRequest,
};
use context_relay_store::{Affinity, HandoffStore, MemoryStore};
use http::{HeaderMap, StatusCode, Uri};

const CODEX: &str = "codex/gpt-5.5";
const HANDOFF_TAG: &str = "<context_handoff>";
const CLAUDE: &str = "anthropic/claude-sonnet-4-5";
/// An Anthropic Messages turn whose history carries a thinking block signed by the old
/// provider's account.
const MESSAGES: &str = r#"{"model":"claude-sonnet-4-5","system":"You are a coding agent.","messages":[{"role":"user","content":"add a --json flag"},{"role":"assistant","content":[{"type":"thinking","thinking":"plan","signature":"sig-of-codex"},{"type":"text","text":"Parsing the flag now."}]},{"role":"user","content":"go on"}]}"#;
const CHAT: &str = r#"{"model":"gpt-5.5","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"add a --json flag"}]}"#;
const SUMMARY: &str = r#"{"choices":[{"message":{"content":"{\"summary\":\"Adding a --json flag on the new model\",\"keyDecisions\":[\"serde\"]}"}}]}"#;
const REPLY: &str = r#"{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"Added the flag."}}]}"#;

struct Fixture {
    store: Arc<dyn HandoffStore>,
    relay: Relay,
    combo: ComboName,
    headers: HeaderMap,
    summaries: Arc<AtomicUsize>,
}

impl Fixture {
    fn new() -> Self {
        Self::with(|b| b)
    }

    fn with(configure: impl FnOnce(RelayBuilder) -> RelayBuilder) -> Self {
        let store: Arc<dyn HandoffStore> = Arc::new(MemoryStore::new());
        let summaries = Arc::new(AtomicUsize::new(0));
        let calls = summaries.clone();
        let summarizer = move |_: SummaryRequest| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, SummaryError>(Bytes::from_static(SUMMARY.as_bytes())) }
        };
        let mut headers = HeaderMap::new();
        headers.insert("x-session-id", "s1".parse().unwrap());
        Self {
            relay: configure(Relay::builder(store.clone()).summarizer(summarizer)).build(),
            store,
            combo: ComboName::new("coding"),
            headers,
            summaries,
        }
    }

    fn key(&self) -> HandoffKey {
        HandoffKey::new(session::tenant(&self.headers), "s1", "coding")
    }

    fn attempt(&self, path: &str, account: &ResolvedAccount, model: Option<&str>) -> Attempt {
        let uri: Uri = path.parse().unwrap();
        let model = model.map(ServingModel::new);
        let facts = RequestFacts {
            combo: Some(&self.combo),
            account: Some(account),
            model: model.as_ref(),
            ..Default::default()
        };
        self.relay.attempt(&uri, &self.headers, facts, 0)
    }

    async fn decide(
        &self,
        path: &str,
        account: &ResolvedAccount,
        model: &str,
        body: &str,
    ) -> Decided {
        let mut attempt = self.attempt(path, account, Some(model));
        assert!(held(&attempt), "a model switch reads the body");
        let mut headers = self.headers.clone();
        let body = attempt
            .request_body(&mut headers, Bytes::from(body.to_owned()))
            .await;
        assert!(attempt.is_relayed(), "a session");
        Decided { attempt, body }
    }

    /// Whether the session's account handoff can be claimed now (given back at once).
    async fn claimable(&self) -> bool {
        common::claimable(self.store.as_ref(), &self.key()).await
    }

    /// The session was last served by `account` on `model`.
    async fn served(&self, account: &ResolvedAccount, model: &str) {
        let affinity = Affinity::of(account.clone()).with_model(model);
        self.store
            .set_affinity(&self.key(), affinity)
            .await
            .unwrap();
    }

    /// A handoff of `kind` written by codex/acct-a, `age` ago.
    async fn handoff(&self, kind: HandoffKind, summary: &str, age: Duration) {
        let key = self.key();
        let at = SystemTime::now() - age;
        self.store
            .upsert(HandoffRecord {
                version: 1,
                kind,
                tenant: key.tenant.clone(),
                session: key.session.clone(),
                combo: key.combo.clone(),
                from_provider: "codex".into(),
                from_account: "acct-a".into(),
                handoff: Handoff {
                    summary: summary.into(),
                    ..Handoff::default()
                },
                message_count: 12,
                conversation: None,
                compaction: false,
                model: "gpt-5.5".into(),
                threshold: 0.85,
                generated_at: at,
                expires_at: at + Duration::from_secs(3600),
            })
            .await
            .unwrap();
    }

    /// The generation side of one turn on `account`, whose response head is `head`, with the
    /// reply completed; waits for the background work.
    async fn generation(&self, account: &ResolvedAccount, head: &HeaderMap) -> bool {
        let uri: Uri = "/v1/chat/completions".parse().unwrap();
        let facts = RequestFacts {
            combo: Some(&self.combo),
            ..Default::default()
        };
        let mut turn = self.relay.turn(&uri, &self.headers, facts);
        assert!(turn.is_active());
        turn.request_chunk(&Bytes::from_static(CHAT.as_bytes()), true);
        turn.response(StatusCode::OK, head, Some(account), None, None);
        if !turn.watches_reply() {
            return false;
        }
        turn.response_chunk(REPLY.as_bytes());
        turn.end(false);
        self.relay.background().idle().await;
        true
    }
}

/// An attempt whose body was decided, and the body it sends.
struct Decided {
    attempt: Attempt,
    body: Bytes,
}

/// The body is held for a decision.
fn held(attempt: &Attempt) -> bool {
    matches!(attempt.body_plan(), BodyPlan::Hold { .. })
}

/// The fast path: relayed, the body forwarded as it comes.
fn fast(attempt: &Attempt) -> bool {
    attempt.is_relayed() && matches!(attempt.body_plan(), BodyPlan::Stream { .. })
}

/// A 2xx whose body completed.
async fn complete(mut attempt: Attempt) {
    let plan = attempt
        .response_head(StatusCode::OK, &HeaderMap::new())
        .await;
    assert_eq!(plan, ResponsePlan::Forward);
    attempt.response_chunk(REPLY.as_bytes());
    attempt.end(false);
}

fn codex_a() -> ResolvedAccount {
    ResolvedAccount::new("codex", "acct-a")
}

fn claude_x() -> ResolvedAccount {
    ResolvedAccount::new("anthropic", "acct-x")
}

fn text(d: &Decided) -> String {
    String::from_utf8(d.body.to_vec()).unwrap()
}

#[tokio::test]
async fn a_model_switch_injects_the_freshest_handoff_and_scrubs_all_account_bound_state() {
    let f = Fixture::new();
    f.served(&codex_a(), CODEX).await;
    f.handoff(
        HandoffKind::Generated,
        "older account handoff",
        Duration::from_secs(60),
    )
    .await;
    f.handoff(
        HandoffKind::ModelSwitch,
        "newer model handoff",
        Duration::ZERO,
    )
    .await;

    let decided = f
        .decide("/v1/messages", &claude_x(), CLAUDE, MESSAGES)
        .await;
    let body = text(&decided);
    assert!(
        body.contains(
            "<transfer_reason>Model switch from codex/gpt-5.5 to anthropic/claude-sonnet-4-5: \
             continuing a previous session</transfer_reason>"
        ),
        "{body}"
    );
    assert!(body.contains("newer model handoff"), "the freshest: {body}");
    assert!(!body.contains("older account handoff"), "{body}");
    assert!(body.contains(MODEL_SWITCH_INSTRUCTION));
    assert!(
        !body.contains("sig-of-codex"),
        "thinking of the old provider removed: {body}"
    );
    assert!(
        body.contains("Parsing the flag now."),
        "the text stays: {body}"
    );
    let action = decided.attempt.action();
    assert!(
        action.model_switch && action.injected && action.scrubbed,
        "{action:?}"
    );
    assert!(f.claimable().await, "a model switch claims nothing");

    // The response completed: the session's affinity is now the new account on the new model.
    complete(decided.attempt).await;
    f.relay.background().idle().await;
    let affinity = f.store.affinity(&f.key()).await.unwrap().unwrap();
    assert_eq!(affinity.account(), &claude_x());
    assert_eq!(affinity.model(), Some(CLAUDE));
    // Neither handoff was consumed.
    for slot in HandoffSlot::ALL {
        assert!(
            f.store.contains_in(&f.key(), slot).await.unwrap(),
            "{slot:?}"
        );
    }
}

#[tokio::test]
async fn the_account_handoff_is_read_and_left_unconsumed() {
    let f = Fixture::new();
    f.served(&codex_a(), CODEX).await;
    f.handoff(
        HandoffKind::Generated,
        "the account handoff",
        Duration::ZERO,
    )
    .await;

    let decided = f
        .decide("/v1/messages", &claude_x(), CLAUDE, MESSAGES)
        .await;
    assert!(text(&decided).contains("the account handoff"));
    complete(decided.attempt).await;
    f.relay.background().idle().await;

    // Still there, unleased: an account of its own provider can still claim it.
    let claim = f
        .store
        .claim(&f.key(), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        claim.is_some(),
        "the account handoff was neither consumed nor left leased"
    );
    f.store.release(&claim.unwrap()).await.unwrap();

    // The next turn on the new model is no switch; the new provider's account does not consume
    // the other provider's account handoff either.
    let next = f
        .decide("/v1/messages", &claude_x(), CLAUDE, MESSAGES)
        .await;
    let body = text(&next);
    assert!(
        !body.contains("<context_handoff>"),
        "nothing injected: {body}"
    );
    assert!(!body.contains("sig-of-codex"), "the scrub lasts: {body}");
    assert!(f.claimable().await, "nothing claimed");
    let action = next.attempt.action();
    assert!(
        !action.injected && !action.model_switch && action.scrubbed,
        "{action:?}"
    );
    drop(next);
    f.relay.background().idle().await;
    assert!(f.store.contains(&f.key()).await.unwrap());
}

#[tokio::test]
async fn a_model_switch_without_any_handoff_carries_one_built_from_the_request() {
    let f = Fixture::new();
    // Same provider and account, another model, for a conversation the first one answered.
    f.served(&codex_a(), CODEX).await;
    let answered = r#"{"model":"gpt-5.5","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"add a --json flag"},{"role":"assistant","content":"Parsing works."},{"role":"user","content":"now the tests"}]}"#;
    let decided = f
        .decide(
            "/v1/chat/completions",
            &codex_a(),
            "codex/gpt-5.4-mini",
            answered,
        )
        .await;
    let body = text(&decided);
    assert!(
        body.contains("Model switch from codex/gpt-5.5 to codex/gpt-5.4-mini"),
        "{body}"
    );
    assert!(
        body.contains("<session_summary>No model summary was available"),
        "{body}"
    );
    assert!(body.contains("Task: add a --json flag"), "{body}");
    assert!(
        !body.contains(&NO_SUMMARY_NOTE.replace('"', "\\\"")),
        "{body}"
    );
    let action = decided.attempt.action();
    assert!(action.model_switch && action.injected, "{action:?}");

    // A request with no text to build one from, or no answer yet: the bare note.
    for bare in [
        r#"{"model":"gpt-5.5","messages":[{"role":"system","content":""}]}"#,
        CHAT,
    ] {
        let f = Fixture::new();
        f.served(&codex_a(), CODEX).await;
        let decided = f
            .decide(
                "/v1/chat/completions",
                &codex_a(),
                "codex/gpt-5.4-mini",
                bare,
            )
            .await;
        let body = text(&decided);
        assert!(
            body.contains(&NO_SUMMARY_NOTE.replace('"', "\\\"")),
            "{body}"
        );
        assert!(!body.contains("<session_summary>"), "{body}");
    }
}

#[tokio::test]
async fn the_fast_path_detects_a_model_change() {
    let f = Fixture::new();
    f.served(&codex_a(), CODEX).await;
    let path = "/v1/chat/completions";
    assert!(fast(&f.attempt(path, &codex_a(), Some(CODEX))));
    assert!(
        held(&f.attempt(path, &codex_a(), Some("codex/gpt-5.4-mini"))),
        "same account, another model: not the fast path"
    );
    assert!(
        fast(&f.attempt(path, &codex_a(), None)),
        "without a serving model, model switches are off"
    );

    // Switched off for the combo: the fast path again.
    let off = Fixture::with(|b| {
        b.config(RelayConfig {
            model_switch: false,
            ..RelayConfig::default()
        })
    });
    off.served(&codex_a(), CODEX).await;
    assert!(fast(&off.attempt(
        path,
        &codex_a(),
        Some("codex/gpt-5.4-mini")
    )));
}

#[tokio::test]
async fn the_switch_is_injected_once_and_the_first_model_is_recorded() {
    let f = Fixture::new();
    let path = "/v1/chat/completions";
    // A session recorded before models were: the first request records its model.
    f.store
        .set_affinity(&f.key(), Affinity::of(codex_a()))
        .await
        .unwrap();
    let attempt = f.attempt(path, &codex_a(), Some(CODEX));
    assert!(fast(&attempt), "no switch: the fast path");
    complete(attempt).await;
    f.relay.background().idle().await;
    let affinity = f.store.affinity(&f.key()).await.unwrap().unwrap();
    assert_eq!(affinity.model(), Some(CODEX));

    let decided = f.decide(path, &codex_a(), "codex/gpt-5.4-mini", CHAT).await;
    assert!(decided.attempt.action().model_switch);
    drop(decided);
    // That response failed: the affinity stays, the next request is the switch again.
    let again = f.decide(path, &codex_a(), "codex/gpt-5.4-mini", CHAT).await;
    assert!(again.attempt.action().model_switch);
    complete(again.attempt).await;
    f.relay.background().idle().await;
    // Completed: the session is on the new model. Within the switch window the next request
    // is read (other conversations of the session may still cross), and is no switch.
    let next = f.decide(path, &codex_a(), "codex/gpt-5.4-mini", CHAT).await;
    assert!(next.attempt.action().is_empty());
    assert_eq!(next.body, CHAT.as_bytes());
}

fn switched_head() -> HeaderMap {
    let mut head = HeaderMap::new();
    let action = RelayAction {
        model_switch: true,
        injected: true,
        ..RelayAction::default()
    };
    head.insert(RELAY_HEADER, action.header_value().unwrap());
    head
}

#[tokio::test]
async fn the_first_response_on_a_new_model_generates_a_model_switch_handoff() {
    let f = Fixture::new();
    // An ordinary response, below any threshold: nothing.
    assert!(!f.generation(&claude_x(), &HeaderMap::new()).await);
    // The session has a fresh handoff (the one the switch injected): nothing to write.
    f.handoff(HandoffKind::Generated, "old", Duration::ZERO)
        .await;
    assert!(f.generation(&claude_x(), &switched_head()).await);
    assert_eq!(f.summaries.load(Ordering::SeqCst), 0, "fresh");
    // Without one, the first response on the new model is summarised on it.
    f.store.delete(&f.key()).await.unwrap();
    assert!(f.generation(&claude_x(), &switched_head()).await);
    assert_eq!(f.summaries.load(Ordering::SeqCst), 1);
    let record = f
        .store
        .get_in(&f.key(), HandoffSlot::Model)
        .await
        .unwrap()
        .expect("stored in the model slot");
    assert_eq!(record.kind, HandoffKind::ModelSwitch);
    assert_eq!(record.from(), claude_x());
    assert_eq!(
        record.handoff.summary,
        "Adding a --json flag on the new model"
    );
    assert_eq!(
        f.store.get(&f.key()).await.unwrap(),
        None,
        "not in the account slot"
    );
    let listed: Vec<_> = f.store.list(None, Some("s1")).await.unwrap();
    assert!(listed.iter().any(|r| r.kind == HandoffKind::ModelSwitch));

    // The session now has a fresh handoff: another first response does not summarise again.
    assert!(f.generation(&claude_x(), &switched_head()).await);
    assert_eq!(f.summaries.load(Ordering::SeqCst), 1, "fresh");
}

#[tokio::test]
async fn model_switch_generation_follows_the_provider_allow_list_and_the_switch() {
    let f = Fixture::with(|b| b.providers(["codex"]));
    assert!(
        !f.generation(&claude_x(), &switched_head()).await,
        "anthropic not allowed"
    );
    let off = Fixture::with(|b| {
        b.config(RelayConfig {
            model_switch: false,
            handoff_providers: vec!["*".into()],
            ..RelayConfig::default()
        })
    });
    assert!(
        !off.generation(&claude_x(), &switched_head()).await,
        "model switches off"
    );
    assert_eq!(
        f.summaries.load(Ordering::SeqCst) + off.summaries.load(Ordering::SeqCst),
        0
    );
}

#[tokio::test]
async fn with_account_handoffs_off_only_model_switches_are_relayed() {
    let model_only = || RelayConfig {
        account_handoff: false,
        handoff_providers: vec!["*".into()],
        ..RelayConfig::default()
    };
    let f = Fixture::with(|b| b.config(model_only()));
    f.served(&codex_a(), CODEX).await;
    let path = "/v1/messages";
    let codex_b = ResolvedAccount::new("codex", "acct-b");
    assert!(
        fast(&f.attempt(path, &codex_b, Some(CODEX))),
        "another account of the same model: no account switch here"
    );
    let bare = f.attempt(path, &codex_b, None);
    assert!(
        !bare.is_relayed() && !held(&bare),
        "nothing to relay without a serving model"
    );
    let decided = f.decide(path, &claude_x(), CLAUDE, MESSAGES).await;
    let body = text(&decided);
    assert!(body.contains("Model switch from codex/gpt-5.5 to anthropic/claude-sonnet-4-5"));
    assert!(!body.contains("sig-of-codex"), "{body}");
    complete(decided.attempt).await;
    f.relay.background().idle().await;
    // The scrub of the model switch lasts, for every account of the new model.
    for account in [claude_x(), ResolvedAccount::new("anthropic", "acct-y")] {
        let later = f.decide(path, &account, CLAUDE, MESSAGES).await;
        let body = text(&later);
        assert!(
            !body.contains("sig-of-codex") && !body.contains(HANDOFF_TAG),
            "{body}"
        );
        let action = later.attempt.action();
        assert!(action.scrubbed && !action.model_switch, "{action:?}");
    }

    // No quota-driven handoff; the model-switch one is written.
    let mut near_limit = HeaderMap::new();
    near_limit.insert("x-codex-primary-used-percent", "90".parse().unwrap());
    assert!(!f.generation(&codex_a(), &near_limit).await);
    assert!(f.generation(&claude_x(), &switched_head()).await);
    assert_eq!(f.summaries.load(Ordering::SeqCst), 1);
    let stored = f.store.list(None, None).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].kind, HandoffKind::ModelSwitch);

    // Both off: the generation side does not even keep the request.
    let off = Fixture::with(|b| {
        b.config(RelayConfig {
            model_switch: false,
            ..model_only()
        })
    });
    let uri: Uri = "/v1/chat/completions".parse().unwrap();
    let facts = RequestFacts {
        combo: Some(&off.combo),
        ..Default::default()
    };
    assert!(!off.relay.turn(&uri, &off.headers, facts).is_active());
}
