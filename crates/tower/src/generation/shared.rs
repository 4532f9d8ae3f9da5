use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use context_relay_core::prompt::SummarySettings;

use context_relay_core::session::SessionSources;
use context_relay_store::{CoolDown, HandoffStore, InFlight};
use tokio::sync::Semaphore;

use super::call::DroppedParams;
use crate::background::Background;
use crate::configs::RelayConfigs;
use crate::quota_source::QuotaSource;
use crate::summarizer::SharedSummarizer;

/// State shared by every clone of one [`Generation`](super::Generation) service; the parts
/// that must be global across services (in-flight keys, cool-downs, the concurrency bound,
/// background tasks) are themselves `Arc`s shared by every service of the layer.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn HandoffStore>,
    pub(crate) configs: RelayConfigs,
    pub(crate) inflight: Arc<InFlight>,
    pub(crate) cooldown: Arc<CoolDown>,
    pub(crate) semaphore: Arc<Semaphore>,
    pub(crate) background: Background,
    /// The custom summarizer, or the inner-service one made on first use (its type depends on
    /// the request body type, only known in `call`).
    pub(crate) summarizer: OnceLock<SharedSummarizer>,
    pub(crate) quota: Arc<dyn QuotaSource>,
    pub(crate) sources: Arc<SessionSources>,
    pub(crate) stream_providers: Arc<[Arc<str>]>,
    /// Summary request settings per provider (lower-cased name).
    pub(crate) settings: Arc<HashMap<String, SummarySettings>>,
    /// Parameters each provider and model refused in summary requests.
    pub(crate) dropped: Arc<DroppedParams>,
    /// Admission of summary jobs (running or waiting).
    pub(crate) queue: Arc<Semaphore>,
}

impl Shared {
    /// The summary settings configured for `provider`.
    pub(crate) fn settings_for(&self, provider: &str) -> Option<&SummarySettings> {
        if self.settings.is_empty() {
            return None;
        }
        self.settings.get(&provider.to_ascii_lowercase())
    }

    /// Whether summary requests to `provider` must ask for a streamed reply.
    pub(crate) fn stream_summaries_for(&self, provider: &str) -> bool {
        self.stream_providers
            .iter()
            .any(|p| p.eq_ignore_ascii_case(provider))
    }
}
