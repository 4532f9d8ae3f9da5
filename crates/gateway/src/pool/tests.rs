use proptest::prelude::*;

use super::*;

fn pool(n: usize, rotate_at: f64) -> ProviderPool {
    let accounts = (0..n)
        .map(|i| format!("[[providers.accounts]]\nid = \"a{i}\"\napi_key = \"k{i}\"\n"))
        .collect::<String>();
    let text = format!(
        "[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1/\"\nrotate_at = {rotate_at}\nauth = \"x-api-key\"\n{accounts}"
    );
    let c = Config::from_toml_str(&text, |_| None).unwrap();
    ProviderPool::new(&c.providers[0], None)
}

fn t(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
}

#[test]
fn credentials_follow_auth() {
    let p = pool(1, 0.95);
    let AccountAuth::Key(credential) = &p.accounts()[0].auth else {
        panic!("a key account");
    };
    let (name, value) = credential.main();
    assert_eq!(name, "x-api-key");
    assert_eq!(value, "k0");
    assert!(value.is_sensitive());
    assert_eq!(p.base_url().as_str(), "http://h/v1");
}

/// A binding is a tenant's: the same session id of another tenant is another session, even
/// when the two names would read the same joined by a newline.
#[test]
fn a_binding_belongs_to_one_tenant() {
    let p = pool(3, 0.95);
    let key = |tenant: &str, session: &str| SessionKey::new(tenant.into(), session.into());
    p.bind(&key("alice", "s"), 2);
    assert_eq!(p.bound(&key("alice", "s")), Some(2));
    assert_eq!(p.bound(&key("bob", "s")), None);
    assert_eq!(p.pick(Some(&key("bob", "s")), &[], t(0)), Some(0));
    p.bind(&key("a\nb", "c"), 1);
    assert_eq!(p.bound(&key("a", "b\nc")), None);
    assert_eq!(p.bound(&key("a\nb", "c")), Some(1));
}

#[test]
fn fill_first_and_sticky() {
    let p = pool(3, 0.95);
    assert_eq!(p.pick(Some(&"s1".into()), &[], t(0)), Some(0));
    // A session bound to the second account stays there although the first is free.
    p.bind(&"s2".into(), 1);
    assert_eq!(p.pick(Some(&"s2".into()), &[], t(1)), Some(1));
    assert_eq!(p.bound(&"s2".into()), Some(1));
    // New sessions and sessionless requests fill the first account.
    assert_eq!(p.pick(Some(&"s3".into()), &[], t(1)), Some(0));
    assert_eq!(p.pick(None, &[], t(1)), Some(0));
}

#[test]
fn rotation_at_threshold_until_reset() {
    let p = pool(2, 0.9);
    p.bind(&"s".into(), 0);
    assert!(!p.observe(0, &QuotaSignal::used(0.89), t(0)));
    assert_eq!(p.pick(Some(&"s".into()), &[], t(0)), Some(0));
    let signal = QuotaSignal {
        percent_used: 0.9,
        resets_at: Some(t(500)),
        window: None,
    };
    assert!(p.observe(0, &signal, t(1)));
    assert_eq!(p.pick(Some(&"s".into()), &[], t(2)), Some(1));
    assert_eq!(p.next_reset(t(2)), Some(t(500)));
    let snap = p.snapshot(t(2));
    assert_eq!(snap[0].used, Some(0.9));
    assert_eq!(snap[0].exhausted_until, Some(t(500)));
    // After the reset the session's account is available again, its usage forgotten.
    assert_eq!(p.pick(Some(&"s".into()), &[], t(500)), Some(0));
    assert_eq!(p.snapshot(t(500))[0].used, None);
}

#[test]
fn default_reset_when_none_announced() {
    let p = pool(1, 0.95);
    assert!(p.observe(0, &QuotaSignal::used(1.0), t(0)));
    assert_eq!(p.pick(None, &[], t(59)), None);
    assert_eq!(p.pick(None, &[], t(60)), Some(0));
    // A reset in the past counts as none.
    assert_eq!(reset_or_default(Some(t(5)), t(10)), t(70));
    // One further than any quota window is read as the longest.
    let week = MAX_RESET.as_secs();
    assert_eq!(reset_or_default(Some(t(10 + week)), t(10)), t(10 + week));
    assert_eq!(reset_or_default(Some(t(999_999_999)), t(10)), t(10 + week));
}

