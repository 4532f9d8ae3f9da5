//! The refresh rules of one login, against the strict simulated issuer: refresh ahead of
//! expiry, one refresh for many waiters, the rotated pair saved (store and file) before use,
//! replicas sharing a store refresh once, a refused login is refused for good.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use context_relay_sim::{SimLogin, SimProvider};
use context_relay_store::{HandoffStore, MemoryStore};

use super::*;
use crate::upstream::{Upstream, UpstreamLimits};

struct Setup {
    sim: SimProvider,
    dir: tempfile::TempDir,
    store: Arc<dyn HandoffStore>,
    client: Arc<crate::upstream::HttpClient>,
    /// Where the logins' refreshes run (what a shutdown drains).
    tasks: context_relay_tower::Background,
}

async fn setup(kind: SimLogin) -> Setup {
    setup_with(kind, |b| b).await
}

/// [`setup`] with the simulated provider's builder adjusted by `adjust`.
async fn setup_with(
    kind: SimLogin,
    adjust: impl FnOnce(context_relay_sim::SimBuilder) -> context_relay_sim::SimBuilder,
) -> Setup {
    let sim = adjust(SimProvider::builder().login("a", kind))
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
        tasks: context_relay_tower::Background::new(),
    }
}

impl Setup {
    /// Writes `file` as `name` and builds the login of it.
    fn login(&self, name: &str, file: &serde_json::Value, kind: SimLogin) -> Arc<Login> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, file.to_string()).unwrap();
        self.login_at(&path, kind)
    }

    fn login_at(&self, path: &Path, kind: SimLogin) -> Arc<Login> {
        let endpoint = TokenEndpoint {
            url: Arc::from(self.sim.token_url(kind)),
            client_id: Arc::from(match kind {
                SimLogin::Codex => CODEX_CLIENT_ID,
                SimLogin::Claude => CLAUDE_CLIENT_ID,
            }),
            client: self.client.clone(),
        };
        Arc::new(Login::new(
            LoginName::new("p", "a"),
            path.to_owned(),
            file::read(path).unwrap(),
            endpoint,
            self.store.clone(),
            self.tasks.clone(),
        ))
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
        // Expired: every attempt needs the refresh (one whose token still holds would carry
        // it rather than wait, see below).
        let file = s.sim.login_file_expiring("a", 0).unwrap();
        let login = s.login("credentials.json", &file, kind);
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

#[tokio::test]
async fn a_refresh_its_request_gave_up_on_is_saved_and_used() {
    // The issuer acts on the refresh at once and answers 400 ms later; the request that began
    // it goes away after 100 ms (its client hung up). The rotated pair must not be lost with
    // it: the old refresh token is dead, and presenting it again would lose the login.
    for kind in [SimLogin::Codex, SimLogin::Claude] {
        let s = setup_with(kind, |b| b.token_delay(Duration::from_millis(400))).await;
        let file = s.sim.login_file_expiring("a", 0).unwrap();
        let login = s.login("credentials.json", &file, kind);
        let path = s.dir.path().join("credentials.json");
        let old = refresh_token(&path);
        let gave_up =
            tokio::time::timeout(Duration::from_millis(100), login.issue(SystemTime::now())).await;
        assert!(
            gave_up.is_err(),
            "{kind:?}: the request left before the answer"
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(s.sim.refreshes("a"), 1, "{kind:?}");
        assert_ne!(
            refresh_token(&path),
            old,
            "{kind:?}: the rotated pair is in the file"
        );
        let issued = login.issue(SystemTime::now()).await.unwrap();
        assert_eq!(issued.generation, 1, "{kind:?}: the rotated pair serves");
        assert_eq!(
            s.sim.token_requests().len(),
            1,
            "{kind:?}: no second refresh"
        );
        assert_eq!(login.status(SystemTime::now()).state, "valid");
    }
}

#[tokio::test]
async fn a_shutdown_waits_for_a_refresh_in_flight() {
    // The request that began a refresh went away; the gateway is stopping. Its drain waits
    // for the background work, the refresh included: once that is idle, the rotated pair is
    // saved (a process that exited earlier would have lost it, the old refresh token dead).
    let s = setup_with(SimLogin::Codex, |b| {
        b.token_delay(Duration::from_millis(400))
    })
    .await;
    let file = s.sim.login_file_expiring("a", 0).unwrap();
    let login = s.login("credentials.json", &file, SimLogin::Codex);
    let path = s.dir.path().join("credentials.json");
    let old = refresh_token(&path);
    let gave_up =
        tokio::time::timeout(Duration::from_millis(100), login.issue(SystemTime::now())).await;
    assert!(gave_up.is_err(), "the request left before the answer");
    assert_eq!(s.tasks.in_flight(), 1, "the refresh is background work");
    assert!(s.tasks.idle_within(Duration::from_secs(10)).await);
    assert_ne!(refresh_token(&path), old, "the rotated pair is in the file");
    assert_eq!(s.stored().await.refresh.expose(), refresh_token(&path));
}

#[tokio::test]
async fn a_refresh_that_failed_is_not_tried_again_by_each_waiter() {
    let s = setup(SimLogin::Claude).await;
    let file = s.sim.login_file_expiring("a", 0).unwrap();
    let login = s.login("c.json", &file, SimLogin::Claude);
    s.sim
        .token_outage(Some(http::StatusCode::SERVICE_UNAVAILABLE));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let login = login.clone();
            tokio::spawn(async move { login.issue(SystemTime::now()).await })
        })
        .collect();
    for t in tasks {
        assert!(matches!(t.await.unwrap(), Err(Unusable::Unavailable(_))));
    }
    assert_eq!(
        s.sim.token_requests().len(),
        1,
        "one refresh failed; the waiters took its verdict"
    );
    // A 401 of the pair within the back-off does not try again either.
    assert!(matches!(
        login.recover(0).await,
        Err(Unusable::Unavailable(_))
    ));
    assert_eq!(s.sim.token_requests().len(), 1);
}

