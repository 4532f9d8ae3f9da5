//! The console in a real browser: headless Chromium (Debian's `chromium`, driven through
//! `chromedriver`) against a gateway over the simulated provider. It signs in with the admin
//! token, sees the accounts in configuration order, watches a Codex session write its
//! handoff and rotate (the switch, the handoff and the usage appear live), views a Claude
//! session's handoff and deletes it, follows the gateway through a restart (the new process's
//! activity, numbered from 1 again, replaces the old), and saves screenshots (laptop and phone widths) under
//! the test's output folder (`CARGO_TARGET_TMPDIR/console/`).

mod webdriver;

use context_relay_gateway::Gateway;
use context_relay_testkit::conversation::{Client, Conversation, handoff_ready};
use context_relay_testkit::harness::{ADMIN_TOKEN, Harness, MEMORY, config};
use http::Request;
use http_body_util::{BodyExt, Full};
use webdriver::{Browser, Driver};

/// Waits until `css` is on the page and its text holds every one of `words`.
async fn shows(browser: &Browser<'_>, css: &str, words: &[&str]) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let element = browser.must(css).await;
        let text = browser.text(&element).await;
        if words.iter().all(|w| text.contains(w)) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{css} reads {text:?}, without all of {words:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_a_rotation_live_and_deletes_a_handoff() {
    let mut h = Harness::start(1, MEMORY, context_relay_sim::SimProvider::builder()).await;
    let url = h.gateways[0].1.url();
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&out).unwrap();
    let profile = tempfile::tempdir().unwrap();

    // No page and no data without the token.
    for path in [
        "/admin/console.js",
        "/admin/usage",
        "/admin/events",
        "/admin/accounts",
    ] {
        let req = Request::get(format!("{url}{path}"))
            .body(Full::default())
            .unwrap();
        let res = h.client.request(req).await.unwrap();
        assert_eq!(res.status(), 401, "{path}");
        res.into_body().collect().await.unwrap();
    }

    let driver = Driver::start().await;
    let browser = driver.session(profile.path()).await;
    browser.go(&format!("{url}/admin/")).await;
    let token = browser.must("#token").await;
    assert_eq!(
        browser.count("#accounts").await,
        0,
        "the console is behind the login"
    );
    // A wrong token is refused.
    browser.type_into(&token, "not-the-token").await;
    browser.click(&browser.must("#sign-in").await).await;
    shows(&browser, "p.error", &["not the admin token"]).await;
    let token = browser.must("#token").await;
    browser.type_into(&token, ADMIN_TOKEN).await;
    browser.click(&browser.must("#sign-in").await).await;

    // The accounts, per provider, in configuration order.
    browser.must("#accounts tr[data-account='acct-z']").await;
    let order = browser
        .eval("return [...document.querySelectorAll('#accounts tr[data-account]')].map(r => r.dataset.account)")
        .await;
    assert_eq!(
        order,
        serde_json::json!([
            "acct-a",
            "acct-b",
            "acct-c",
            "acct-x",
            "acct-y",
            "acct-z",
            "acct-dead"
        ])
    );
    shows(&browser, "#live", &["live"]).await;

    // A Codex session: three turns on acct-a write a handoff, then acct-a is used up.
    let mut codex = Conversation::new(Client::Codex, "browser-codex");
    handoff_ready(&h, &mut codex, "browser-codex").await;
    shows(
        &browser,
        "#handoffs tr[data-session='browser-codex']",
        &["generated", "codex/acct-a"],
    )
    .await;
    shows(
        &browser,
        "#activity li[data-event='generated']",
        &["browser-codex", "acct-a"],
    )
    .await;
    // The next turn lands on acct-b with the handoff.
    let (status, acted, _) = codex.turn(&h, 0).await;
    assert_eq!(status, 200);
    assert!(acted.unwrap_or_default().contains("injected"));
    let switch = shows(
        &browser,
        "#activity li[data-event='switch']",
        &["acct-a → acct-b", "injected"],
    )
    .await;
    assert!(switch.contains("browser-codex"), "{switch}");
    shows(
        &browser,
        "#activity li[data-event='exhausted']",
        &["acct-a", "429"],
    )
    .await;
    shows(
        &browser,
        "#accounts tr[data-account='acct-a']",
        &["exhausted"],
    )
    .await;
    shows(&browser, "#accounts tr[data-account='acct-b']", &["1"]).await;
    // The handoff was consumed by the switch.
    browser
        .gone("#handoffs tr[data-session='browser-codex']")
        .await;
    // Usage: client traffic on both accounts, and the summary call on acct-a.
    shows(
        &browser,
        "#usage tr[data-account='acct-b'][data-kind='client']",
        &["gpt-5.5"],
    )
    .await;
    shows(
        &browser,
        "#usage tr[data-account='acct-a'][data-kind='summary']",
        &["summary"],
    )
    .await;

    // A Claude session's handoff: viewed, then deleted from the page.
    let mut claude = Conversation::new(Client::Claude, "browser-claude");
    for _ in 0..3 {
        assert_eq!(claude.turn(&h, 0).await.0, 200);
    }
    h.idle().await;
    let row = "#handoffs tr[data-session='browser-claude']";
    shows(&browser, row, &["generated", "anthropic/acct-x"]).await;
    browser
        .click(&browser.must(&format!("{row} button.view")).await)
        .await;
    shows(
        &browser,
        "#handoff-view",
        &["Adding a --json flag", "src/cli.rs"],
    )
    .await;
    std::fs::write(out.join("console-handoff.png"), browser.screenshot().await).unwrap();
    browser
        .click(&browser.must("#handoff-view button.close").await)
        .await;
    let delete = format!("{row} button.delete");
    browser.click_on(&delete).await;
    shows(&browser, &delete, &["Confirm"]).await;
    // The page rebuilds its tables on every refresh (every 2 s): the confirmation survives one.
    browser.eval("return refresh().then(() => true)").await;
    shows(&browser, &delete, &["Confirm"]).await;
    browser.click_on(&delete).await;
    browser.gone(row).await;
    assert_eq!(
        h.handoffs("browser-claude").await,
        0,
        "deleted from the store"
    );

    // The gateway restarts: the page reconnects and shows the new process's activity, which
    // numbers its entries from 1 again (the page kept the dead process's entries and dropped
    // every new one as older than the last it had shown).
    let addr = h.gateways[0].1.addr();
    let (_, server) = h.gateways.remove(0);
    server.shutdown().await.expect("graceful shutdown");
    shows(&browser, "#live", &["reconnecting"]).await;
    let gateway = Gateway::connect(config(&h.sim.base_url(), MEMORY))
        .await
        .expect("gateway");
    let server = gateway.spawn(addr).await.expect("the same address again");
    h.gateways.push((gateway, server));
    shows(&browser, "#live", &["live"]).await;
    browser.gone("#activity li[data-event='switch']").await;
    // acct-a is still used up at the provider: the new process learns it from a 429.
    let mut after = Conversation::new(Client::Codex, "browser-after");
    assert_eq!(after.turn(&h, 0).await.0, 200);
    let req = Request::get(h.url(0, "/admin/activity"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .body(Full::default())
        .unwrap();
    let res = h.client.request(req).await.unwrap();
    let page: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let mut expected: Vec<u64> = page["activity"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    expected.sort_unstable();
    assert!(!expected.is_empty(), "{page}");
    shows(
        &browser,
        "#activity li[data-event='exhausted']",
        &["acct-a"],
    )
    .await;
    let shown = browser
        .eval("return [...document.querySelectorAll('#activity li')].map(li => +li.dataset.seq).sort((a, b) => a - b)")
        .await;
    assert_eq!(shown, serde_json::json!(expected));

    // Screenshots: a laptop and a phone.
    let laptop = browser.screenshot().await;
    assert!(laptop.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(out.join("console.png"), laptop).unwrap();
    browser.window(390, 844).await;
    let overflow = browser
        .eval("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .await;
    assert!(
        overflow.as_i64().unwrap_or(i64::MAX) <= 0,
        "the page scrolls sideways on a phone by {overflow} px"
    );
    std::fs::write(out.join("console-phone.png"), browser.screenshot().await).unwrap();
    eprintln!("screenshots in {}", out.display());
    browser.quit().await;
}
