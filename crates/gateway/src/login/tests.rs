//! The refresh rules of one login, against the strict simulated issuer: refresh ahead of
//! expiry, one refresh for many waiters, the rotated pair saved (store and file) before use,
//! replicas sharing a store refresh once, a refused login is refused for good.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use context_relay_sim::{SimLogin, SimProvider};
use context_relay_store::{HandoffStore, MemoryStore};

use super::*;
use crate::upstream::{Upstream, UpstreamLimits};

struct Setup {
    sim: SimProvider,
    dir: tempfile::TempDir,
    store: Arc<dyn HandoffStore>,
    client: Arc<crate::upstream::HttpClient>,
}

async fn setup(kind: SimLogin) -> Setup {
    let sim = SimProvider::builder()
        .login("a", kind)
        .start()
        .await
        .unwrap();
    Setup {
        sim,
        dir: tempfile::tempdir().unwrap(),
        store: Arc::new(MemoryStore::new()),
        client: Upstream::with_limits(UpstreamLimits::default())
            .unwrap()
            .client(),
    }
}

impl Setup {
    /// Writes `file` as `name` and builds the login of it.
    fn login(&self, name: &str, file: &serde_json::Value, kind: SimLogin) -> Login {
        let path = self.dir.path().join(name);
        std::fs::write(&path, file.to_string()).unwrap();
        self.login_at(&path, kind)
    }

    fn login_at(&self, path: &Path, kind: SimLogin) -> Login {
        let endpoint = TokenEndpoint {
            url: Arc::from(self.sim.token_url(kind)),
            client_id: Arc::from(match kind {
                SimLogin::Codex => CODEX_CLIENT_ID,
                SimLogin::Claude => CLAUDE_CLIENT_ID,
            }),
            client: self.client.clone(),
        };
        Login::new(
            LoginName::new("p", "a"),
            path.to_owned(),
            file::read(path).unwrap(),
            endpoint,
            self.store.clone(),
        )
    }

    async fn stored(&self) -> Tokens {
        let s = self.store.login("p/a").await.unwrap().expect("stored");
        serde_json::from_slice(&s.data).unwrap()
    }
}

fn refresh_token(path: &Path) -> String {
    file::read(path).unwrap().tokens.refresh.expose().to_owned()
}

#[tokio::test]
async fn a_fresh_pair_is_used_as_it_is_and_put_in_the_store() {
    let s = setup(SimLogin::Codex).await;
    let file = s.sim.login_file("a").unwrap();
    let login = s.login("auth.json", &file, SimLogin::Codex);
    let issued = login.issue(SystemTime::now()).await.unwrap();
    assert_eq!(s.sim.refreshes("a"), 0);
    assert_eq!(
        s.stored().await.refresh.expose(),
        file["tokens"]["refresh_token"]
    );
    let shown = format!("{issued:?} {login:?}");
    assert!(!shown.contains("rt_") && !shown.contains("ey"), "{shown}");
    assert_eq!(login.status(SystemTime::now()).state, "valid");
}

#[tokio::test]
async fn fifty_waiters_share_one_refresh_saved_before_use() {
    for kind in [SimLogin::Codex, SimLogin::Claude] {
        let s = setup(kind).await;
        let file = s.sim.login_file_expiring("a", 60).unwrap();
        let login = Arc::new(s.login("credentials.json", &file, kind));
        let path = s.dir.path().join("credentials.json");
        let old = refresh_token(&path);
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let login = login.clone();
                tokio::spawn(async move { login.issue(SystemTime::now()).await.unwrap() })
            })
            .collect();
        let mut generations = Vec::new();
        for t in tasks {
            generations.push(t.await.unwrap().generation);
        }
        assert_eq!(
            s.sim.refreshes("a"),
            1,
            "{kind:?}: one refresh for 50 attempts"
        );
        assert!(generations.iter().all(|g| *g == generations[0]));
        // The rotated pair is in the file and the store.
        let new = refresh_token(&path);
        assert_ne!(new, old);
        assert_eq!(s.stored().await.refresh.expose(), new);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}

