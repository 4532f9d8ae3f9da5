//! What a verdict does to the account: the pool's side (exhausted, disabled), with its log line
//! and metric, and whether the request moves on to the next account.

use std::sync::Arc;
use std::time::SystemTime;

use context_relay_core::QuotaSignal;
use http::StatusCode;

use super::verdict::Verdict;
use crate::console::Activity;
use crate::pool::{Account, ProviderPool, reset_or_default};

/// One attempt of a request on one account, as far as rotation is concerned.
pub(super) struct Attempt<'a> {
    pub(super) pool: &'a ProviderPool,
    pub(super) activity: &'a Activity,
    pub(super) idx: usize,
    pub(super) account: &'a str,
    pub(super) status: StatusCode,
    pub(super) internal: bool,
    pub(super) now: SystemTime,
}

impl Attempt<'_> {
    /// Applies `verdict` to the account (logged and counted) and says whether the request goes
    /// on to the next account. A provider failure moves a user request on once per request
    /// (`retry`); a quota or credential failure always does.
    pub(super) fn rotate(
        &self,
        verdict: Verdict,
        error: &str,
        retry: &mut UnavailableRetry,
    ) -> bool {
        let (pool, account, status, now) = (self.pool, self.account, self.status, self.now);
        match verdict {
            Verdict::Exhausted(signal) => {
                let reason = if status == StatusCode::TOO_MANY_REQUESTS {
                    "429"
                } else {
                    "quota_error"
                };
                let until = reset_or_default(signal.resets_at, now);
                exhaust(pool, (self.idx, account), reason, until, self.activity);
                tracing::info!(
                    provider = %pool.name(), account, internal = self.internal,
                    status = status.as_u16(), error,
                    "account out of quota; exhausted until its reset"
                );
                true
            }
            Verdict::Refused => {
                let until = pool.disable(self.idx, now);
                self.activity.rotated(
                    "disabled",
                    "credential_refused",
                    pool.name(),
                    account,
                    until,
                );
                let secs = until.duration_since(now).map_or(0, |d| d.as_secs());
                metrics::counter!(
                    "context_relay_gateway_account_refused_total",
                    "provider" => pool.name().to_string(),
                    "account" => account.to_owned(),
                    "status" => status.as_str().to_owned()
                )
                .increment(1);
                tracing::error!(
                    provider = %pool.name(), account, status = status.as_u16(), error,
                    disabled_for_secs = secs,
                    "the provider refused this account's credential; account disabled, check its key"
                );
                true
            }
            Verdict::Unavailable if matches!(retry, UnavailableRetry::Unused) && !self.internal => {
                *retry = UnavailableRetry::Due(Box::new(Failed {
                    provider: pool.name().to_string(),
                    account: account.to_owned(),
                    status,
                    error: error.to_owned(),
                }));
                true
            }
            Verdict::Unavailable | Verdict::Answer => false,
        }
    }
}

/// The one move to another account a user request gets after a provider failure (a 5xx, a
/// connection error). It is logged and counted when the next attempt starts, so that neither
/// says "trying the next account" when none is left.
#[derive(Default)]
pub(super) enum UnavailableRetry {
    /// Not taken yet.
    #[default]
    Unused,
    /// Taken: the request moves on from this failure.
    Due(Box<Failed>),
    /// Taken, or given up (a provider that already had the whole head timeout).
    Used,
}

/// The failure a request moved on from.
pub(super) struct Failed {
    provider: String,
    account: String,
    status: StatusCode,
    error: String,
}

impl UnavailableRetry {
    /// No move after a later failure (the provider already made the client wait its whole
    /// head timeout).
    pub(super) fn forgo(&mut self) {
        if matches!(self, Self::Unused) {
            *self = Self::Used;
        }
    }

    /// An attempt starts on `account` of `provider`: the move that led to it is logged and
    /// counted.
    pub(super) fn attempt(&mut self, provider: &str, account: &str) {
        if !matches!(self, Self::Due(_)) {
            return;
        }
        if let Self::Due(failed) = std::mem::replace(self, Self::Used) {
            metrics::counter!(
                "context_relay_gateway_unavailable_retries_total",
                "provider" => failed.provider.clone(),
                "account" => failed.account.clone()
            )
            .increment(1);
            tracing::warn!(
                provider = %failed.provider, account = %failed.account,
                status = failed.status.as_u16(), error = %failed.error,
                next_provider = provider, next_account = account,
                "upstream failed before any byte reached the client; trying the next account once"
            );
        }
    }

    /// No attempt followed: the client gets this failure, or an earlier account's quota
    /// answer.
    pub(super) fn unanswered(self) {
        if let Self::Due(failed) = self {
            tracing::warn!(
                provider = %failed.provider, account = %failed.account,
                status = failed.status.as_u16(), error = %failed.error,
                "upstream failed before any byte reached the client; no other account to try"
            );
        }
    }
}

/// The account an answer came from, for what its stream may say after its `200`: an account
/// out of quota in the middle of a stream (see `context_relay_core::quota::limit_in_band`)
/// waits for its reset as after a 429, so that the client's retry goes to another account.
/// The answer itself went to the client as it came: its head was sent before the failure.
#[derive(Clone)]
pub(crate) struct InBandQuota {
    pool: Arc<ProviderPool>,
    idx: usize,
    activity: Activity,
}

impl std::fmt::Debug for InBandQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InBandQuota")
            .field("provider", self.pool.name())
            .field("idx", &self.idx)
            .finish()
    }
}

