//! Metric names of the relay (recorded through the [`metrics`] facade).
//!
//! Nothing is recorded on the pass-through path: counters only move when the relay acts or
//! fails.

use context_relay_store::StoreError;

/// Summary generations by `outcome`: `generated`, `extractive` (the model gave none; a handoff
/// was built from the conversation), `rejected`, `unparseable`, `unavailable`; and by `kind`:
/// `account` (the account neared its limit) or `model` (the first response on a new model).
pub const GENERATIONS: &str = "context_relay_generations_total";
/// Duration of summary generations, in seconds, by `outcome` and `kind`.
pub const GENERATION_SECONDS: &str = "context_relay_generation_seconds";
/// Qualifying responses that did not start a generation, by `reason`
/// (`provider`: the serving provider is not among the handoff providers, `exhausted`,
/// `fresh`, `cooling_down`, `in_flight`, `in_flight_elsewhere`, `store_unavailable`,
/// `no_session`, `queue_full`, `empty`; and `superseded`: a summary done after its session moved
/// to another account, or while a switching request carried its handoff, dropped).
pub const GENERATIONS_SKIPPED: &str = "context_relay_generations_skipped_total";
/// Handoffs injected into a request whose response completed, by `kind`: `account` (an
/// account switch) or `model` (a model switch: the freshest handoff, or the bare note when the
/// session has none).
pub const INJECTED: &str = "context_relay_injected_total";
/// Switches that found no stored handoff and carried one built from the request being sent,
/// by `stored` (`true`; `false` when the store failed and it was injected unstored).
pub const SWITCH_EXTRACTIVE: &str = "context_relay_switch_extractive_total";
/// Handoffs deleted after a request carrying them succeeded.
pub const CONSUMED: &str = "context_relay_consumed_total";
/// Claimed handoffs given back after a failed or dropped request.
pub const RELEASED: &str = "context_relay_released_total";
/// Switches that happened (requests made portable on a switch whose response completed), by
/// `kind`: `account` or `model`.
pub const SWITCHES: &str = "context_relay_switches_total";
/// Account-bound items removed from bodies, by `kind`.
pub const SCRUBBED: &str = "context_relay_scrubbed_total";
/// Requests sent again once, without account-bound state, after the provider rejected that
/// state, by `kind` (`encrypted_content`, `encrypted_output`, `previous_response`,
/// `thinking_signature`).
pub const REPAIRS: &str = "context_relay_repairs_total";
/// Store operations that failed, by `op`.
pub const STORE_ERRORS: &str = "context_relay_store_errors_total";
/// Requests the relay wanted to rewrite but passed through unchanged, by `reason`
/// (`too_large`, `undecodable`, `not_json`, `not_applicable`).
pub const REWRITE_SKIPPED: &str = "context_relay_rewrite_skipped_total";

/// The `kind` label of a handoff kind: `model` for a model switch, `account` otherwise.
pub(crate) fn kind_label(kind: context_relay_core::HandoffKind) -> &'static str {
    match kind {
        context_relay_core::HandoffKind::ModelSwitch => "model",
        _ => "account",
    }
}

/// Logs and counts a failed store operation (the request passes through).
///
/// A store known to be down ([`StoreError::Unavailable`]: a Redis circuit breaker open, a redb
/// file being reopened) logs its state itself, once per interval; each request that meets it
/// is only counted, and logged at debug level.
pub(crate) fn store_error(op: &'static str, err: &StoreError) {
    if matches!(err, StoreError::Unavailable { .. }) {
        tracing::debug!(op, error = %err, "context-relay store unavailable; passing through");
    } else {
        tracing::warn!(op, error = %err, "context-relay store error; passing through");
    }
    metrics::counter!(STORE_ERRORS, "op" => op).increment(1);
}

/// Registers the help text of every relay metric with the installed `metrics` recorder (the
/// `# HELP` lines of a Prometheus page). Call it once, after installing the recorder.
pub fn describe() {
    use ::metrics::{describe_counter, describe_histogram};
    describe_counter!(
        GENERATIONS,
        "Summary generations, by outcome (generated, extractive, rejected, unparseable, unavailable) and kind (account, model)."
    );
    describe_histogram!(
        GENERATION_SECONDS,
        ::metrics::Unit::Seconds,
        "Duration of summary generations, by outcome and kind."
    );
    describe_counter!(
        GENERATIONS_SKIPPED,
        "Responses past the handoff threshold that started no summary, by reason."
    );
    describe_counter!(
        INJECTED,
        "Handoffs injected into a request whose response completed, by kind (account, model)."
    );
    describe_counter!(
        SWITCH_EXTRACTIVE,
        "Switches that found no stored handoff and carried one built from the request being sent, by stored (false: the store failed and it was injected unstored)."
    );
    describe_counter!(
        CONSUMED,
        "Handoffs deleted after the request carrying them completed."
    );
    describe_counter!(
        RELEASED,
        "Claimed handoffs given back after a failed or dropped request."
    );
    describe_counter!(
        SWITCHES,
        "Switches that happened: requests made portable on a switch whose response completed, by kind (account, model)."
    );
    describe_counter!(
        SCRUBBED,
        "Account-bound items removed from request bodies, by kind."
    );
    describe_counter!(
        REPAIRS,
        "Requests sent once more without account-bound state after the provider rejected it, by kind."
    );
    describe_counter!(STORE_ERRORS, "Handoff store operations that failed, by op.");
    describe_counter!(
        REWRITE_SKIPPED,
        "Requests the relay meant to rewrite but passed through unchanged, by reason."
    );
}

#[cfg(test)]
mod tests {
    /// Every metric name this module declares gets a help text in [`describe`](super::describe):
    /// a `/metrics` family without its `# HELP` line is what an operator's tooling flags.
    #[test]
    fn every_metric_has_a_help_text() {
        let source = include_str!("metrics.rs");
        let (declared, rest) = source
            .split_once("pub fn describe()")
            .expect("describe() is in this file");
        let body = rest.split("\n}\n").next().unwrap_or_default();
        let names: Vec<&str> = declared
            .lines()
            .filter_map(|l| l.strip_prefix("pub const "))
            .filter_map(|l| l.split_once(": &str = \"context_relay_"))
            .map(|(name, _)| name)
            .collect();
        assert!(names.len() >= 12, "{names:?}");
        for name in names {
            assert!(
                body.contains(&format!("{name},")),
                "{name} has no help text in describe()"
            );
        }
    }
}