#[tokio::test]
async fn a_401_refreshes_once_even_for_many() {
    let s = setup(SimLogin::Claude).await;
    let login = s.login("c.json", &s.sim.login_file("a").unwrap(), SimLogin::Claude);
    let first = login.issue(SystemTime::now()).await.unwrap();
    let again = login.recover(first.generation).await.unwrap();
    assert_eq!(s.sim.refreshes("a"), 1);
    assert_ne!(again.generation, first.generation);
    // A late 401 of the old pair: someone refreshed already, no second refresh.
    let late = login.recover(first.generation).await.unwrap();
    assert_eq!(
        (late.generation, s.sim.refreshes("a")),
        (again.generation, 1)
    );
}

#[tokio::test]
async fn replicas_sharing_a_store_refresh_once() {
    let s = setup(SimLogin::Codex).await;
    let file = s.sim.login_file_expiring("a", 60).unwrap();
    // Two replicas, each with its own copy of the file, one store.
    let one = s.login("one.json", &file, SimLogin::Codex);
    let two = s.login("two.json", &file, SimLogin::Codex);
    one.issue(SystemTime::now()).await.unwrap();
    two.issue(SystemTime::now()).await.unwrap();
    assert_eq!(
        s.sim.refreshes("a"),
        1,
        "the second replica used the stored pair"
    );
    let stored = s.stored().await.refresh.expose().to_owned();
    assert_eq!(refresh_token(&s.dir.path().join("two.json")), stored);
    assert!(!s.sim.token_requests().is_empty());

    // A restart from a file older than the store takes the store's pair.
    std::fs::write(s.dir.path().join("old.json"), file.to_string()).unwrap();
    let three = s.login_at(&s.dir.path().join("old.json"), SimLogin::Codex);
    three.issue(SystemTime::now()).await.unwrap();
    assert_eq!(s.sim.refreshes("a"), 1);
    assert_eq!(refresh_token(&s.dir.path().join("old.json")), stored);
}

#[tokio::test]
async fn a_refused_login_is_refused_for_good_and_a_new_login_revives_it() {
    let s = setup(SimLogin::Codex).await;
    let login = s.login(
        "auth.json",
        &s.sim.login_file_expiring("a", 60).unwrap(),
        SimLogin::Codex,
    );
    s.sim.revoke("a");
    let e = login.issue(SystemTime::now()).await.unwrap_err();
    assert_eq!(e, Unusable::Refused("refresh_token_invalidated".into()));
    let status = login.status(SystemTime::now());
    assert_eq!(
        (status.state, status.error.as_deref()),
        ("refused", Some("refresh_token_invalidated"))
    );
    assert!(login.issue(SystemTime::now()).await.is_err(), "for good");
    assert_eq!(s.sim.token_requests().len(), 1, "no second try");

    // Someone logs in again (a new chain in the file): the login's next refusal adopts it
    // instead of giving up.
    let s = setup(SimLogin::Claude).await;
    let login = s.login(
        "c.json",
        &s.sim.login_file_expiring("a", 60).unwrap(),
        SimLogin::Claude,
    );
    s.sim.revoke("a");
    let newer = s.sim.login_file("a").unwrap();
    std::fs::write(s.dir.path().join("c.json"), newer.to_string()).unwrap();
    let issued = login.issue(SystemTime::now()).await.unwrap();
    assert_eq!(
        s.sim.refreshes("a"),
        0,
        "the refused refresh was the only one"
    );
    assert_eq!(login.status(SystemTime::now()).state, "valid");
    let mut h = http::HeaderMap::new();
    issued.credential.apply(&mut h);
    let expected = format!(
        "Bearer {}",
        newer["claudeAiOauth"]["accessToken"].as_str().unwrap()
    );
    assert_eq!(h["authorization"], expected.as_str());
    assert_eq!(h["anthropic-beta"], "oauth-2025-04-20");
    // The store learns the new login on the next sync.
    login.sync().await;
    assert_eq!(
        s.stored().await.refresh.expose(),
        newer["claudeAiOauth"]["refreshToken"]
    );
}
