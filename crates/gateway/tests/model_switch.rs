//! Model switches end to end: a real gateway on 127.0.0.1:0, a real HTTP client, and the strict
//! simulated provider (account-bound state minted per account, another account's rejected).
//!
//! A combo of two targets whose first target is exhausted on every account moves the session
//! to its second target: another provider and model. Here both targets speak the client's
//! shape (Anthropic Messages, Claude Code's requests; `translate.rs` covers a move across
//! shapes): `anthropic/claude-opus-4-8` and `backup/claude-sonnet-4-5`, two providers of
//! the simulator with accounts of their own.

use serde_json::Value;

use context_relay_sim::{RecordedRequest, SimProvider};
use context_relay_testkit::clients::{completed, contains};
use context_relay_testkit::conversation::{Client, Conversation};
use context_relay_testkit::handoff::{HANDOFF_TAG, SUMMARY_NEEDLE, summary_reply};
use context_relay_testkit::harness::{ADMIN_TOKEN, Harness};

const FIRST: &str = "anthropic/claude-opus-4-8";
const SECOND: &str = "backup/claude-sonnet-4-5";
/// Words of the bare note (no summary of the session exists).
const NO_SUMMARY: &str = "no summary of the earlier session exists";
/// The opening of a handoff built from the request at the switch.
const BUILT: &str =
    "No model summary was available; this handoff was built from the conversation itself";

/// A gateway over one simulator: provider `anthropic` (accounts `acct-x`, `acct-y`) and
/// provider `backup` (accounts `acct-p`, `acct-q`), both Anthropic Messages; combo `claude-fallback`
/// (context-relay) and `claude-priority` (priority) over both, in that order.
async fn harness(quota_step: f64) -> Harness {
    let sim = SimProvider::builder()
        .account("acct-x", "key-acct-x")
        .account("acct-y", "key-acct-y")
        .account("acct-p", "key-acct-p")
        .account("acct-q", "key-acct-q")
        .quota_step(quota_step)
        .summary_reply(SUMMARY_NEEDLE, summary_reply())
        .start()
        .await
        .expect("sim");
    let base_url = sim.base_url();
    let text = format!(
        r#"
admin_token = "{ADMIN_TOKEN}"
[store]
backend = "memory"
[relay]
handoff_providers = ["*"]
[[providers]]
name = "anthropic"
base_url = "{base_url}"
auth = "x-api-key"
  [[providers.accounts]]
  id = "acct-x"
  api_key = "key-acct-x"
  [[providers.accounts]]
  id = "acct-y"
  api_key = "key-acct-y"
[[providers]]
name = "backup"
base_url = "{base_url}"
auth = "x-api-key"
  [[providers.accounts]]
  id = "acct-p"
  api_key = "key-acct-p"
  [[providers.accounts]]
  id = "acct-q"
  api_key = "key-acct-q"
[[combos]]
name = "claude-fallback"
targets = ["{FIRST}", "{SECOND}"]
[[combos]]
name = "claude-priority"
strategy = "priority"
targets = ["{FIRST}", "{SECOND}"]
"#
    );
    Harness::single(sim, &text).await
}

/// Sends a turn; asserts it completed; the `x-context-relay` header.
async fn turn(h: &Harness, conv: &mut Conversation) -> String {
    let (status, acted, reply) = conv.turn(h, 0).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert!(completed(&reply), "{}", String::from_utf8_lossy(&reply));
    acted.unwrap_or_default()
}

/// Every account of the first target is used up.
fn exhaust_first_target(h: &Harness) {
    h.sim.set_used("acct-x", 100.0);
    h.sim.set_used("acct-y", 100.0);
}