#[test]
fn exclusion_and_exhaustion() {
    let p = pool(3, 0.95);
    p.bind(&"s".into(), 0);
    assert_eq!(p.pick(Some(&"s".into()), &[0], t(0)), Some(1));
    p.mark_exhausted(1, t(100));
    assert_eq!(p.pick(Some(&"s".into()), &[0], t(0)), Some(2));
    assert_eq!(p.pick(Some(&"s".into()), &[0, 2], t(0)), None);
}

#[test]
fn bindings_are_bounded_least_recently_used_first() {
    let p = pool(2, 0.95).with_max_sessions(16);
    for i in 0..16 {
        p.bind(&format!("s{i}").as_str().into(), 1);
    }
    // s0 is used again: it is now the most recent.
    p.bind(&"s0".into(), 1);
    assert_eq!(p.sessions(), 16);
    p.bind(&"new".into(), 1);
    // The two least recently used (16 / 8) made room: s1 and s2.
    assert_eq!(p.sessions(), 15);
    assert_eq!(p.bound(&"s0".into()), Some(1));
    assert_eq!(p.bound(&"s1".into()), None);
    assert_eq!(p.bound(&"s2".into()), None);
    assert_eq!(p.bound(&"s3".into()), Some(1));
    assert_eq!(p.bound(&"new".into()), Some(1));
    for i in 0..1000 {
        p.bind(&format!("x{i}").as_str().into(), 0);
    }
    assert!(p.sessions() <= 16);
}

#[test]
fn refused_accounts_back_off_and_return() {
    let p = pool(2, 0.95);
    p.bind(&"s".into(), 0);
    assert_eq!(p.disable(0, t(0)), t(60));
    assert_eq!(p.pick(Some(&"s".into()), &[], t(1)), Some(1));
    let snap = p.snapshot(t(1));
    assert_eq!(snap[0].state(), "disabled");
    assert_eq!(snap[1].state(), "available");
    assert_eq!(p.next_reset(t(1)), Some(t(60)));
    // Requests already on their way when it was disabled change nothing.
    assert_eq!(p.disable(0, t(2)), t(60));
    // After the back-off one request probes it; the others keep skipping it meanwhile.
    assert_eq!(p.pick(Some(&"s".into()), &[], t(60)), Some(0));
    assert_eq!(p.pick(Some(&"s".into()), &[], t(61)), Some(1));
    assert_eq!(p.pick(None, &[], t(61)), Some(1));
    // The probe refused: twice as long, once.
    assert_eq!(p.disable(0, t(61)), t(181));
    assert_eq!(p.disable(0, t(62)), t(181));
    assert_eq!(p.pick(None, &[], t(181)), Some(0));
    assert_eq!(p.disable(0, t(181)), t(421));
    // A probe that never reports lets another one through after the probe window.
    assert_eq!(p.pick(None, &[], t(421)), Some(0));
    assert_eq!(p.pick(None, &[], t(422)), Some(1));
    assert_eq!(p.pick(None, &[], t(421) + PROBE_WINDOW), Some(0));
    // A probe that failed without a verdict lets the next request probe.
    p.probe_ended(0);
    assert_eq!(p.pick(None, &[], t(500)), Some(0));
    // A probe that shows the credential works enables the account and starts the back-off
    // over.
    p.succeeded(0);
    assert_eq!(p.pick(None, &[], t(501)), Some(0));
    assert_eq!(p.snapshot(t(501))[0].state(), "available");
    assert_eq!(p.disable(0, t(1000)), t(1060));
    // It never exceeds the cap.
    let mut now = t(0);
    for _ in 0..40 {
        now = p.disable(1, now);
    }
    assert_eq!(p.disable(1, now), now + MAX_REFUSED_BACKOFF);
    // An exhausted account shows as exhausted.
    p.mark_exhausted(0, t(5000));
    assert_eq!(p.snapshot(t(2000))[0].state(), "exhausted");
}

