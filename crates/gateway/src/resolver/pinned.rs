//! The relay's summary call goes to the account that served the turn it summarises, and to
//! no other: its request may carry state only that account can read (reasoning items,
//! compaction items, signed thinking), and the handoff is that account's summary of its own
//! work. Its quota in the pool (rotated away at `rotate_at`, exhausted) does not move it: one
//! attempt, there, or none when the account is gone (a reload removed it or gave it another
//! key) or its credential is refused (a 401 disabled it for a back-off).

use std::sync::Arc;
use std::time::SystemTime;

use context_relay_tower::{FactsExt, ResolvedAccount, ServingModel};
use http::Extensions;

use crate::combo::{RouteTargets, Target};
use crate::pool::ProviderPool;

/// Where a summary call must go.
#[derive(Debug)]
pub(super) struct Pinned {
    account: ResolvedAccount,
    serving: Option<ServingModel>,
}

impl Pinned {
    /// The pin of an internal request (`None` for a client's request, or a summary call that
    /// names no account: it is routed like its session's user requests).
    pub(super) fn of(extensions: &Extensions, internal: bool) -> Option<Self> {
        if !internal {
            return None;
        }
        Some(Self {
            account: extensions.fact::<ResolvedAccount>()?.clone(),
            serving: extensions.fact::<ServingModel>().cloned(),
        })
    }

    /// The one target of the call: the one that served the turn, else the first of `combo`'s
    /// targets on the account's provider (`None` when there is none).
    pub(super) fn targets(&self, combo: Option<RouteTargets>) -> Option<RouteTargets> {
        let provider = self.account.provider();
        if let Some(model) = self.serving.as_ref().and_then(|s| s.model_of(provider)) {
            let target = Target::new(provider.clone(), Arc::from(model));
            return Some(RouteTargets::new(Arc::from([target])));
        }
        let combo = combo?;
        let target = combo
            .targets
            .iter()
            .find(|t| t.provider == *provider)?
            .clone();
        Some(RouteTargets::new(Arc::from([target])))
    }

    /// The account's index in `pool`, unless it was tried already or may not be sent to
    /// ([`ProviderPool::may_send`]).
    pub(super) fn pick(
        &self,
        pool: &ProviderPool,
        tried: &[usize],
        now: SystemTime,
    ) -> Option<usize> {
        pool.accounts()
            .iter()
            .position(|a| a.resolved == self.account)
            .filter(|&i| !tried.contains(&i) && pool.may_send(i, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pinned(serving: Option<&str>) -> Pinned {
        let mut ext = Extensions::new();
        ext.set_fact(ResolvedAccount::new("ant", "c"));
        if let Some(s) = serving {
            ext.set_fact(ServingModel::new(s));
        }
        Pinned::of(&ext, true).expect("pinned")
    }

    fn combo() -> RouteTargets {
        let t = |p: &str, m: &str| Target::new(Arc::from(p), Arc::from(m));
        RouteTargets::new(Arc::from([
            t("oai", "gpt-5.5"),
            t("ant", "claude-sonnet-4-5"),
            t("ant", "claude-haiku-4-5"),
        ]))
    }

    fn only(targets: Option<RouteTargets>) -> String {
        let targets = targets.expect("a target");
        assert_eq!(targets.targets.len(), 1);
        targets.targets[0].serving.0.to_string()
    }

    #[test]
    fn a_summary_call_goes_to_the_target_that_served_its_turn() {
        assert_eq!(
            only(pinned(Some("ant/claude-haiku-4-5")).targets(Some(combo()))),
            "ant/claude-haiku-4-5"
        );
        // Served by a target the combo does not name (a direct route): that one.
        assert_eq!(
            only(pinned(Some("ant/claude-opus")).targets(None)),
            "ant/claude-opus"
        );
        // The serving model unknown, or of another provider: the combo's first target on the
        // account's provider.
        assert_eq!(
            only(pinned(None).targets(Some(combo()))),
            "ant/claude-sonnet-4-5"
        );
        assert_eq!(
            only(pinned(Some("oai/gpt-5.5")).targets(Some(combo()))),
            "ant/claude-sonnet-4-5"
        );
        assert!(pinned(None).targets(None).is_none());
    }

    #[test]
    fn only_a_summary_call_that_names_its_account_is_pinned() {
        let mut ext = Extensions::new();
        assert!(Pinned::of(&ext, true).is_none());
        ext.set_fact(ResolvedAccount::new("ant", "c"));
        assert!(Pinned::of(&ext, false).is_none(), "a client's request");
        assert!(Pinned::of(&ext, true).is_some());
    }
}
