//! The activity feed: what the gateway and the relay did lately, for the console.
//!
//! Entries are kept in a ring of [`KEPT`] (the newest last) and sent to every open
//! `GET /admin/events` stream as they happen. Each is one JSON object:
//!
//! ```json
//! {"seq":12,"at":"2026-01-02T03:04:05.678Z","event":"switch","reason":null,
//!  "tenant":"alice","session":"s1","combo":"codex-relay","provider":"codex",
//!  "account":"acct-b","from":"acct-a","actions":["injected","scrubbed"],"handoff":null}
//! ```
//!
//! `event` is one of: `switch` (a session moved to another account of the provider),
//! `relayed` (the relay acted on a request that stayed on its account), the outcome of a
//! summary generation (`generated`, `extractive`, `rejected`, `unparseable`, `unavailable`),
//! `skipped` (a turn past the threshold that started no summary; `reason` says why),
//! `exhausted` and `disabled` (an account taken out of rotation; `reason` says why). `actions`
//! lists what the relay did to the request (`model-switch`, `injected`, `extractive` (the
//! injected handoff was built at the switch, without a model call), `scrubbed`,
//! `repaired`). Kinds added later appear as they are named: a reader shows what it does not
//! know as is.
//!
//! Nothing is recorded on the pass-through path: only a switch, a relay action, a background
//! outcome or a rotation makes an entry.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use context_relay_tower::{ComboName, FactsExt, RelayAction, RelayEvent, SessionId, Tenant};
use http::Extensions;
use serde::Serialize;
use tokio::sync::{broadcast, watch};

use crate::admin::rfc3339;

/// Entries kept for a console that opens.
pub(crate) const KEPT: usize = 500;

/// One entry of the feed (see the module docs).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) at: String,
    pub(crate) event: &'static str,
    pub(crate) reason: Option<&'static str>,
    pub(crate) tenant: Option<Arc<str>>,
    pub(crate) session: Option<Arc<str>>,
    pub(crate) combo: Option<Arc<str>>,
    pub(crate) provider: Option<Arc<str>>,
    pub(crate) account: Option<Arc<str>>,
    pub(crate) from: Option<Arc<str>>,
    pub(crate) actions: Vec<&'static str>,
    pub(crate) handoff: Option<&'static str>,
    pub(crate) until: Option<String>,
}

/// The feed; clones share it (it outlives configuration reloads).
#[derive(Clone)]
pub(crate) struct Activity(Arc<Inner>);

struct Inner {
    seq: AtomicU64,
    ring: Mutex<VecDeque<Arc<str>>>,
    live: broadcast::Sender<Arc<str>>,
    /// Set when the gateway shuts down: open streams end, so they do not hold the drain.
    closed: watch::Sender<bool>,
    /// Bumped when a reload changes or removes the admin token: the streams opened with the
    /// old one end.
    admin: watch::Sender<u64>,
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity").finish_non_exhaustive()
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self(Arc::new(Inner {
            seq: AtomicU64::new(0),
            ring: Mutex::new(VecDeque::with_capacity(KEPT)),
            live: broadcast::channel(KEPT).0,
            closed: watch::channel(false).0,
            admin: watch::channel(0).0,
        }))
    }
}

/// A reader of the feed (see [`Activity::subscribe`]).
pub(crate) struct Subscription {
    /// The entries from now on.
    pub(crate) live: broadcast::Receiver<Arc<str>>,
    /// The gateway shuts down.
    pub(crate) closed: watch::Receiver<bool>,
    /// Changes when the admin token does.
    pub(crate) admin: watch::Receiver<u64>,
}

/// Whom a request is about: what it said about itself, for an entry.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Subject<'a> {
    /// Its [`Tenant`].
    pub tenant: Option<&'a Tenant>,
    /// Its [`SessionId`].
    pub session: Option<&'a SessionId>,
    /// Its [`ComboName`].
    pub combo: Option<&'a ComboName>,
}

impl<'a> Subject<'a> {
    /// The subject of the request whose extensions are `extensions`.
    pub(crate) fn of(extensions: &'a Extensions) -> Self {
        Self {
            tenant: extensions.fact(),
            session: extensions.fact(),
            combo: extensions.fact(),
        }
    }

    fn about(self, mut entry: Entry) -> Entry {
        entry.tenant = self.tenant.map(|t| t.0.clone());
        entry.session = self.session.map(|s| s.0.clone());
        entry.combo = self.combo.map(|c| c.0.clone());
        entry
    }
}

impl Activity {
    /// Adds `entry` (its `seq` and `at` are set here).
    pub(crate) fn push(&self, mut entry: Entry) {
        entry.seq = self.0.seq.fetch_add(1, Ordering::Relaxed) + 1;
        entry.at = rfc3339(SystemTime::now());
        let Ok(json) = serde_json::to_string(&entry) else {
            return;
        };
        let json: Arc<str> = Arc::from(json);
        {
            let mut ring = self.0.ring.lock().unwrap_or_else(PoisonError::into_inner);
            if ring.len() == KEPT {
                ring.pop_front();
            }
            ring.push_back(json.clone());
        }
        // No console open: nobody to tell.
        let _ = self.0.live.send(json);
    }

