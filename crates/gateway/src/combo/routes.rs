//! The routing table: the combos and the providers reachable as `provider/model`, and the
//! targets a client's `model` resolves to.

use std::sync::Arc;

use context_relay_tower::{ComboName, ServingModel};
use foldhash::HashMap;

use crate::config::Config;
use crate::model::WrittenModel;

/// One `provider/model` routing target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Target {
    /// Provider name as configured.
    pub provider: Arc<str>,
    /// The model sent upstream.
    pub model: Arc<str>,
    /// `provider/model`, as the relay is told which model served (made once, not per
    /// request).
    pub serving: ServingModel,
}

impl Target {
    pub(crate) fn new(provider: Arc<str>, model: Arc<str>) -> Self {
        let serving = ServingModel::new(format!("{provider}/{model}"));
        Self {
            provider,
            model,
            serving,
        }
    }
}

/// Request extension: the targets of a request, tried in order by the account resolver, and
/// where ComboService wrote the first one's `model` into the body: carried to the resolver in
/// the request's [`Routing`](crate::routing::Routing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RouteTargets {
    /// The targets, in order.
    pub targets: Arc<[Target]>,
    /// Where the first target's model was written (none for a request ComboService did not
    /// route, and for a Gemini request, whose model is in its path).
    pub written: Option<WrittenModel>,
}

impl RouteTargets {
    /// `targets`, with no model written yet.
    pub(crate) fn new(targets: Arc<[Target]>) -> Self {
        Self {
            targets,
            written: None,
        }
    }
}

/// The routing table: combos and the providers reachable as `provider/model`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Routes {
    combos: HashMap<String, (Option<ComboName>, RouteTargets)>,
    /// Combo names in configuration order (for `/v1/models`).
    order: Vec<String>,
    providers: Vec<Arc<str>>,
}

/// Why a `model` could not be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RouteError {
    /// Neither a combo nor `provider/model` with a known provider.
    #[error(
        "the model {model:?} is neither a configured combo ({combos}) nor \"provider/model\" with a configured provider ({providers})"
    )]
    UnknownModel {
        /// The model asked for.
        model: String,
        /// The combo names, comma separated.
        combos: String,
        /// The provider names, comma separated.
        providers: String,
    },
}

impl Routes {
    /// The routing table of a configuration.
    pub(crate) fn from_config(config: &Config) -> Self {
        let mut routes = Routes {
            providers: config
                .providers
                .iter()
                .map(|p| Arc::from(p.name.as_str()))
                .collect(),
            ..Routes::default()
        };
        for c in &config.combos {
            let targets: Arc<[Target]> = c
                .targets
                .iter()
                .map(|t| Target::new(Arc::from(t.provider.as_str()), Arc::from(t.model.as_str())))
                .collect();
            // Both strategies name the combo to the relay: a `priority` combo's relay settings
            // keep only its model-switch path (see `Config::relay_configs`).
            let combo = Some(ComboName::new(c.name.as_str()));
            routes
                .combos
                .insert(c.name.clone(), (combo, RouteTargets::new(targets)));
            routes.order.push(c.name.clone());
        }
        routes
    }

    /// Resolves a client's `model`: a combo name first, then `provider/model`.
    pub(crate) fn resolve(
        &self,
        model: &str,
    ) -> Result<(Option<ComboName>, RouteTargets), RouteError> {
        if let Some((combo, targets)) = self.combos.get(model) {
            return Ok((combo.clone(), targets.clone()));
        }
        if let Some(target) = self.direct(model) {
            // A direct route gets the whole relay, keyed by the route: its sessions are
            // scrubbed, repaired and handed off when they move between the provider's
            // accounts, like a combo's.
            let combo = ComboName::new(&*target.serving.0);
            return Ok((Some(combo), RouteTargets::new(Arc::from([target]))));
        }
        Err(RouteError::UnknownModel {
            model: model.to_owned(),
            combos: self.order.join(", "),
            providers: self
                .providers
                .iter()
                .map(|p| &**p)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The one target of a direct `provider/model` route, when `model` is one.
    fn direct(&self, model: &str) -> Option<Target> {
        let (provider, m) = model.split_once('/')?;
        if m.is_empty() {
            return None;
        }
        let p = self.providers.iter().find(|p| &***p == provider)?;
        Some(Target::new(p.clone(), Arc::from(m)))
    }

    /// The targets of the combo or direct route `name`: internal requests (the relay's summary
    /// call) carry the session's [`ComboName`] but no [`RouteTargets`], and are routed with
    /// these.
    pub(crate) fn combo_targets(&self, name: &str) -> Option<RouteTargets> {
        match self.combos.get(name) {
            Some((_, targets)) => Some(targets.clone()),
            None => self
                .direct(name)
                .map(|target| RouteTargets::new(Arc::from([target]))),
        }
    }

    /// The model ids clients can ask for: combos, then every distinct combo target.
    pub(crate) fn model_ids(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .order
            .iter()
            .map(|c| (c.clone(), "context-relay".to_owned()))
            .collect();
        for name in &self.order {
            if let Some((_, targets)) = self.combos.get(name) {
                for t in targets.targets.iter() {
                    let id = format!("{}/{}", t.provider, t.model);
                    if !out.iter().any(|(o, _)| *o == id) {
                        out.push((id, t.provider.to_string()));
                    }
                }
            }
        }
        out
    }
}