impl InBandQuota {
    pub(super) fn new(pool: Arc<ProviderPool>, idx: usize, activity: Activity) -> Self {
        Self {
            pool,
            idx,
            activity,
        }
    }

    /// The answer's last event that may be a failure (`data`): when it says the account is
    /// out of quota, the account is exhausted until its reset (logged, counted as
    /// `reason="in_band"`, told to the console).
    pub(crate) fn failed(&self, data: &[u8]) {
        let now = SystemTime::now();
        let Some(reset) = in_band_reset(data, now) else {
            return;
        };
        let (pool, until) = (&self.pool, reset_or_default(reset, now));
        let Some(account) = pool.accounts().get(self.idx) else {
            return;
        };
        exhaust(
            pool,
            (self.idx, &account.id),
            "in_band",
            until,
            &self.activity,
        );
        tracing::info!(
            provider = %pool.name(), account = %account.id,
            "account ran out of quota in the middle of a stream; exhausted until its reset"
        );
    }
}

/// The reset a failure event `data` announces when it says the account is out of quota (the
/// reset itself may be unknown); `None` for any other event, and for the quota error of a
/// request too large for any account's per-minute budget (as in a 429's body, it blames the
/// request, on every account alike).
fn in_band_reset(data: &[u8], now: SystemTime) -> Option<Option<SystemTime>> {
    let reset = context_relay_core::quota::limit_in_band(data, now)?;
    (!super::verdict::request_at_fault(StatusCode::TOO_MANY_REQUESTS, data)).then_some(reset)
}

/// Records a usage reading of a successful response; at or above `rotate_at` the account
/// stops taking new turns, unless the reading came from an internal request (a summary call
/// must not move the session it summarises).
pub(super) fn record_usage(
    pool: &ProviderPool,
    idx: usize,
    account: &Account,
    signal: &QuotaSignal,
    (now, internal): (SystemTime, bool),
    activity: &Activity,
) {
    account.metrics.set_used(signal.percent_used);
    let account = &*account.id;
    if internal {
        pool.note_usage(idx, signal.percent_used);
    } else if pool.observe(idx, signal, now) {
        tracing::info!(
            provider = %pool.name(), account, used = signal.percent_used,
            "account reached rotate_at; new turns go to the next account"
        );
        exhausted_metric(pool, account, "quota");
        let until = reset_or_default(signal.resets_at, now);
        activity.rotated("exhausted", "quota", pool.name(), account, until);
    }
}

/// Takes the account out until `until`: marked in the pool, counted with `reason`, told to the
/// console.
fn exhaust(
    pool: &ProviderPool,
    (idx, account): (usize, &str),
    reason: &'static str,
    until: SystemTime,
    activity: &Activity,
) {
    pool.mark_exhausted(idx, until);
    exhausted_metric(pool, account, reason);
    activity.rotated("exhausted", reason, pool.name(), account, until);
}

fn exhausted_metric(pool: &ProviderPool, account: &str, reason: &'static str) {
    metrics::counter!(
        "context_relay_gateway_account_exhausted_total",
        "provider" => pool.name().to_string(),
        "account" => account.to_owned(),
        "reason" => reason
    )
    .increment(1);
}

#[cfg(test)]
mod tests {
    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;

    #[test]
    fn a_request_too_large_for_any_account_exhausts_none() {
        let now = SystemTime::UNIX_EPOCH;
        let limit = br#"{"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded","message":"Rate limit reached for gpt-5 on tokens per min (TPM). Please try again in 2s."}}}"#;
        assert!(in_band_reset(limit, now).is_some());
        let too_large = br#"{"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded","message":"Request too large for gpt-5 in organization org-x on tokens per min (TPM): Limit 30000, Requested 41207."}}}"#;
        assert_eq!(in_band_reset(too_large, now), None);
    }

    fn failed() -> UnavailableRetry {
        UnavailableRetry::Due(Box::new(Failed {
            provider: "codex".to_owned(),
            account: "acct-a".to_owned(),
            status: StatusCode::BAD_GATEWAY,
            error: String::new(),
        }))
    }

    /// The move after a provider failure is counted when the next attempt starts, once, and
    /// not at all when no attempt follows.
    #[test]
    fn a_move_is_counted_when_the_next_attempt_starts_only() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let counted = || {
            handle
                .render()
                .lines()
                .find(|l| l.starts_with("context_relay_gateway_unavailable_retries_total{"))
                .map(|l| l.rsplit(' ').next().unwrap_or_default().to_owned())
        };
        metrics::with_local_recorder(&recorder, || {
            // No account was left: nothing counted.
            failed().unanswered();
            assert_eq!(counted(), None);

            let mut retry = failed();
            retry.attempt("codex", "acct-b");
            assert!(matches!(retry, UnavailableRetry::Used));
            // A later attempt is no second move.
            retry.attempt("codex", "acct-c");
            retry.unanswered();
            assert_eq!(counted().as_deref(), Some("1"));

            // An attempt without a move before it counts nothing, and leaves the move unused.
            let mut unused = UnavailableRetry::default();
            unused.attempt("codex", "acct-b");
            assert!(matches!(unused, UnavailableRetry::Unused));
            unused.forgo();
            assert!(matches!(unused, UnavailableRetry::Used));
        });
        assert_eq!(counted().as_deref(), Some("1"));
    }
}
