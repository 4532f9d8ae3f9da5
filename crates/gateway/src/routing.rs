//! Where a request goes, as the gateway's services tell each other: ComboService's
//! [`RouteTargets`] for the account resolver, and an attempt's [`UpstreamEndpoint`] for the
//! upstream call.
//!
//! Both travel in one request extension, [`Routing`]. The resolver takes the targets out of
//! it, and each attempt writes its endpoint into the same value, which the upstream call takes
//! out in turn: `http` boxes each extension value, so two values of their own were two
//! allocations per request, and one value written over is one. The value stays in the map
//! once emptied (the resolver lends the first attempt a map holding an empty one, see
//! `resolver::head`).

use http::Extensions;

use crate::combo::RouteTargets;
use crate::upstream::UpstreamEndpoint;

/// The request extension holding a request's route (see the [module docs](self)).
#[derive(Debug, Clone, Default)]
pub(crate) struct Routing {
    targets: Option<RouteTargets>,
    endpoint: Option<UpstreamEndpoint>,
}

impl Routing {
    /// Whether it holds neither targets nor an endpoint.
    pub(crate) fn is_empty(&self) -> bool {
        self.targets.is_none() && self.endpoint.is_none()
    }

    /// Sets the targets of the request `ext` belongs to.
    pub(crate) fn set_targets(ext: &mut Extensions, targets: RouteTargets) {
        Self::update(ext, |routing| routing.targets = Some(targets));
    }

    /// The targets of the request `ext` belongs to.
    #[cfg(test)]
    pub(crate) fn targets(ext: &Extensions) -> Option<&RouteTargets> {
        ext.get::<Self>()?.targets.as_ref()
    }

    /// The targets of the request `ext` belongs to, to change.
    #[cfg(test)]
    pub(crate) fn targets_mut(ext: &mut Extensions) -> Option<&mut RouteTargets> {
        ext.get_mut::<Self>()?.targets.as_mut()
    }

    /// Takes the targets out, leaving the value in `ext`.
    pub(crate) fn take_targets(ext: &mut Extensions) -> Option<RouteTargets> {
        ext.get_mut::<Self>()?.targets.take()
    }

    /// Sets where an attempt goes (in the value the targets were taken from, when the map
    /// holds one).
    pub(crate) fn set_endpoint(ext: &mut Extensions, endpoint: UpstreamEndpoint) {
        Self::update(ext, |routing| routing.endpoint = Some(endpoint));
    }

    /// Applies `set` to the value in `ext`, or to a new one inserted there (a look-up that
    /// hits costs less than the entry `get_or_insert_default` makes).
    fn update(ext: &mut Extensions, set: impl FnOnce(&mut Self)) {
        if let Some(routing) = ext.get_mut::<Self>() {
            set(routing);
            return;
        }
        let mut routing = Self::default();
        set(&mut routing);
        ext.insert(routing);
    }

    /// Where the attempt `ext` belongs to goes.
    pub(crate) fn endpoint(ext: &Extensions) -> Option<&UpstreamEndpoint> {
        ext.get::<Self>()?.endpoint.as_ref()
    }

    /// Takes the endpoint out, leaving the value in `ext`.
    pub(crate) fn take_endpoint(ext: &mut Extensions) -> Option<UpstreamEndpoint> {
        ext.get_mut::<Self>()?.endpoint.take()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::combo::Target;
    use crate::config::ProviderApi;
    use crate::upstream::BaseUrl;

    #[test]
    fn the_endpoint_is_written_into_the_value_the_targets_came_in() {
        let mut ext = Extensions::new();
        let targets = RouteTargets::new(Arc::from([Target::new(
            Arc::from("codex"),
            Arc::from("gpt-5"),
        )]));
        Routing::set_targets(&mut ext, targets.clone());
        assert_eq!(Routing::targets(&ext), Some(&targets));
        assert_eq!(Routing::take_targets(&mut ext), Some(targets));
        assert!(ext.get::<Routing>().is_some_and(Routing::is_empty));
        assert!(Routing::endpoint(&ext).is_none());
        assert_eq!(Routing::take_targets(&mut ext), None);
        Routing::set_endpoint(
            &mut ext,
            UpstreamEndpoint {
                base_url: Arc::new(BaseUrl::new("http://127.0.0.1:9/v1")),
                host: None,
                credential: None,
                api: ProviderApi::Anthropic,
                max_output_tokens: Some(7),
                in_band: None,
            },
        );
        assert_eq!(
            Routing::endpoint(&ext).map(|e| e.api),
            Some(ProviderApi::Anthropic)
        );
        assert_eq!(
            Routing::take_endpoint(&mut ext).and_then(|e| e.max_output_tokens),
            Some(7)
        );
        assert!(Routing::take_endpoint(&mut ext).is_none());
        assert_eq!(ext.len(), 1, "one value throughout");
    }
}