proptest! {
    /// Whatever sessions are bound, the table stays within its bound and the session
    /// bound last is always remembered, with its account.
    #[test]
    fn bindings_stay_bounded(binds in proptest::collection::vec((0u8..64, 0usize..3), 1..400)) {
        let p = pool(3, 0.95).with_max_sessions(16);
        for (s, a) in &binds {
            p.bind(&format!("s{s}").as_str().into(), *a);
            prop_assert!(p.sessions() <= 16);
        }
        let (s, a) = binds.last().unwrap();
        prop_assert_eq!(p.bound(&format!("s{s}").as_str().into()), Some(*a));
    }

    /// Whatever happened before, `pick` returns an available, non-excluded account, and
    /// the first such account when the session is not bound.
    #[test]
    fn pick_is_fill_first(
        exhausted in proptest::collection::vec(any::<bool>(), 4),
        exclude in proptest::collection::vec(0usize..4, 0..4),
    ) {
        let p = pool(4, 0.95);
        for (i, e) in exhausted.iter().enumerate() {
            if *e {
                p.mark_exhausted(i, t(100));
            }
        }
        let expected = (0..4).find(|i| !exhausted[*i] && !exclude.contains(i));
        prop_assert_eq!(p.pick(Some(&"new".into()), &exclude, t(1)), expected);
    }
}

#[test]
fn pools_are_listed_in_configuration_order() {
    // Names whose hashes would scatter them: a map's order is not the file's.
    let names = [
        "zeta", "alpha", "mu", "beta", "omega", "delta", "kappa", "gamma",
    ];
    let text: String = names
        .iter()
        .map(|n| {
            format!(
                "[[providers]]\nname = \"{n}\"\nbase_url = \"http://h/v1\"\n[[providers.accounts]]\nid = \"a\"\napi_key = \"k\"\n"
            )
        })
        .collect();
    let c = Config::from_toml_str(&text, |_| None).unwrap();
    let pools = AccountPools::from_config(&c);
    let listed: Vec<&str> = pools.iter().map(|p| &**p.name()).collect();
    assert_eq!(listed, names);
    assert!(pools.get("mu").is_some());
}

/// Provider `p` with an account of key `k-{id}` for each of `ids`.
fn provider_p(ids: &[&str]) -> Config {
    let accounts: String = ids
        .iter()
        .map(|id| format!("[[providers.accounts]]\nid = \"{id}\"\napi_key = \"k-{id}\"\n"))
        .collect();
    Config::from_toml_str(
        &format!("[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\n{accounts}"),
        |_| None,
    )
    .unwrap()
}

#[test]
fn a_reload_carries_usage_exhaustion_and_bindings_by_account_id() {
    let old = AccountPools::from_config(&provider_p(&["a", "b", "gone"]));
    let p = old.get("p").unwrap();
    p.bind(&"s-a".into(), 0);
    p.bind(&"s-b".into(), 1);
    p.bind(&"s-gone".into(), 2);
    p.mark_exhausted(0, t(100));
    p.note_usage(1, 0.4);

    let new = AccountPools::from_config(&provider_p(&["new", "b", "a"]));
    new.carry_from(&old);
    let p = new.get("p").unwrap();
    assert_eq!(p.bound(&"s-a".into()), Some(2));
    assert_eq!(p.bound(&"s-b".into()), Some(1));
    assert_eq!(p.bound(&"s-gone".into()), None);
    let snap = p.snapshot(t(0));
    assert_eq!(snap[2].exhausted_until, Some(t(100)), "a stays exhausted");
    assert_eq!(snap[1].used, Some(0.4));
    assert_eq!(snap[0].used, None, "a new account starts unused");
    // s-a's account is out: it moves to the first available one, the new account.
    assert_eq!(p.pick(Some(&"s-a".into()), &[], t(0)), Some(0));
}