/// The request the second target received: its model, no state of the first target's
/// accounts, and a model-switch block naming both models.
fn assert_moved(h: &Harness, r: &RecordedRequest) {
    assert_eq!(r.account.as_deref(), Some("acct-p"));
    assert_eq!(r.rejected, None, "the new provider accepted the request");
    let body = r.json().expect("JSON");
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert!(
        h.owners(r).iter().all(Option::is_none),
        "no account-bound state of the first target: {:?}",
        h.owners(r)
    );
    assert!(
        contains(
            &r.body,
            &format!(
                "<transfer_reason>Model switch from {FIRST} to {SECOND}: continuing a previous session</transfer_reason>"
            )
        ),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}

/// A later turn on the second target: accepted, carrying no state but its account's own.
fn assert_stays(h: &Harness, r: &RecordedRequest) {
    assert_eq!(r.account.as_deref(), Some("acct-p"));
    assert_eq!(r.rejected, None);
    let owners = h.owners(r);
    assert!(
        owners
            .iter()
            .all(|o| o.as_deref().is_none_or(|o| o == "acct-p")),
        "{owners:?}"
    );
}

#[tokio::test]
async fn a_combo_falling_through_to_its_next_target_carries_the_note_then_writes_a_handoff() {
    // The only test of this binary that installs the global recorder: the others may add to
    // its counts, so only the presence of the labelled series is asserted.
    let metrics = context_relay_gateway::prometheus_builder()
        .install_recorder()
        .expect("one recorder per test binary");
    // 10 % a turn: no account-switch handoff is ever written.
    let h = harness(10.0).await;
    let session = "0199b000-0000-7000-8000-00000000a001";
    let mut conv = Conversation::asking(Client::Claude, session, "claude-fallback");
    let acted = turn(&h, &mut conv).await;
    assert!(acted.is_empty(), "{acted}");
    let first = h.last_turn();
    assert_eq!(first.account.as_deref(), Some("acct-x"));
    assert!(
        h.sim.state_owners(&first).is_empty(),
        "the first turn carries no state yet"
    );
    h.idle().await;
    assert!(h.admin_handoffs(session).await.is_empty());

    exhaust_first_target(&h);
    // The client resends acct-x's signed thinking.
    let history = serde_json::to_string(&conv.body).unwrap();
    assert!(
        history.contains("\"signature\""),
        "signed thinking in the history"
    );
    let acted = turn(&h, &mut conv).await;
    assert!(
        acted.contains("model-switch") && acted.contains("injected") && acted.contains("scrubbed"),
        "{acted}"
    );
    let moved = h.last_turn();
    assert_moved(&h, &moved);
    // No summary was ever written: the switch carries one built from the request itself.
    assert!(contains(&moved.body, BUILT), "built from the request");
    assert!(!contains(&moved.body, NO_SUMMARY));

    // The first successful response on the new model wrote a handoff there (beside the one
    // built when the first target's next account was tried, and refused).
    let listed: Vec<Value> = h
        .admin_handoffs(session)
        .await
        .into_iter()
        .filter(|h| h["kind"] != "extractive")
        .collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["kind"], "model-switch");
    assert_eq!(listed[0]["from_provider"], "backup");
    assert_eq!(listed[0]["from_account"], "acct-p");
    let summaries: Vec<RecordedRequest> =
        h.sim.requests().into_iter().filter(|r| r.summary).collect();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].account.as_deref(), Some("acct-p"));
    let page = metrics.render();
    for series in [
        "context_relay_injected_total{kind=\"model\"}",
        "context_relay_switches_total{kind=\"model\"}",
        "context_relay_generations_total{outcome=\"generated\",kind=\"model\"}",
    ] {
        assert!(page.contains(series), "{series} missing in\n{page}");
    }

    // The next turn stays on the new model: nothing injected again, the first target's state
    // (resent by the client) still stripped.
    let acted = turn(&h, &mut conv).await;
    assert!(
        !acted.contains("model-switch") && !acted.contains("injected"),
        "{acted}"
    );
    let next = h.last_turn();
    assert!(!contains(&next.body, HANDOFF_TAG));
    assert_stays(&h, &next);
    // (The model-switch handoff, and the one built when acct-y was tried.)
    assert_eq!(h.admin_handoffs(session).await.len(), 2);
}

