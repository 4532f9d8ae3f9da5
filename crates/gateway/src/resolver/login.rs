//! The credential of an attempt: an account's key, or its login's access token (refreshed
//! ahead of expiry, and once after a 401), and what a login that cannot serve does to the pool:
//! refused for good, the account leaves the pool for good; failing for now, it waits a back-off.

use std::time::SystemTime;

use http::StatusCode;

use crate::credential::Credential;
use crate::login::{Issued, Unusable};
use crate::pool::{Account, AccountAuth, ProviderPool};

/// The credential of one account's attempts of a request.
pub(super) struct Issue {
    pub(super) credential: Credential,
    /// The login pair it came from (`None` for a key).
    generation: Option<u64>,
    /// Whether it was refreshed after a 401 already.
    recovered: bool,
    /// Whether the login answered the provider's 401 by taking the account out of the pool
    /// itself (its refresh refused for good, or failing for now, each logged by the login):
    /// the 401 is no verdict on a key to be checked.
    settled: bool,
}

impl Issue {
    /// Whether the login took the account out after the provider's 401 (see the field).
    pub(super) fn settled(&self) -> bool {
        self.settled
    }
}

/// The credential for an attempt on `account` (number `idx` of `pool`); `None` when its login
/// cannot serve now (the pool knows it: refused for good, or disabled for a back-off).
pub(super) async fn credential(
    pool: &ProviderPool,
    idx: usize,
    account: &Account,
    now: SystemTime,
) -> Option<Issue> {
    match &account.auth {
        AccountAuth::Key(credential) => Some(Issue {
            credential: credential.clone(),
            generation: None,
            recovered: false,
            settled: false,
        }),
        AccountAuth::Login(login) => {
            // Boxed: a refresh's future is large, and inline it would make every request's
            // resolver future (an account key's too) that much larger to set up and move.
            let issued = settle(pool, idx, account, Box::pin(login.issue(now)).await)?;
            Some(Issue {
                credential: issued.credential,
                generation: Some(issued.generation),
                recovered: false,
                settled: false,
            })
        }
    }
}

/// Whether an attempt answered `status` goes again to the same account: a login's first 401
/// of the request, once its pair is refreshed (or another request refreshed it meanwhile).
/// `issue` then holds the new credential.
pub(super) async fn retry_after(
    pool: &ProviderPool,
    idx: usize,
    account: &Account,
    issue: &mut Issue,
    status: StatusCode,
) -> bool {
    let (Some(generation), Some(login)) = (issue.generation, account.login()) else {
        return false;
    };
    if status != StatusCode::UNAUTHORIZED || issue.recovered {
        return false;
    }
    issue.recovered = true;
    account.metrics.count(status);
    tracing::info!(provider = %pool.name(), account = %account.id, "the provider refused the login's access token; refreshing it and trying the account again");
    // Boxed for the reason `credential` gives.
    let Some(issued) = settle(
        pool,
        idx,
        account,
        Box::pin(login.recover(generation)).await,
    ) else {
        issue.settled = true;
        return false;
    };
    issue.credential = issued.credential;
    issue.generation = Some(issued.generation);
    true
}

/// The pool's side of a login's answer.
fn settle(
    pool: &ProviderPool,
    idx: usize,
    account: &Account,
    answer: Result<Issued, Unusable>,
) -> Option<Issued> {
    match answer {
        Ok(issued) => Some(issued),
        Err(Unusable::Refused(_)) => {
            // Logged by the login, with the issuer's code.
            pool.refuse(idx);
            None
        }
        Err(Unusable::Unavailable(why)) => {
            let now = SystemTime::now();
            let until = pool.disable(idx, now);
            let secs = until.duration_since(now).map_or(0, |d| d.as_secs());
            tracing::warn!(provider = %pool.name(), account = %account.id, error = %why, disabled_for_secs = secs, "the login has no usable access token for now; account disabled for a back-off");
            None
        }
    }
}