#[tokio::test]
async fn a_token_that_still_holds_is_not_held_up_by_a_slow_issuer() {
    let s = setup_with(SimLogin::Codex, |b| {
        b.token_delay(REFRESH_WAIT + Duration::from_millis(600))
    })
    .await;
    let file = s.sim.login_file_expiring("a", 60).unwrap();
    let login = s.login("auth.json", &file, SimLogin::Codex);
    // The first attempt waits for the refresh ahead of expiry, at most REFRESH_WAIT: then it
    // carries the token that still holds. Another one meanwhile does not wait at all.
    let first = {
        let login = login.clone();
        tokio::spawn(async move { login.issue(SystemTime::now()).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = tokio::time::timeout(Duration::from_millis(100), login.issue(SystemTime::now()))
        .await
        .expect("no wait while a refresh is in flight")
        .unwrap();
    assert_eq!(second.generation, 0);
    assert_eq!(first.await.unwrap().unwrap().generation, 0);
    // The refresh goes on in a tracked task (a shutdown waits for it: the issuer rotates the
    // pair whoever waits), ends on its own, and a later attempt has its pair.
    assert_eq!(
        s.tasks.in_flight(),
        1,
        "the refresh ahead of expiry is tracked"
    );
    assert!(s.tasks.idle_within(Duration::from_secs(10)).await);
    assert_eq!(login.issue(SystemTime::now()).await.unwrap().generation, 1);
    assert_ne!(
        refresh_token(&s.dir.path().join("auth.json")),
        file["tokens"]["refresh_token"]
    );
    assert_eq!(s.sim.refreshes("a"), 1);
}

#[tokio::test]
async fn an_expiry_past_the_clock_is_no_expiry_known() {
    // Claude's issuer tells the expiry as `expires_in`; one too large for the clock must not
    // lose the refresh it came with.
    let s = setup_with(SimLogin::Claude, |b| b.access_ttl(u64::MAX)).await;
    let file = s.sim.login_file_expiring("a", 0).unwrap();
    let login = s.login("c.json", &file, SimLogin::Claude);
    let issued = login.issue(SystemTime::now()).await.unwrap();
    assert_eq!((issued.generation, s.sim.refreshes("a")), (1, 1));
    assert_eq!(login.status(SystemTime::now()).expires_at, None);
}

/// Two replicas on one Redis that stalls for a moment (long enough to trip the request path's
/// timeout and open the breaker): the replica that finds the store erroring while the other
/// refreshes waits for it rather than refreshing the same pair without the lock, which the
/// issuer's reuse detection would answer by revoking the login for both.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_stalls_a_moment_does_not_make_a_second_refresh() {
    use std::io::{Read, Write};
    /// The test's own server, stopped however the test ends.
    struct Stopped(std::process::Child);
    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let (port, redis) = context_relay_testkit::redis_server::spawn_on_free_port(|port| {
        ["--port", port, "--enable-debug-command", "yes"]
            .map(str::to_owned)
            .to_vec()
    });
    let redis = Stopped(redis);
    let url = format!("redis://127.0.0.1:{port}/");
    let store: Arc<dyn HandoffStore> = Arc::new(
        context_relay_store::RedisStore::builder(&url)
            .connect()
            .await
            .unwrap(),
    );
    let mut s = setup_with(SimLogin::Claude, |b| {
        b.token_delay(Duration::from_millis(1500))
    })
    .await;
    s.store = store.clone();
    let file = s.sim.login_file_expiring("a", 0).unwrap();
    let one = s.login("one.json", &file, SimLogin::Claude);
    let two = s.login("two.json", &file, SimLogin::Claude);
    let first = {
        let one = one.clone();
        tokio::spawn(async move { one.issue(SystemTime::now()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Redis sleeps 400 ms; a request-path read meanwhile times out and opens the breaker.
    let stall = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"DEBUG SLEEP 0.4\r\n").unwrap();
        let _ = c.read(&mut [0; 16]);
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let key = context_relay_core::HandoffKey::new("t", "s", "c");
    assert!(store.get(&key).await.is_err(), "the store stalls");
    let second = two.issue(SystemTime::now()).await;
    let first = first.await.unwrap();
    let _ = stall.join();
    drop(redis);
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(s.sim.refreshes("a"), 1, "one refresh for both replicas");
    assert_eq!(s.sim.token_requests().len(), 1);
    assert_eq!(second.generation, 1, "the other replica's pair");
    assert_eq!(first.generation, 1);
}

#[tokio::test]
async fn only_the_issuers_failure_stops_a_401_from_refreshing() {
    let s = setup(SimLogin::Codex).await;
    let login = s.login(
        "auth.json",
        &s.sim.login_file("a").unwrap(),
        SimLogin::Codex,
    );
    let later = SystemTime::now() + RETRY_REFRESH_AFTER;
    // The store could not lock a refresh ahead of expiry a moment ago: a 401 still refreshes.
    {
        let mut st = login.state();
        st.failed_until = Some(later);
        st.issuer_failed = false;
    }
    assert_eq!(login.recover(0).await.unwrap().generation, 1);
    assert_eq!(s.sim.refreshes("a"), 1);
    // The token endpoint failed a moment ago: the 401 takes that verdict.
    {
        let mut st = login.state();
        st.failed_until = Some(later);
        st.issuer_failed = true;
    }
    assert!(matches!(
        login.recover(1).await,
        Err(Unusable::Unavailable(_))
    ));
    assert_eq!(s.sim.token_requests().len(), 1);
}

/// A reload revives a refused login only when its file holds a pair someone else wrote: a
/// file the gateway could not write keeps the pair it was read with, which is no new login.
#[tokio::test]
async fn only_a_new_sign_in_into_the_file_renews_a_refused_login() {
    let s = setup(SimLogin::Claude).await;
    let first = s.sim.login_file("a").unwrap();
    let login = s.login("c.json", &first, SimLogin::Claude);
    let path = s.dir.path().join("c.json");
    let read = || file::read(&path).unwrap();
    assert!(!login.renewed_by(&read()), "not refused");
    {
        // The gateway rotated the pair (its write to the file failed), then was refused.
        let rotated = file::parse(&s.sim.login_file("a").unwrap().to_string()).unwrap();
        let mut st = login.state();
        st.tokens = Arc::new(rotated.tokens);
        st.refused = Some("invalid_grant".to_owned());
    }
    assert!(
        !login.renewed_by(&read()),
        "the file's old pair is no new login"
    );
    std::fs::write(&path, s.sim.login_file("a").unwrap().to_string()).unwrap();
    assert!(login.renewed_by(&read()), "someone logged in again");
}

/// A login refused after the gateway rotated its pair but could not write the file: the
/// file's older pair is one the gateway spent, not a new sign-in, and is not fallen back to.
#[tokio::test]
async fn a_refusal_does_not_fall_back_to_a_pair_the_gateway_spent() {
    let s = setup(SimLogin::Claude).await;
    let first = s.sim.login_file("a").unwrap();
    let login = s.login("c.json", &first, SimLogin::Claude);
    {
        let rotated = s.sim.login_file_expiring("a", 0).unwrap();
        let rotated = file::parse(&rotated.to_string()).unwrap();
        let mut st = login.state();
        st.credential = credential(LoginKind::Claude, &rotated.tokens);
        st.tokens = Arc::new(rotated.tokens);
    }
    s.sim.revoke("a");
    let got = login.issue(SystemTime::now()).await;
    assert!(matches!(got, Err(Unusable::Refused(_))), "{got:?}");
}
