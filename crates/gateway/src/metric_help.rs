//! The `# HELP` lines of `/metrics`: a description of every metric the gateway, its store and
//! the relay record, registered with the installed recorder.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

/// Registers the help text of every metric with the installed `metrics` recorder, so that the
/// Prometheus page carries a `# HELP` line for each. Call it once, after installing the
/// recorder (the binary does).
pub fn describe_metrics() {
    context_relay_tower::metrics::describe();
    describe_histogram!(
        "context_relay_gateway_request_seconds",
        Unit::Seconds,
        "Time to the response head, by route and status."
    );
    describe_histogram!(
        "context_relay_gateway_upstream_first_byte_seconds",
        Unit::Seconds,
        "Time to the provider's response head, by provider."
    );
    describe_gauge!(
        "context_relay_gateway_requests_in_flight",
        "Requests being answered: until the last byte of the response body (a stream counts while it streams)."
    );
    describe_gauge!(
        "context_relay_gateway_connections",
        "Client connections that have sent a request head (each holds a max_connections slot)."
    );
    describe_gauge!(
        "context_relay_gateway_connections_pending",
        "Client connections waiting for their first complete request head."
    );
    for (name, help) in COUNTERS {
        describe_counter!(name, help);
    }
    describe_gauge!(
        "context_relay_gateway_account_used_ratio",
        "The last usage of each account's quota its provider reported (1 = used up), by provider and account; NaN once a reload removed the account."
    );
}

/// Counters and their help text.
const COUNTERS: [(&str, &str); 27] = [
    (
        "context_relay_gateway_request_deadline_total",
        "Requests that reached request_timeout_secs, by phase (head: answered 504; body: the stream was cut).",
    ),
    (
        "context_relay_gateway_tenant_secret_adopted_total",
        "Times an open gateway adopted the store's tenant secret in place of its own (the store had lost it and another replica stored one).",
    ),
    (
        "context_relay_gateway_connections_rejected_total",
        "Client connections closed at the limits: no max_connections slot left, or the oldest of too many waiting for their first request head.",
    ),
    (
        "context_relay_gateway_connections_timed_out_total",
        "Client connections closed because no complete request head came within client_header_timeout_secs.",
    ),
    (
        "context_relay_gateway_budget_exhausted_total",
        "Requests answered 503 because max_buffered_bytes were buffered.",
    ),
    (
        "context_relay_gateway_unauthenticated_total",
        "Requests answered 401: no client key, or one no client has.",
    ),
    (
        "context_relay_gateway_admin_refused_total",
        "Admin requests answered 401, by reason: token (no admin token or console login), login (a console login with a wrong token).",
    ),
    (
        "context_relay_gateway_upstream_timeouts_total",
        "Provider calls that timed out, by provider and phase.",
    ),
    (
        "context_relay_gateway_panics_total",
        "Requests whose handler panicked (answered 500).",
    ),
    (
        "context_relay_gateway_upstream_responses_total",
        "Provider answers, by provider, account and status.",
    ),
    (
        "context_relay_gateway_retries_total",
        "Attempts of a request beyond its first, by provider.",
    ),
    (
        "context_relay_gateway_account_exhausted_total",
        "Accounts taken out of rotation until their reset, by provider, account and reason (429, quota_error, in_band, quota).",
    ),
    (
        "context_relay_gateway_account_refused_total",
        "Accounts disabled because the provider refused their credential, by provider, account and status.",
    ),
    (
        "context_relay_gateway_unavailable_retries_total",
        "Requests moved to the next account after a provider failure, by provider and account.",
    ),
    (
        "context_relay_gateway_upstream_errors_total",
        "Provider calls that failed without an answer (connection errors).",
    ),
    (
        "context_relay_gateway_translated_requests_total",
        "Requests translated to another API, by from and to.",
    ),
    (
        "context_relay_gateway_translate_errors_total",
        "Requests or answers that could not be translated.",
    ),
    (
        "context_relay_gateway_targets_skipped_total",
        "Route targets skipped for a request, by provider and reason (api_shape).",
    ),
    (
        "context_relay_gateway_tokens_total",
        "Tokens the providers reported in their answers' usage, by client, provider, account, model, kind (client: client traffic; summary: the relay's own summary calls) and type (input, cached_input, cache_write_input, output, reasoning_output).",
    ),
    (
        "context_relay_gateway_usage_responses_total",
        "Provider answers whose usage was counted, by client, provider, account, model and kind.",
    ),
    (
        "context_relay_gateway_login_refreshes_total",
        "Subscription login refreshes, by provider, account and outcome (ok, refused, failed).",
    ),
    (
        "context_relay_gateway_login_save_failures_total",
        "Refreshed login pairs that could not be saved, by provider, account and target (file, store).",
    ),
    (
        "context_relay_gateway_config_reloads_total",
        "Configuration reloads (SIGHUP), by outcome (applied, refused).",
    ),
    (
        "context_relay_store_replica_wait_short_total",
        "Handoff writes fewer replicas than [store] wait_replicas acknowledged within wait_timeout_ms (kept on the master).",
    ),
    (
        "context_relay_gateway_answers_cut_total",
        "Answers that broke off after their head was sent (a provider's stream cut, the request deadline): the client's connection or stream was cut; the access line says the status that was sent.",
    ),
    (
        "context_relay_store_breaker_opened_total",
        "Times a store's circuit breaker opened, by backend (redis: Redis stopped answering in time; relay: a store left a call a request waited for unanswered for 3 s).",
    ),
    (
        context_relay_store::CORRUPT_RECORDS_METRIC,
        "Stored records that could not be read and were skipped, by backend.",
    ),
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The metric names recorded with a literal name (`counter!("context_relay_…"`, and the
    /// same for gauges and histograms) in the Rust files under `dir`.
    fn recorded(dir: &Path, into: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                recorded(&path, into);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source file");
            for mac in ["counter!(", "gauge!(", "histogram!("] {
                for (at, _) in text.match_indices(mac) {
                    let rest = text[at + mac.len()..].trim_start();
                    if let Some(name) = rest
                        .strip_prefix('"')
                        .and_then(|r| r.split_once('"'))
                        .map(|(name, _)| name)
                        .filter(|n| n.starts_with("context_relay_"))
                        .filter(|n| n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
                    {
                        into.push(name.to_owned());
                    }
                }
            }
        }
    }

    /// Every metric the gateway and its store record by a literal name has its help text:
    /// a `/metrics` family without its `# HELP` line is what an operator's tooling flags
    /// (the relay's own names are checked in its `metrics` module).
    #[test]
    fn every_recorded_metric_has_a_help_text() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut names = Vec::new();
        recorded(&root.join("src"), &mut names);
        recorded(&root.join("../store/src"), &mut names);
        names.sort();
        names.dedup();
        assert!(names.len() >= 20, "{names:?}");
        let described: Vec<&str> = super::COUNTERS.iter().map(|(n, _)| *n).collect();
        let source = include_str!("metric_help.rs");
        for name in names {
            assert!(
                described.contains(&name.as_str()) || source.contains(&format!("\"{name}\",")),
                "{name} has no help text in describe_metrics()"
            );
        }
    }
}
