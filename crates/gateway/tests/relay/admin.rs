//! The admin API over the handoff store: listing and deleting a session's handoffs.

use super::*;

#[tokio::test]
async fn admin_routes_list_and_delete() {
    let env = setup().await;
    cross_threshold(&env, Api::Chat, "client-1", "adm-1").await;
    // The quota is the account's: start over for the second tenant's session.
    env.sim.set_used("acct-a", 0.0);
    cross_threshold(&env, Api::Chat, "client-2", "adm-2").await;

    // Without or with a wrong token: 401.
    let (status, _) = env.admin("GET", "/admin/handoffs", None).await;
    assert_eq!(status, 401);
    let (status, _) = env.admin("GET", "/admin/handoffs", Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, _) = env
        .admin("DELETE", "/admin/handoffs/adm-1", Some("adm-Secret-"))
        .await;
    assert_eq!(status, 401);

    let (status, v) = env
        .admin("GET", "/admin/handoffs?settle=true", Some(ADMIN))
        .await;
    assert_eq!(status, 200);
    let list = v["handoffs"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{v}");
    let h = list.iter().find(|h| h["session"] == "adm-1").unwrap();
    let keys: Vec<&str> = h.as_object().unwrap().keys().map(String::as_str).collect();
    let mut expected = vec![
        "tenant",
        "session",
        "combo",
        "from_provider",
        "from_account",
        "summary",
        "key_decisions",
        "task_progress",
        "active_entities",
        "message_count",
        "model",
        "generated_at",
        "expires_at",
        "kind",
        "size",
    ];
    expected.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, expected);
    assert_eq!(h["combo"], "codex-relay");
    assert_eq!(h["from_provider"], "codex");
    assert_eq!(h["from_account"], "acct-a");
    assert_eq!(h["kind"], "generated");
    assert_eq!(h["summary"], SUMMARY_TEXT);
    assert_eq!(h["key_decisions"][1], "serde for JSON");
    assert_eq!(h["active_entities"][0], "src/cli.rs");
    assert!(
        h["task_progress"]
            .as_str()
            .unwrap()
            .starts_with("done: parser")
    );
    assert!(h["message_count"].as_u64().unwrap() >= 5);
    assert_eq!(h["model"], "gpt-5.5");
    // The bytes of text the handoff carries.
    let text = |k: &str| match &h[k] {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(|s| s.as_str().unwrap_or("").len()).sum(),
        _ => 0,
    };
    let size = [
        "summary",
        "key_decisions",
        "task_progress",
        "active_entities",
    ]
    .iter()
    .map(|k| text(k))
    .sum::<usize>();
    assert_eq!(h["size"].as_u64(), Some(size as u64));
    // Open mode: `k-` and 32 hex digits of the keyed hash of the client's key.
    let tenant = h["tenant"].as_str().unwrap();
    assert!(tenant.starts_with("k-") && tenant.len() == 34, "{tenant}");
    let generated = parse_rfc3339(h["generated_at"].as_str().unwrap());
    let expires = parse_rfc3339(h["expires_at"].as_str().unwrap());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((generated - now).abs() < 3600, "{h}");
    assert!(expires > generated, "{h}");

    // Filters.
    let tenant1 = h["tenant"].as_str().unwrap().to_owned();
    let (_, v) = env
        .admin(
            "GET",
            &format!("/admin/handoffs?tenant={tenant1}"),
            Some(ADMIN),
        )
        .await;
    assert_eq!(v["handoffs"].as_array().unwrap().len(), 1);
    let (_, v) = env
        .admin("GET", "/admin/handoffs?session=adm-2", Some(ADMIN))
        .await;
    assert_eq!(v["handoffs"][0]["session"], "adm-2");
    let (_, v) = env
        .admin("GET", "/admin/handoffs?session=none", Some(ADMIN))
        .await;
    assert_eq!(v, json!({"handoffs": []}));

    // Delete: filters that match nothing, then the session.
    let (status, v) = env
        .admin(
            "DELETE",
            "/admin/handoffs/adm-1?combo=claude-relay",
            Some(ADMIN),
        )
        .await;
    assert_eq!((status, v), (StatusCode::OK, json!({"deleted": 0})));
    let (_, v) = env
        .admin(
            "DELETE",
            "/admin/handoffs/adm-1?tenant=someone-else",
            Some(ADMIN),
        )
        .await;
    assert_eq!(v, json!({"deleted": 0}));
    let (status, v) = env
        .admin("DELETE", "/admin/handoffs/adm-1", Some(ADMIN))
        .await;
    assert_eq!((status, v), (StatusCode::OK, json!({"deleted": 1})));
    let (_, v) = env.admin("GET", "/admin/handoffs", Some(ADMIN)).await;
    assert_eq!(v["handoffs"].as_array().unwrap().len(), 1);
    assert_eq!(v["handoffs"][0]["session"], "adm-2");
    let (_, v) = env
        .admin("DELETE", "/admin/handoffs/adm-1", Some(ADMIN))
        .await;
    assert_eq!(v, json!({"deleted": 0}));
}

#[tokio::test]
async fn admin_routes_are_off_without_a_token() {
    let sim = SimProvider::builder()
        .account("acct-a", "key-a")
        .start()
        .await
        .unwrap();
    let text = config_text(&sim.base_url(), "").replace(&format!("admin_token = \"{ADMIN}\""), "");
    let gateway = Gateway::new(Config::from_toml_str(&text, |_| None).unwrap()).unwrap();
    let env = Env(Harness::serve(sim, gateway).await);
    for (method, path) in [("GET", "/admin/handoffs"), ("DELETE", "/admin/handoffs/s")] {
        for token in [None, Some(ADMIN)] {
            let (status, _) = env.admin(method, path, token).await;
            assert_eq!(status, 404, "{method} {path}");
        }
    }
}

/// Seconds since the epoch of an RFC 3339 UTC time as the admin API writes it.
fn parse_rfc3339(s: &str) -> i64 {
    let ts: jiff::Timestamp = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
    assert!(s.ends_with('Z'), "{s}");
    assert_eq!(s.as_bytes()[10], b'T', "{s}");
    ts.as_second()
}

#[tokio::test]
async fn admin_lists_and_deletes_both_handoff_kinds_of_a_session() {
    let env = setup().await;
    cross_threshold(&env, Api::Chat, "client-1", "adm-both").await;
    let (_, v) = env
        .admin("GET", "/admin/handoffs?settle=true", Some(ADMIN))
        .await;
    assert_eq!(v["handoffs"].as_array().unwrap().len(), 1, "{v}");
    // A model-switch handoff of the same session, beside the account one.
    let store = env.gateway().store();
    let mut model = store.list(None, Some("adm-both")).await.unwrap()[0].clone();
    model.kind = context_relay_core::HandoffKind::ModelSwitch;
    model.handoff.summary = "before the move to another model".into();
    store.upsert(model).await.unwrap();

    let (_, v) = env
        .admin("GET", "/admin/handoffs?session=adm-both", Some(ADMIN))
        .await;
    let mut kinds: Vec<&str> = v["handoffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["kind"].as_str().unwrap())
        .collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["generated", "model-switch"], "{v}");
    let (status, v) = env
        .admin("DELETE", "/admin/handoffs/adm-both", Some(ADMIN))
        .await;
    assert_eq!((status, v), (StatusCode::OK, json!({"deleted": 2})));
    assert!(store.list(None, Some("adm-both")).await.unwrap().is_empty());
}
