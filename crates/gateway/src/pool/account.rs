//! One account of a pool: its credential (an API key or a subscription login), its metrics,
//! and the view of its state that logs and the console show.

use std::sync::Arc;
use std::time::SystemTime;

use context_relay_core::ResolvedAccount;

use crate::credential::Credential;
use crate::login::Login;
use crate::telemetry::AccountMetrics;

/// How an account authenticates.
#[derive(Clone)]
pub(crate) enum AccountAuth {
    /// An API key, always the same headers.
    Key(Credential),
    /// A subscription login, whose access token changes.
    Login(Arc<Login>),
}

/// One account's credential.
#[derive(Clone)]
pub(crate) struct Account {
    /// The account id.
    pub id: Arc<str>,
    /// This account as every relay part names it (provider, id), built once.
    pub resolved: ResolvedAccount,
    /// Its key or login.
    pub auth: AccountAuth,
    /// Its metrics.
    pub metrics: Arc<AccountMetrics>,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Account {
    /// The login of a login account.
    pub(crate) fn login(&self) -> Option<&Arc<Login>> {
        match &self.auth {
            AccountAuth::Login(l) => Some(l),
            AccountAuth::Key(_) => None,
        }
    }
}

/// A point-in-time view of one account, for logs, demos and tests.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AccountStatus {
    /// The account id.
    pub id: Arc<str>,
    /// Last usage fraction the provider reported, if any.
    pub used: Option<f64>,
    /// Until when the account is exhausted (`None` = not exhausted).
    pub exhausted_until: Option<SystemTime>,
    /// Until when the account is disabled because the provider refused its credential
    /// (`None` = not disabled).
    pub disabled_until: Option<SystemTime>,
    /// Whether its login was refused for good.
    pub refused: bool,
}

impl AccountStatus {
    /// `available`, `exhausted` or `disabled` (a disabled account may also be exhausted).
    pub(crate) fn state(&self) -> &'static str {
        if self.disabled_until.is_some() || self.refused {
            "disabled"
        } else if self.exhausted_until.is_some() {
            "exhausted"
        } else {
            "available"
        }
    }
}