/// The pools a reload replaced (which requests in flight and their summaries still hold) no
/// longer pick an account the new configuration removed or gave another key.
#[test]
fn replaced_pools_stop_using_removed_and_rekeyed_accounts() {
    let config = |accounts: &[(&str, &str)]| {
        let accounts: String = accounts
            .iter()
            .map(|(id, key)| {
                format!("[[providers.accounts]]\nid = \"{id}\"\napi_key = \"{key}\"\n")
            })
            .collect();
        Config::from_toml_str(
            &format!("[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\n{accounts}"),
            |_| None,
        )
        .unwrap()
    };
    let old = AccountPools::from_config(&config(&[
        ("gone", "k1"),
        ("rekeyed", "k2"),
        ("kept", "k3"),
    ]));
    let p = old.get("p").unwrap();
    p.bind(&"s".into(), 0);
    assert_eq!(p.pick(Some(&"s".into()), &[], t(0)), Some(0));
    let new = AccountPools::from_config(&config(&[("kept", "k3"), ("rekeyed", "k2-new")]));
    new.carry_from(&old);
    old.retire_removed(&new);
    // The session's account is gone: the old pool moves it to the one account it may still use.
    assert_eq!(p.pick(Some(&"s".into()), &[], t(0)), Some(2));
    assert_eq!(p.pick(None, &[2], t(0)), None);
    // The new pools use every account they have.
    let n = new.get("p").unwrap();
    assert_eq!(n.pick(None, &[], t(0)), Some(0));
    assert_eq!(n.pick(None, &[0], t(0)), Some(1));
    // A provider the new configuration lacks: none of its accounts is used any more.
    let without = AccountPools::from_config(
        &Config::from_toml_str(
            "[[providers]]\nname = \"q\"\nbase_url = \"http://h/v1\"\n\
             [[providers.accounts]]\nid = \"kept\"\napi_key = \"k3\"\n",
            |_| None,
        )
        .unwrap(),
    );
    new.retire_removed(&without);
    assert_eq!(n.pick(None, &[], t(0)), None);
}

/// A reload that gives a refused account a new key (the operator's fix) lets it be tried at
/// once; an account whose key is unchanged waits out its back-off, and its usage carries over
/// whatever its key.
#[test]
fn a_new_key_ends_the_refusal_back_off() {
    let config = |rekeyed: &str| {
        Config::from_toml_str(
            &format!(
                "[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\n\
                 [[providers.accounts]]\nid = \"kept\"\napi_key = \"k1\"\n\
                 [[providers.accounts]]\nid = \"rekeyed\"\napi_key = \"{rekeyed}\"\n"
            ),
            |_| None,
        )
        .unwrap()
    };
    let old = AccountPools::from_config(&config("wrong"));
    let p = old.get("p").unwrap();
    p.disable(0, t(0));
    p.disable(1, t(0));
    p.note_usage(1, 0.4);
    let new = AccountPools::from_config(&config("right"));
    new.carry_from(&old);
    let n = new.get("p").unwrap();
    let snap = n.snapshot(t(1));
    assert!(snap[0].disabled_until.is_some(), "kept: {:?}", snap[0]);
    assert_eq!(snap[1].disabled_until, None, "rekeyed: {:?}", snap[1]);
    assert_eq!(snap[1].used, Some(0.4));
    assert_eq!(n.pick(None, &[], t(1)), Some(1));
}