#[tokio::test]
async fn a_model_switch_carries_the_freshest_handoff_and_leaves_the_account_handoff() {
    // 30 % a turn: turn 3 reaches 90 % and writes an account-switch handoff.
    let h = harness(30.0).await;
    let session = "0199b000-0000-7000-8000-00000000a002";
    let mut conv = Conversation::asking(Client::Claude, session, "claude-fallback");
    for _ in 1..=3 {
        turn(&h, &mut conv).await;
    }
    let listed = h.admin_handoffs(session).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["kind"], "generated");

    exhaust_first_target(&h);
    let acted = turn(&h, &mut conv).await;
    assert!(acted.contains("model-switch"), "{acted}");
    let moved = h.last_turn();
    assert_moved(&h, &moved);
    assert!(contains(&moved.body, "Adding a --json flag to the CLI"));
    assert!(!contains(&moved.body, NO_SUMMARY));

    // Read, not consumed: the account handoff is still listed (and, being fresh, no other is
    // written).
    let listed = h.admin_handoffs(session).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["kind"], "generated");
    assert_eq!(listed[0]["from_provider"], "anthropic");
}

#[tokio::test]
async fn after_a_model_switch_the_new_models_accounts_hand_off_as_the_old_ones_did() {
    // 30 % a turn: turn 3 reaches 90 % on acct-x, turn 6 reaches 90 % on acct-p.
    let h = harness(30.0).await;
    let session = "0199b000-0000-7000-8000-00000000a004";
    let mut conv = Conversation::asking(Client::Claude, session, "claude-fallback");
    for _ in 1..=3 {
        turn(&h, &mut conv).await;
    }
    h.idle().await;
    exhaust_first_target(&h);
    let acted = turn(&h, &mut conv).await;
    assert!(acted.contains("model-switch"), "{acted}");
    for _ in 5..=6 {
        turn(&h, &mut conv).await;
    }
    h.idle().await;
    // The account handoff is now the new model's account's own: written from the work done
    // on the new model, fewer than `refresh_after_messages` messages after the old one.
    let listed = h.admin_handoffs(session).await;
    let account: Vec<&Value> = listed.iter().filter(|h| h["kind"] == "generated").collect();
    assert_eq!(account.len(), 1, "{listed:?}");
    assert_eq!(account[0]["from_provider"], "backup");
    assert_eq!(account[0]["from_account"], "acct-p");

    // acct-p is used up: the session moves to acct-q with that handoff and none of acct-p's
    // state.
    h.sim.set_used("acct-p", 100.0);
    let acted = turn(&h, &mut conv).await;
    assert!(
        acted.contains("injected") && !acted.contains("model-switch"),
        "{acted}"
    );
    let moved = h.last_turn();
    assert_eq!(moved.account.as_deref(), Some("acct-q"));
    assert_eq!(moved.rejected, None);
    assert!(contains(&moved.body, HANDOFF_TAG));
    assert!(
        h.owners(&moved).iter().all(Option::is_none),
        "{:?}",
        h.owners(&moved)
    );
    let listed = h.admin_handoffs(session).await;
    assert!(
        listed
            .iter()
            .all(|h| h["kind"] != "generated" || h["from_account"] != "acct-p"),
        "the injected handoff is consumed: {listed:?}"
    );
}

#[tokio::test]
async fn a_priority_combo_gets_the_model_switch_but_no_account_handoff() {
    let h = harness(30.0).await;
    let session = "0199b000-0000-7000-8000-00000000a003";
    let mut conv = Conversation::asking(Client::Claude, session, "claude-priority");
    for _ in 1..=3 {
        assert!(turn(&h, &mut conv).await.is_empty());
    }
    // At 90 %: no quota-driven handoff for a priority combo.
    assert!(h.admin_handoffs(session).await.is_empty());

    exhaust_first_target(&h);
    let acted = turn(&h, &mut conv).await;
    assert!(acted.contains("model-switch"), "{acted}");
    let moved = h.last_turn();
    assert_moved(&h, &moved);
    assert!(contains(&moved.body, BUILT));
    let listed = h.admin_handoffs(session).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["kind"], "model-switch");

    // The scrub of the model switch lasts: the next turn goes out without the first target's
    // state, which the client still resends.
    let acted = turn(&h, &mut conv).await;
    assert!(
        acted.contains("scrubbed") && !acted.contains("model-switch"),
        "{acted}"
    );
    let next = h.last_turn();
    assert_stays(&h, &next);
}
