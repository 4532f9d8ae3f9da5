//! The client's request head, as the resolver lends it to each attempt.
//!
//! Every attempt gets the head as the client sent it: the service below consumes what it is
//! given, and a later account must not see what an earlier attempt changed. The method, URI
//! and headers are copied for each attempt. The extensions are copied too (`http` boxes each
//! value again in a copy) unless every one of them is of a type the gateway's own layers set
//! as they set it ([`Known`]: the request's `Facts`, not a fact on its own): the first attempt
//! then takes the map itself, and a later one gets a map made again from the values kept here
//! by type. A request with a value of any other type (an embedding application's, or the facts
//! the relay's summary call carries each on its own) has its map copied for every attempt:
//! nothing it carries is lost on a retry.

use context_relay_tower::{Facts, SkipRelay, SummaryCall};
use http::request::Parts;
use http::{Extensions, Request, Uri};

use crate::auth::ClientAccess;
use crate::console::activity::Subject;
use crate::routing::Routing;

/// The client's head (see the module docs).
pub(super) struct Head {
    parts: Parts,
    /// The extensions by type, once the first attempt took the map.
    lent: Option<Known>,
}

impl Head {
    /// The head of the client's request, its extensions as the resolver leaves them (the
    /// route targets taken).
    pub(super) fn new(parts: Parts) -> Self {
        Self { parts, lent: None }
    }

    /// The client's URI.
    pub(super) fn uri(&self) -> &Uri {
        &self.parts.uri
    }

    /// Whom the request is about, for the console's activity feed.
    pub(super) fn subject(&self) -> Subject<'_> {
        match &self.lent {
            Some(known) => {
                let facts = known.facts.as_ref();
                Subject {
                    tenant: facts.and_then(|f| f.tenant.as_ref()),
                    session: facts.and_then(|f| f.session.as_ref()),
                    combo: facts.and_then(|f| f.combo.as_ref()),
                }
            }
            None => Subject::of(&self.parts.extensions),
        }
    }

    /// A request with the client's head and `body`.
    pub(super) fn request<B>(&mut self, body: B) -> Request<B> {
        let mut req = Request::new(body);
        *req.method_mut() = self.parts.method.clone();
        *req.uri_mut() = self.parts.uri.clone();
        *req.version_mut() = self.parts.version;
        *req.headers_mut() = self.parts.headers.clone();
        *req.extensions_mut() = self.extensions();
        req
    }

    fn extensions(&mut self) -> Extensions {
        if let Some(known) = &self.lent {
            return known.extensions();
        }
        match Known::of(&self.parts.extensions) {
            Some(known) => {
                self.lent = Some(known);
                std::mem::take(&mut self.parts.extensions)
            }
            None => self.parts.extensions.clone(),
        }
    }
}

/// Declares [`Known`]: one field per type, read from and written to a map.
macro_rules! known {
    ($($field:ident: $ty:ty),* $(,)?) => {
        /// The request extensions the gateway's layers set before the resolver, by type.
        #[derive(Debug, Default, Clone, PartialEq)]
        struct Known {
            $($field: Option<$ty>,)*
        }

        impl Known {
            /// `ext`'s values, when each of them is of one of these types (or is the
            /// request's [`Routing`], emptied: an attempt writes its endpoint there, or into a
            /// new one): the map can then be made again from them.
            fn of(ext: &Extensions) -> Option<Self> {
                let known = Self { $($field: ext.get::<$ty>().cloned(),)* };
                let count = [$(known.$field.is_some(),)*].into_iter().filter(|&s| s).count()
                    + usize::from(ext.get::<Routing>().is_some_and(Routing::is_empty));
                (count == ext.len()).then_some(known)
            }

            /// A map of these values.
            fn extensions(&self) -> Extensions {
                let mut ext = Extensions::new();
                $(if let Some(value) = &self.$field {
                    ext.insert(value.clone());
                })*
                ext
            }
        }
    };
}