/// The usage gauge of an account a reload removed reads `NaN` (no threshold matches it); a
/// kept account's keeps its reading.
#[test]
fn a_removed_account_s_usage_gauge_is_forgotten() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let old = AccountPools::from_config(&provider_p(&["gone", "kept"]));
    let new = AccountPools::from_config(&provider_p(&["kept"]));
    metrics::with_local_recorder(&recorder, || {
        for account in &old.get("p").unwrap().accounts {
            account.metrics.set_used(0.96);
        }
        new.carry_from(&old);
        old.retire_removed(&new);
    });
    let page = handle.render();
    let gauge = |id: &str| {
        page.lines()
            .find(|l| {
                l.starts_with("context_relay_gateway_account_used_ratio{")
                    && l.contains(&format!("account=\"{id}\""))
            })
            .unwrap_or_else(|| panic!("no gauge of {id} in {page}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(gauge("gone"), "NaN");
    assert_eq!(gauge("kept"), "0.96");
}

/// Login services over a memory store, carrying `carried` from before a reload.
fn login_services(carried: Vec<Arc<crate::login::Login>>) -> LoginServices {
    LoginServices {
        store: Arc::new(context_relay_store::MemoryStore::new()),
        client: crate::upstream::Upstream::with_limits(crate::upstream::UpstreamLimits::default())
            .unwrap()
            .client(),
        carried,
        tasks: context_relay_tower::Background::new(),
    }
}

#[tokio::test]
async fn a_reload_keeps_each_unchanged_login_and_makes_a_changed_one_anew() {
    use context_relay_sim::{SimLogin, SimProvider};
    let sim = SimProvider::builder()
        .login("a", SimLogin::Codex)
        .login("b", SimLogin::Codex)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, id: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, sim.login_file(id).unwrap().to_string()).unwrap();
        path
    };
    let (a, b) = (write("a.json", "a"), write("b.json", "b"));
    let config = |b: &std::path::Path| {
        let text = format!(
            "[[providers]]\nname = \"chatgpt\"\nbase_url = \"{}\"\nauth = \"chatgpt\"\n\
             token_url = \"{}\"\n[[providers.accounts]]\nid = \"a\"\ncredentials = \"{}\"\n\
             [[providers.accounts]]\nid = \"b\"\ncredentials = \"{}\"\n",
            sim.base_url(),
            sim.token_url(SimLogin::Codex),
            a.display(),
            b.display()
        );
        Config::from_toml_str(&text, |_| None).unwrap()
    };
    let old = AccountPools::new(&config(&b), Some(&login_services(Vec::new())));
    assert_eq!(old.logins().len(), 2);
    // The reloaded file moves b's login to another credential file.
    let moved = write("b-moved.json", "b");
    let new = AccountPools::new(&config(&moved), Some(&login_services(old.logins())));
    let (before, after) = (old.logins(), new.logins());
    assert!(
        Arc::ptr_eq(&before[0], &after[0]),
        "a is unchanged: its login, tokens and refresh state are kept"
    );
    assert!(
        !Arc::ptr_eq(&before[1], &after[1]),
        "b reads another file: a login of its own"
    );
}

#[tokio::test]
async fn a_reload_starts_a_refused_login_afresh_once_its_file_holds_a_new_login() {
    use context_relay_sim::{SimLogin, SimProvider};
    let sim = SimProvider::builder()
        .login("a", SimLogin::Claude)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.json");
    let write = |file: serde_json::Value| std::fs::write(&path, file.to_string()).unwrap();
    write(sim.login_file_expiring("a", 0).unwrap());
    let config = || {
        let text = format!(
            "[[providers]]\nname = \"claude\"\napi = \"anthropic\"\nbase_url = \"{}\"\n\
             auth = \"claude-oauth\"\ntoken_url = \"{}\"\n[[providers.accounts]]\nid = \"a\"\n\
             credentials = \"{}\"\n",
            sim.base_url(),
            sim.token_url(SimLogin::Claude),
            path.display()
        );
        Config::from_toml_str(&text, |_| None).unwrap()
    };
    let old = AccountPools::new(&config(), Some(&login_services(Vec::new())));
    sim.revoke("a");
    let refused = old.logins()[0].issue(SystemTime::now()).await;
    assert!(
        matches!(refused, Err(crate::login::Unusable::Refused(_))),
        "{refused:?}"
    );
    // A reload with the file unchanged keeps the refused login.
    let same = AccountPools::new(&config(), Some(&login_services(old.logins())));
    assert!(Arc::ptr_eq(&old.logins()[0], &same.logins()[0]));
    // Someone logs in again into the same file: the reload starts the login afresh.
    write(sim.login_file("a").unwrap());
    let new = AccountPools::new(&config(), Some(&login_services(old.logins())));
    assert!(!Arc::ptr_eq(&old.logins()[0], &new.logins()[0]));
    assert!(new.logins()[0].issue(SystemTime::now()).await.is_ok());
}