    /// A request was served by `account` of `provider`: an entry when the session moved from
    /// `from`, or when the relay acted on it. A move is a `switch` also when this pool did not
    /// serve the session before (another provider, a reload): the relay's handoff or model
    /// switch tells it.
    pub(crate) fn served(
        &self,
        subject: Subject<'_>,
        response: &Extensions,
        provider: &Arc<str>,
        account: &Arc<str>,
        from: Option<&Arc<str>>,
    ) {
        let action = response.get::<RelayAction>().copied().unwrap_or_default();
        if from.is_none() && action.is_empty() {
            return;
        }
        let actions = [
            (action.model_switch, "model-switch"),
            (action.injected, "injected"),
            (action.extractive, "extractive"),
            (action.scrubbed, "scrubbed"),
            (action.repaired, "repaired"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        self.push(subject.about(Entry {
            event: if from.is_some() || action.injected || action.model_switch {
                "switch"
            } else {
                "relayed"
            },
            provider: Some(provider.clone()),
            account: Some(account.clone()),
            from: from.cloned(),
            actions,
            ..Entry::default()
        }));
    }

    /// An account left rotation: `event` is `exhausted` or `disabled`.
    pub(crate) fn rotated(
        &self,
        event: &'static str,
        reason: &'static str,
        provider: &Arc<str>,
        account: &str,
        until: SystemTime,
    ) {
        self.push(Entry {
            event,
            reason: Some(reason),
            provider: Some(provider.clone()),
            account: Some(Arc::from(account)),
            until: Some(rfc3339(until)),
            ..Entry::default()
        });
    }

    /// An outcome of the relay's background work.
    pub(crate) fn relay_event(&self, e: &RelayEvent) {
        let key = e.key.as_ref();
        self.push(Entry {
            event: e.kind,
            reason: e.reason,
            tenant: key.map(|k| k.tenant.clone()),
            session: key.map(|k| k.session.clone()),
            combo: key.map(|k| k.combo.clone()),
            provider: e.account.as_ref().map(|a| a.provider().clone()),
            account: e.account.as_ref().map(|a| a.account().clone()),
            handoff: e.handoff.map(|k| k.as_str()),
            ..Entry::default()
        });
    }

    /// The entries kept, oldest first.
    pub(crate) fn recent(&self) -> Vec<Arc<str>> {
        let ring = self.0.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.iter().cloned().collect()
    }

    /// Entries from now on, and what ends a stream of them: the shutdown flag, and the admin
    /// token's changes.
    pub(crate) fn subscribe(&self) -> Subscription {
        Subscription {
            live: self.0.live.subscribe(),
            closed: self.0.closed.subscribe(),
            admin: self.0.admin.subscribe(),
        }
    }

    /// A reload changed or removed the admin token: open streams end (their reader's login
    /// no longer holds).
    pub(crate) fn admin_changed(&self) {
        self.0.admin.send_modify(|n| *n += 1);
    }

    /// How many times the admin token changed: a console built now serves this generation.
    pub(crate) fn admin_generation(&self) -> u64 {
        *self.0.admin.borrow()
    }

    /// The gateway shuts down: open streams end.
    pub(crate) fn close(&self) {
        self.0.closed.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_entries_numbered_in_order() {
        let feed = Activity::default();
        let mut live = feed.subscribe().live;
        for _ in 0..KEPT + 3 {
            feed.push(Entry {
                event: "skipped",
                reason: Some("fresh"),
                ..Entry::default()
            });
        }
        let recent = feed.recent();
        assert_eq!(recent.len(), KEPT);
        let first: serde_json::Value = serde_json::from_str(&recent[0]).unwrap();
        assert_eq!(first["seq"], 4);
        assert_eq!(first["reason"], "fresh");
        assert!(first["at"].as_str().unwrap().ends_with('Z'));
        assert!(live.try_recv().is_ok(), "open streams hear it too");
    }

    #[test]
    fn a_request_the_relay_left_alone_on_its_account_makes_no_entry() {
        let feed = Activity::default();
        let (provider, account) = (Arc::from("codex"), Arc::from("acct-a"));
        feed.served(
            Subject::default(),
            &Extensions::new(),
            &provider,
            &account,
            None,
        );
        assert!(feed.recent().is_empty());
        let mut response = Extensions::new();
        response.insert(RelayAction {
            scrubbed: true,
            ..RelayAction::default()
        });
        let from = Arc::from("acct-b");
        let mut request = Extensions::new();
        request.insert(Tenant::new("alice"));
        request.insert(SessionId::new("s1"));
        feed.served(
            Subject::of(&request),
            &response,
            &provider,
            &account,
            Some(&from),
        );
        let entry: serde_json::Value = serde_json::from_str(&feed.recent()[0]).unwrap();
        assert_eq!(entry["event"], "switch");
        assert_eq!(entry["from"], "acct-b");
        assert_eq!(
            (&entry["tenant"], &entry["session"]),
            (&"alice".into(), &"s1".into())
        );
        assert_eq!(entry["combo"], serde_json::Value::Null);
        assert_eq!(entry["actions"], serde_json::json!(["scrubbed"]));
        // A move this pool did not see (from another provider): the handoff tells it.
        response.insert(RelayAction {
            model_switch: true,
            injected: true,
            ..RelayAction::default()
        });
        feed.served(Subject::of(&request), &response, &provider, &account, None);
        let entry: serde_json::Value = serde_json::from_str(&feed.recent()[1]).unwrap();
        assert_eq!(entry["event"], "switch");
        assert_eq!(entry["from"], serde_json::Value::Null);
    }
}
