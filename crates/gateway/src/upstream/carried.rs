//! What of a request's extension map its answer keeps.
//!
//! The upstream call hands the request's map on to the answer, emptied, so that the values the
//! layers above put on the answer fit in a table already allocated. Three of the request's
//! facts are ones those layers would put there again: the account the attempt went to (the
//! relay and the resolver label every answer with it) and the request's tenant and combo (the
//! access line's). When every value in the map is of a type listed here, those three stay
//! where they are (in the request's [`Facts`], which the answer's quota reading then fills
//! without a box of its own) and the others are removed; a map holding any other value (an
//! embedding application's, or one of a type this list does not name) is emptied whole, so an
//! answer never carries a request value that was not looked at here.

use context_relay_tower::{ComboName, Facts, ResolvedAccount, ServingModel, SessionId, SkipRelay};
use context_relay_tower::{SummaryCall, Tenant};
use http::Extensions;

use crate::auth::ClientAccess;
use crate::routing::Routing;

/// Empties `ext`, the map of a request whose answer came, for that answer: the attempt's
/// [`ResolvedAccount`], [`Tenant`] and [`ComboName`] kept when nothing but known values is in
/// it (see the [module docs](self)).
pub(super) fn for_the_answer(ext: &mut Extensions) {
    // Request values that say nothing of the answer.
    ext.remove::<SessionId>();
    ext.remove::<ServingModel>();
    ext.remove::<Routing>();
    // Of the request's facts, the three named: a fact `Facts` may gain later is not carried
    // unlooked-at, and facts holding none of the three say nothing of the answer.
    let mut empty = false;
    if let Some(facts) = ext.get_mut::<Facts>() {
        let mut kept = Facts::default();
        kept.account = facts.account.take();
        kept.tenant = facts.tenant.take();
        kept.combo = facts.combo.take();
        empty = kept == Facts::default();
        *facts = kept;
    }
    if empty {
        ext.remove::<Facts>();
    }
    ext.remove::<ClientAccess>();
    ext.remove::<SkipRelay>();
    ext.remove::<SummaryCall>();
    let kept = usize::from(ext.get::<Facts>().is_some())
        + usize::from(ext.get::<ResolvedAccount>().is_some())
        + usize::from(ext.get::<Tenant>().is_some())
        + usize::from(ext.get::<ComboName>().is_some());
    if kept != ext.len() {
        ext.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use context_relay_tower::{Fact, FactsExt};
    use proptest::prelude::*;

    use super::*;

    /// An embedding application's own extension.
    #[derive(Debug, Clone, PartialEq)]
    struct Own(u32);

    /// A map of the values `mask` names: bits 0–4 the account, tenant, combo, session and
    /// model, each in the request's [`Facts`] when bit 8 is set, else on its own; bits 5–7 the
    /// markers and the client's access.
    fn map(mask: u16, own: Option<u32>) -> Extensions {
        let mut ext = Extensions::new();
        let on = |bit: u16| mask & (1 << bit) != 0;
        let facts = on(8);
        fn value<T: Fact>(ext: &mut Extensions, facts: bool, value: T) {
            if facts {
                ext.set_fact(value);
            } else {
                ext.insert(value);
            }
        }
        if on(0) {
            value(&mut ext, facts, ResolvedAccount::new("codex", "acct-a"));
        }
        if on(1) {
            value(&mut ext, facts, Tenant::new("t"));
        }
        if on(2) {
            value(&mut ext, facts, ComboName::new("c"));
        }
        if on(3) {
            value(&mut ext, facts, SessionId::new("s"));
        }
        if on(4) {
            value(&mut ext, facts, ServingModel(Arc::from("gpt-5")));
        }
        if on(5) {
            ext.insert(ClientAccess {
                name: Arc::from("t"),
                combos: None,
            });
        }
        if on(6) {
            ext.insert(SkipRelay);
        }
        if on(7) {
            ext.insert(SummaryCall);
        }
        if let Some(n) = own {
            ext.insert(Own(n));
        }
        // The upstream call took the endpoint; the emptied value is still there.
        ext.insert(Routing::default());
        ext
    }

    proptest! {
        /// Of a map of known values the answer keeps exactly the account, tenant and combo
        /// it held, on their own or in its facts; of a map with any other value, nothing.
        #[test]
        fn the_answer_keeps_the_account_tenant_and_combo_of_a_known_map_only(
            mask in 0u16..512,
            own in proptest::option::of(any::<u32>()),
        ) {
            let before = map(mask, own);
            let mut ext = map(mask, own);
            for_the_answer(&mut ext);
            if own.is_some() {
                prop_assert!(ext.is_empty());
                return Ok(());
            }
            prop_assert_eq!(ext.fact::<ResolvedAccount>(), before.fact::<ResolvedAccount>());
            prop_assert_eq!(ext.fact::<Tenant>(), before.fact::<Tenant>());
            prop_assert_eq!(ext.fact::<ComboName>(), before.fact::<ComboName>());
            prop_assert_eq!(ext.fact::<SessionId>(), None);
            prop_assert_eq!(ext.fact::<ServingModel>(), None);
            let kept = if mask & (1 << 8) != 0 {
                usize::from(mask & 0b111 != 0)
            } else {
                (mask & 0b111).count_ones() as usize
            };
            prop_assert_eq!(ext.len(), kept, "nothing else is kept");
        }
    }
}
