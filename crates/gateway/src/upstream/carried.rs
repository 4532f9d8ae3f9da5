//! What of a request's extension map its answer keeps.
//!
//! The upstream call hands the request's map on to the answer, emptied, so that the values the
//! layers above put on the answer fit in a table already allocated. Three of the request's
//! values are ones those layers would put there again, each boxed anew: the account the
//! attempt went to (the relay and the resolver label every answer with it) and the request's
//! tenant and combo (the access line's). When every value in the map is of a type listed
//! here, those three stay where they are and the others are removed; a map holding any other
//! value (an embedding application's, or one of a type this list does not name) is emptied
//! whole, so an answer never carries a request value that was not looked at here.

use context_relay_tower::{ComboName, ResolvedAccount, ServingModel, SessionId, SkipRelay};
use context_relay_tower::{SummaryCall, Tenant};
use http::Extensions;

use crate::auth::ClientAccess;

/// Empties `ext`, the map of a request whose answer came, for that answer: the attempt's
/// [`ResolvedAccount`], [`Tenant`] and [`ComboName`] kept when nothing but known values is in
/// it (see the [module docs](self)).
pub(super) fn for_the_answer(ext: &mut Extensions) {
    // Request values that say nothing of the answer.
    ext.remove::<SessionId>();
    ext.remove::<ServingModel>();
    ext.remove::<ClientAccess>();
    ext.remove::<SkipRelay>();
    ext.remove::<SummaryCall>();
    let kept = usize::from(ext.get::<ResolvedAccount>().is_some())
        + usize::from(ext.get::<Tenant>().is_some())
        + usize::from(ext.get::<ComboName>().is_some());
    if kept != ext.len() {
        ext.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;

    /// An embedding application's own extension.
    #[derive(Debug, Clone, PartialEq)]
    struct Own(u32);

    fn map(mask: u16, own: Option<u32>) -> Extensions {
        let mut ext = Extensions::new();
        let on = |bit: u16| mask & (1 << bit) != 0;
        if on(0) {
            ext.insert(ResolvedAccount::new("codex", "acct-a"));
        }
        if on(1) {
            ext.insert(Tenant::new("t"));
        }
        if on(2) {
            ext.insert(ComboName::new("c"));
        }
        if on(3) {
            ext.insert(SessionId::new("s"));
        }
        if on(4) {
            ext.insert(ServingModel(Arc::from("gpt-5")));
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
        ext
    }

    proptest! {
        /// Of a map of known values the answer keeps exactly the account, tenant and combo
        /// it held; of a map with any other value, nothing.
        #[test]
        fn the_answer_keeps_the_account_tenant_and_combo_of_a_known_map_only(
            mask in 0u16..256,
            own in proptest::option::of(any::<u32>()),
        ) {
            let before = map(mask, own);
            let mut ext = map(mask, own);
            for_the_answer(&mut ext);
            if own.is_some() {
                prop_assert!(ext.is_empty());
                return Ok(());
            }
            prop_assert_eq!(ext.get::<ResolvedAccount>(), before.get::<ResolvedAccount>());
            prop_assert_eq!(ext.get::<Tenant>(), before.get::<Tenant>());
            prop_assert_eq!(ext.get::<ComboName>(), before.get::<ComboName>());
            let kept = (mask & 0b111).count_ones() as usize;
            prop_assert_eq!(ext.len(), kept, "nothing else is kept");
        }
    }
}
