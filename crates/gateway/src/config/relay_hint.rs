//! Warnings about the relay's settings: valid, but almost certainly not what was meant, one
//! line each (see [`Config::warnings`]).

use context_relay_core::RelayOverrides;

use super::{Config, Strategy};

/// What the relay settings (`[relay]` and each combo's `[combos.relay]`) leave broken: a
/// provider that rotates before a handoff is written, a `handoff_providers` name no provider
/// has (nothing is ever summarised for what was meant), and a `max_body_bytes` below
/// `max_request_bytes` (larger requests pass through unread: no handoff, no scrub, no repair).
pub(super) fn relay_warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for (combo, relay, _) in config.relay_configs() {
        let Some(c) = config.combos.iter().find(|c| c.name == combo) else {
            continue;
        };
        if c.strategy != Strategy::ContextRelay {
            continue;
        }
        for t in &c.targets {
            if let Some(p) = config.provider(&t.provider)
                && relay.generates_for(&p.name)
                && p.rotate_at <= relay.handoff_threshold
            {
                out.push(format!(
                    "combos[{combo:?}]: provider {:?} rotates at {} but handoffs are written at {}: no handoff can ever be written for it (set rotate_at above handoff_threshold)",
                    p.name, p.rotate_at, relay.handoff_threshold
                ));
            }
        }
    }
    // Only where the relay runs: combos that relay account switches or model switches (a
    // `priority` combo does the latter unless `model_switch = false`), and `[relay]` when one
    // of them takes a setting from it.
    let runs: Vec<String> = config
        .relay_configs()
        .into_iter()
        .filter(|(_, relay, _)| relay.account_handoff || relay.model_switch)
        .map(|(name, _, _)| name)
        .collect();
    let relayed: Vec<_> = config
        .combos
        .iter()
        .filter(|c| runs.contains(&c.name))
        .collect();
    let own = relayed
        .iter()
        .map(|c| (format!("combos[{:?}].relay", c.name), &c.relay));
    let global = (!relayed.is_empty()).then(|| ("relay".to_owned(), &config.relay));
    for (field, relay) in global.into_iter().chain(own) {
        out.extend(overrides_warnings(config, &field, relay));
    }
    let default_body = relayed.iter().any(|c| c.relay.max_body_bytes.is_none())
        && config.relay.max_body_bytes.is_none();
    if default_body && context_relay_core::config::DEFAULT_MAX_BODY_BYTES < config.max_request_bytes
    {
        out.push(format!(
            "max_request_bytes ({}) is above the relay's max_body_bytes ({}, the default): a request body larger than that passes through unread (no handoff injected, no state scrubbed, no repair); set [relay] max_body_bytes to max_request_bytes",
            config.max_request_bytes,
            context_relay_core::config::DEFAULT_MAX_BODY_BYTES
        ));
    }
    out
}

/// The warnings of one settings table, `field`.
fn overrides_warnings(config: &Config, field: &str, relay: &RelayOverrides) -> Vec<String> {
    let mut out = Vec::new();
    for name in relay.handoff_providers.iter().flatten() {
        let name = name.trim();
        if name != "*"
            && !config
                .providers
                .iter()
                .any(|p| p.name.eq_ignore_ascii_case(name))
        {
            out.push(format!(
                "{field}.handoff_providers names {name:?}, which no [[providers]] is called (names are the providers' `name`, or \"*\"): no handoff is written for it"
            ));
        }
    }
    if let Some(limit) = relay.max_body_bytes
        && limit < config.max_request_bytes
    {
        out.push(format!(
            "{field}.max_body_bytes ({limit}) is below max_request_bytes ({}): a request body larger than it passes through unread (no handoff injected, no state scrubbed, no repair; counted as rewrite_skipped{{reason=\"too_large\"}})",
            config.max_request_bytes
        ));
    }
    out
}