known! {
    facts: Facts,
    access: ClientAccess,
    skip: SkipRelay,
    summary: SummaryCall,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use context_relay_tower::{ComboName, FactsExt, SessionId, Tenant};
    use proptest::prelude::*;

    use super::*;
    use crate::combo::{RouteTargets, Target};

    /// An embedding application's own extension.
    #[derive(Debug, Clone, PartialEq)]
    struct Own(u32);

    fn known(mask: u8) -> Known {
        let mut facts = Facts::default();
        facts.tenant = (mask & 1 != 0).then(|| Tenant::new("t"));
        facts.session = (mask & 2 != 0).then(|| SessionId::new("s"));
        facts.combo = (mask & 4 != 0).then(|| ComboName::new("c"));
        Known {
            facts: (mask & 7 != 0).then_some(facts),
            access: (mask & 8 != 0).then(|| ClientAccess {
                name: Arc::from("t"),
                combos: Some(Arc::from(vec!["c".to_owned()])),
            }),
            skip: (mask & 16 != 0).then_some(SkipRelay),
            summary: (mask & 32 != 0).then_some(SummaryCall),
        }
    }

    fn head(values: &Known, own: Option<u32>) -> Head {
        let mut ext = values.extensions();
        if let Some(n) = own {
            ext.insert(Own(n));
        }
        let mut req = Request::post("/v1/responses")
            .header("session-id", "s")
            .body(())
            .unwrap();
        *req.extensions_mut() = ext;
        Head::new(req.into_parts().0)
    }

    proptest! {
        /// Every attempt gets every value the client's request carried, whether the map
        /// was taken or copied, and the same head.
        #[test]
        fn every_attempt_gets_the_whole_head(mask in 0u8..64, own in proptest::option::of(any::<u32>())) {
            let values = known(mask);
            let mut head = head(&values, own);
            for attempt in 0..3 {
                let req = head.request(attempt);
                prop_assert_eq!(req.uri().path(), "/v1/responses");
                prop_assert_eq!(req.method(), http::Method::POST);
                prop_assert_eq!(req.headers()["session-id"].as_bytes(), b"s");
                let ext = req.extensions();
                prop_assert_eq!(Known::of(ext).is_some(), own.is_none());
                prop_assert_eq!(ext.get::<Own>().map(|o| o.0), own);
                prop_assert_eq!(ext.len(), values.extensions().len() + usize::from(own.is_some()));
                let facts = values.facts.as_ref();
                prop_assert_eq!(ext.fact::<Tenant>(), facts.and_then(|f| f.tenant.as_ref()));
                prop_assert_eq!(ext.fact::<SessionId>(), facts.and_then(|f| f.session.as_ref()));
                prop_assert_eq!(ext.fact::<ComboName>(), facts.and_then(|f| f.combo.as_ref()));
                prop_assert_eq!(ext.get::<ClientAccess>(), values.access.as_ref());
                prop_assert_eq!(ext.get::<SkipRelay>(), values.skip.as_ref());
                prop_assert_eq!(ext.get::<SummaryCall>(), values.summary.as_ref());
                let subject = head.subject();
                prop_assert_eq!(subject.tenant, facts.and_then(|f| f.tenant.as_ref()));
                prop_assert_eq!(subject.session, facts.and_then(|f| f.session.as_ref()));
                prop_assert_eq!(subject.combo, facts.and_then(|f| f.combo.as_ref()));
            }
        }
    }

    #[test]
    fn the_first_attempt_takes_a_map_of_known_values_and_copies_any_other() {
        let values = known(0b111);
        let mut own = head(&values, Some(7));
        own.request(());
        assert_eq!(own.lent, None, "a map with an unknown value is copied");
        assert_eq!(own.parts.extensions.get::<Own>(), Some(&Own(7)));
        let mut ours = head(&values, None);
        ours.request(());
        assert_eq!(ours.lent.as_ref(), Some(&values));
        assert!(
            ours.parts.extensions.is_empty(),
            "the first attempt took the map"
        );
    }

    #[test]
    fn an_emptied_routing_is_lent_with_the_map_and_one_with_targets_is_not() {
        let values = known(0b111);
        let mut emptied = head(&values, None);
        emptied.parts.extensions.insert(Routing::default());
        let first = emptied.request(());
        assert_eq!(emptied.lent.as_ref(), Some(&values));
        assert!(first.extensions().get::<Routing>().is_some());
        assert!(
            emptied.request(()).extensions().get::<Routing>().is_none(),
            "a later attempt's endpoint makes its own"
        );
        let mut routed = head(&values, None);
        let targets = RouteTargets::new(Arc::from([Target::new(
            Arc::from("codex"),
            Arc::from("gpt-5"),
        )]));
        Routing::set_targets(&mut routed.parts.extensions, targets.clone());
        let first = routed.request(());
        assert_eq!(
            routed.lent, None,
            "targets are not made again: the map is copied"
        );
        assert_eq!(Routing::targets(first.extensions()), Some(&targets));
        assert_eq!(
            Routing::targets(routed.request(()).extensions()),
            Some(&targets)
        );
    }
}
