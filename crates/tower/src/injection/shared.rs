use std::sync::Arc;

use context_relay_core::session::SessionSources;
use context_relay_store::HandoffStore;

use crate::background::Background;
use crate::configs::RelayConfigs;
use crate::identity::TenantMemo;

/// State shared by every clone of one [`Injection`](super::Injection) service.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn HandoffStore>,
    pub(crate) configs: RelayConfigs,
    pub(crate) background: Background,
    pub(crate) sources: Arc<SessionSources>,
    pub(crate) tenants: Arc<TenantMemo>,
}
