use std::path::PathBuf;

use super::*;

pub(super) const MINIMAL: &str = r#"
[[providers]]
name = "codex"
base_url = "http://127.0.0.1:9/v1"
  [[providers.accounts]]
  id = "a"
  api_key = "k-a"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
"#;

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(text, |name| (name == "KEY_B").then(|| "k-b".to_owned()))
}

fn err(text: &str) -> String {
    load(text).expect_err("config must be rejected").to_string()
}

#[test]
fn defaults() {
    let c = load(MINIMAL).unwrap();
    assert_eq!(c.listen, "127.0.0.1:4000".parse().unwrap());
    assert_eq!(c.admin_token, None);
    assert_eq!(c.max_request_bytes, 8 * 1024 * 1024);
    assert_eq!(c.store, StoreConfig::default());
    assert_eq!(c.store.backend, StoreBackend::Redb);
    assert_eq!(c.store.path, PathBuf::from("context-relay.redb"));
    let p = &c.providers[0];
    assert_eq!(p.auth, AuthScheme::Bearer);
    assert_eq!(p.quota, QuotaFormat::Auto);
    assert_eq!(p.rotate_at, 0.95);
    assert!(!p.summary_stream);
    assert_eq!(c.combos[0].strategy, Strategy::ContextRelay);
    assert_eq!(c.relay, RelayOverrides::default());
    assert!(c.relay_enabled);
    let off = load(&format!("relay_enabled = false\n{MINIMAL}")).unwrap();
    assert!(!off.relay_enabled);
    let (configs, warnings) = c.relay_settings();
    assert!(warnings.is_empty());
    assert_eq!(configs.for_combo("codex-relay").handoff_providers, ["*"]);
}

#[test]
fn a_short_admin_token_or_one_a_client_also_uses_is_warned_about() {
    let with = |token: &str| {
        let text = format!(
            "admin_token = \"{token}\"\n[[clients]]\nname = \"alice\"\nkey = \"alice-key-0123456789\"\n{MINIMAL}"
        );
        load(&text).unwrap().warnings()
    };
    assert!(with("a-long-random-admin-token-0123456789").is_empty());
    let short = with("a");
    assert!(
        short.iter().any(|w| w.contains("1 characters long")),
        "{short:?}"
    );
    let shared = with("alice-key-0123456789");
    assert!(
        shared.iter().any(|w| w.contains("key of client \"alice\"")),
        "{shared:?}"
    );
}

#[test]
fn a_configuration_without_providers_is_warned_about() {
    let empty = load("").unwrap().warnings();
    assert!(
        empty.iter().any(|w| w.contains("no [[providers]]")),
        "{empty:?}"
    );
    let minimal = load(MINIMAL).unwrap().warnings();
    assert!(
        !minimal.iter().any(|w| w.contains("no [[providers]]")),
        "{minimal:?}"
    );
}

#[test]
fn relay_warnings_are_reported_once_per_level() {
    let text = format!(
        "[relay]\nhandoff_threshold = 1.5\n{MINIMAL}\n  [combos.relay]\nmax_messages_for_summary = 1000\n"
    );
    let (configs, warnings) = load(&text).unwrap().relay_settings();
    let fields: Vec<(&str, &str)> = warnings
        .iter()
        .map(|(f, w)| (f.as_str(), w.field))
        .collect();
    assert_eq!(
        fields,
        [
            ("relay", "handoff_threshold"),
            ("combos[\"codex-relay\"].relay", "max_messages_for_summary")
        ]
    );
    assert_eq!(configs.for_combo("codex-relay").handoff_threshold, 0.85);
    assert_eq!(
        configs.for_combo("codex-relay").max_messages_for_summary,
        30
    );
}

#[test]
fn quota_formats_map_to_core_kinds() {
    for (name, kind) in [
        ("auto", QuotaKind::Auto),
        ("codex", QuotaKind::Codex),
        ("openai", QuotaKind::OpenAi),
        ("anthropic", QuotaKind::Anthropic),
        ("ietf", QuotaKind::Ietf),
        ("none", QuotaKind::None),
    ] {
        let text = MINIMAL.replace(
            "name = \"codex\"\n",
            &format!("name = \"codex\"\nquota = \"{name}\"\n"),
        );
        assert_eq!(
            load(&text).unwrap().providers[0].quota.kind(),
            kind,
            "{name}"
        );
        // The configuration names are the core names.
        assert_eq!(kind.as_str(), name);
    }
}

#[test]
fn provider_api() {
    assert_eq!(
        load(MINIMAL).unwrap().providers[0].api,
        ProviderApi::Passthrough
    );
    let with = |v: &str| {
        MINIMAL.replace(
            "name = \"codex\"\n",
            &format!("name = \"codex\"\napi = \"{v}\"\n"),
        )
    };
    assert_eq!(
        load(&with("anthropic")).unwrap().providers[0].api,
        ProviderApi::Anthropic
    );
    assert_eq!(
        load(&with("passthrough")).unwrap().providers[0].api,
        ProviderApi::Passthrough
    );
    assert_eq!(
        load(&with("openai")).unwrap().providers[0].api,
        ProviderApi::Openai
    );
    let err = load(&with("gemini")).unwrap_err().to_string();
    assert!(err.contains("api") && err.contains("gemini"), "{err}");
}

#[test]
fn full_schema_of_the_issue() {
    let text = r#"
listen = "0.0.0.0:4100"
allow_open = true
admin_token = "adm"
[store]
backend = "redis"
url = "redis://127.0.0.1:6379/"
[relay]
handoff_threshold = 0.85
handoff_model = ""
handoff_providers = ["codex"]
max_messages_for_summary = 30
relay_mode = "schema-locked"
ttl_secs = 18000
[[providers]]
name = "codex"
base_url = "https://chatgpt.example/backend/codex"
auth = "bearer"
quota = "codex"
rotate_at = 0.9
summary_stream = true
  [[providers.accounts]]
  id = "acct-a"
  api_key = "sk-a"
  [[providers.accounts]]
  id = "acct-b"
  api_key_env = "KEY_B"
[[providers]]
name = "anthropic"
base_url = "https://api.anthropic.example/v1"
auth = "x-api-key"
quota = "anthropic"
  [[providers.accounts]]
  id = "main"
  api_key = "sk-ant"
[[combos]]
name = "codex-relay"
strategy = "context-relay"
targets = ["codex/gpt-5.5", "anthropic/claude-sonnet-4-5"]
  [combos.relay]
  handoff_threshold = 0.8
[[combos]]
name = "plain"
strategy = "priority"
targets = ["anthropic/claude-opus-4-8"]
"#;
    let c = load(text).unwrap();
    assert_eq!(c.listen.port(), 4100);
    assert_eq!(c.store.backend, StoreBackend::Redis);
    assert_eq!(c.providers[0].accounts[1].api_key.as_deref(), Some("k-b"));
    assert_eq!(c.providers[1].auth, AuthScheme::XApiKey);
    assert_eq!(c.combos[1].strategy, Strategy::Priority);
    let relay = c.relay_configs();
    assert_eq!(relay[0].1.handoff_threshold, 0.8);
    assert_eq!(relay[1].1.handoff_threshold, 0.85);
    assert!(relay.iter().all(|(_, _, w)| w.is_empty()));
    // Keys are never printed by Debug.
    assert!(!format!("{c:?}").contains("sk-a"));
    let with_userinfo =
        load(&MINIMAL.replace("http://127.0.0.1:9/v1", "https://u:pw-9@h/v1")).unwrap();
    assert!(!format!("{with_userinfo:?}").contains("pw-9"));
}

#[test]
fn unknown_keys_are_rejected_everywhere() {
    assert!(err(&format!("{MINIMAL}\nlisten_addr = \"x\"")).contains("listen_addr"));
    let e = err(&MINIMAL.replace(
        "name = \"codex\"\n",
        "name = \"codex\"\nrotate_after = 0.5\n",
    ));
    assert!(e.contains("rotate_after"), "{e}");
    let e = err(&MINIMAL.replace("api_key = \"k-a\"", "api_key = \"k-a\"\nkey = 1"));
    assert!(e.contains("key"), "{e}");
    let e = err(&format!("{MINIMAL}\n[relay]\nhandoff_treshold = 0.8\n"));
    assert!(e.contains("handoff_treshold"), "{e}");
    let e = err(&format!("{MINIMAL}\n[store]\nbackend = \"sqlite\"\n"));
    assert!(e.contains("sqlite"), "{e}");
}

#[test]
fn missing_env_var_is_named() {
    let e = err(&MINIMAL.replace("api_key = \"k-a\"", "api_key_env = \"CR_NOT_SET\""));
    assert!(e.contains("CR_NOT_SET"), "{e}");
    assert!(e.contains("not set"), "{e}");
    assert!(
        e.contains("providers[\"codex\"].accounts[\"a\"].api_key_env"),
        "{e}"
    );
    let e = Config::from_toml_str(
        &MINIMAL.replace("api_key = \"k-a\"", "api_key_env = \"EMPTY\""),
        |_| Some(" ".into()),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("EMPTY") && e.contains("empty"), "{e}");
}

#[test]
fn key_sources_are_exclusive() {
    let e = err(&MINIMAL.replace(
        "api_key = \"k-a\"",
        "api_key = \"x\"\napi_key_env = \"KEY_B\"",
    ));
    assert!(e.contains("both"), "{e}");
    let e = err(&MINIMAL.replace("api_key = \"k-a\"", ""));
    assert!(e.contains("neither"), "{e}");
    let e = err(&MINIMAL.replace("api_key = \"k-a\"", "api_key = \"bad\\nkey\""));
    assert!(e.contains("api_key") && !e.contains("bad"), "{e}");
    // A space or a tab is a valid header byte, but a key that starts or ends with one is never
    // matched or sent as written (a credential is trimmed): refused at load, for a client's
    // key, an account's and the admin token alike; the admin token is ASCII (read as text).
    for key in ["k-a ", " k-a", "k-a\\t", "k-\u{e4}"] {
        let ascii = key.is_ascii();
        let e = MINIMAL.replace("api_key = \"k-a\"", &format!("api_key = \"{key}\""));
        let client = format!("[[clients]]\nname = \"bob\"\nkey = \"{key}\"\n{MINIMAL}");
        for text in [e, client] {
            match ascii {
                true => {
                    let e = err(&text);
                    assert!(
                        e.contains("key")
                            && e.contains("found a key with a space or a tab at either end"),
                        "{key:?}: {e}"
                    );
                }
                // Matched byte for byte.
                false => drop(load(&text).unwrap()),
            }
        }
        let e = err(&format!("admin_token = \"{key}\"\n{MINIMAL}"));
        assert!(
            e.starts_with("admin_token:") && e.contains("ASCII"),
            "{key:?}: {e}"
        );
    }
    let e = err(&format!("admin_token = \"  \"\n{MINIMAL}"));
    assert!(e.starts_with("admin_token:"), "{e}");
    // Spaces between its characters are a key's own: matched as sent.
    load(&format!(
        "admin_token = \"adm token 0123456789\"\n[[clients]]\nname = \"bob\"\nkey = \"bob key\"\n{}",
        MINIMAL.replace("api_key = \"k-a\"", "api_key = \"k a\"")
    ))
    .unwrap();
    // A top-level pair names its key where a table's pair names the table.
    let e = err(&format!(
        "admin_token = \"t\"\nadmin_token_env = \"KEY_B\"\n{MINIMAL}"
    ));
    assert!(e.starts_with("admin_token: expected either"), "{e}");
}

#[test]
fn unknown_provider_in_target() {
    let e = err(&MINIMAL.replace("codex/gpt-5.5", "codx/gpt-5.5"));
    assert!(e.contains("combos[\"codex-relay\"].targets[0]"), "{e}");
    assert!(e.contains("codx"), "{e}");
    let e = err(&MINIMAL.replace("codex/gpt-5.5", "gpt-5.5"));
    assert!(e.contains("provider/model") && e.contains("gpt-5.5"), "{e}");
}

#[test]
fn duplicates() {
    let twice = format!("{MINIMAL}\n[[combos]]\nname = \"codex-relay\"\ntargets = [\"codex/x\"]\n");
    assert!(err(&twice).contains("\"codex-relay\" twice"));
    let dup_provider = MINIMAL.replace(
            "[[combos]]",
            "[[providers]]\nname = \"Codex\"\nbase_url = \"http://h/v1\"\n[[providers.accounts]]\nid = \"a\"\napi_key = \"k\"\n[[combos]]",
        );
    assert!(err(&dup_provider).contains("twice"));
    let dup_account = MINIMAL.replace(
        "[[combos]]",
        "  [[providers.accounts]]\n  id = \"a\"\n  api_key = \"k2\"\n[[combos]]",
    );
    let e = err(&dup_account);
    assert!(
        e.contains("accounts[\"a\"].id") && e.contains("twice"),
        "{e}"
    );
}

#[test]
fn bad_urls() {
    for bad in ["ftp://h/v1", "not a url", "/v1", "http://h/v1?x=1"] {
        let e = err(&MINIMAL.replace("http://127.0.0.1:9/v1", bad));
        assert!(e.contains("base_url") && e.contains(bad), "{e}");
    }
}

#[test]
fn rotate_at_range() {
    for bad in ["0.0", "-0.5", "1.01", "nan", "inf"] {
        let text = MINIMAL.replace(
            "name = \"codex\"\n",
            &format!("name = \"codex\"\nrotate_at = {bad}\n"),
        );
        let e = err(&text);
        assert!(
            e.contains("rotate_at") && e.contains("(0, 1]"),
            "{bad}: {e}"
        );
    }
    let ok = MINIMAL.replace("name = \"codex\"\n", "name = \"codex\"\nrotate_at = 1.0\n");
    assert_eq!(load(&ok).unwrap().providers[0].rotate_at, 1.0);
}

#[test]
fn store_validation() {
    let e = err(&format!("{MINIMAL}\n[store]\nbackend = \"redis\"\n"));
    assert!(e.contains("store.url"), "{e}");
    let e = err(&format!(
        "{MINIMAL}\n[store]\nbackend = \"redis\"\nurl = \"http://x\"\n"
    ));
    assert!(e.contains("http://x"), "{e}");
    let c = load(&format!("{MINIMAL}\n[store]\nbackend = \"memory\"\n")).unwrap();
    assert_eq!(c.store.backend, StoreBackend::Memory);
}

#[test]
fn no_accounts_and_empty_targets() {
    let e = err(&MINIMAL.replace(
        "  [[providers.accounts]]\n  id = \"a\"\n  api_key = \"k-a\"\n",
        "",
    ));
    assert!(e.contains("accounts") && e.contains("at least one"), "{e}");
    let e = err(&MINIMAL.replace("targets = [\"codex/gpt-5.5\"]", "targets = []"));
    assert!(e.contains("targets"), "{e}");
}

#[test]
fn gemini_auth_scheme() {
    let text = MINIMAL.replace(
        "base_url = \"http://127.0.0.1:9/v1\"",
        "base_url = \"http://127.0.0.1:9/v1beta\"\nauth = \"x-goog-api-key\"",
    );
    assert_eq!(
        load(&text).unwrap().providers[0].auth,
        AuthScheme::XGoogApiKey
    );
    let e = err(&MINIMAL.replace(
        "base_url = \"http://127.0.0.1:9/v1\"",
        "base_url = \"http://127.0.0.1:9/v1\"\nauth = \"query-key\"",
    ));
    assert!(e.contains("x-goog-api-key"), "{e}");
}

#[test]
fn model_switch_is_on_by_default_overridable_per_combo_and_priority_keeps_only_it() {
    let text = format!(
        "{MINIMAL}\n[[combos]]\nname = \"plain\"\nstrategy = \"priority\"\ntargets = [\"codex/gpt-5.5\", \"codex/gpt-5.4-mini\"]\n"
    );
    let c = load(&text).unwrap();
    let relay = c.relay_configs();
    assert!(relay.iter().all(|(_, r, _)| r.model_switch));
    assert!(
        relay[0].1.account_handoff,
        "context-relay: account handoffs too"
    );
    assert!(!relay[1].1.account_handoff, "priority: model switches only");

    let off = load(&format!("[relay]\nmodel_switch = false\n{text}")).unwrap();
    assert!(off.relay_configs().iter().all(|(_, r, _)| !r.model_switch));
    let (settings, _) = off.relay_settings();
    assert!(!settings.default_config().model_switch);
    let back_on = load(&format!(
        "[relay]\nmodel_switch = false\n{MINIMAL}  [combos.relay]\n  model_switch = true\n"
    ))
    .unwrap();
    assert!(back_on.relay_configs()[0].1.model_switch);

    let e = err(&format!("[relay]\nmodel_switch = \"yes\"\n{MINIMAL}"));
    assert!(
        e.contains("line 2") && e.contains("expected a boolean"),
        "{e}"
    );
}

#[test]
fn max_output_tokens_is_optional_and_at_least_one() {
    assert_eq!(load(MINIMAL).unwrap().providers[0].max_output_tokens, None);
    let with = |v: &str| {
        MINIMAL.replace(
            "name = \"codex\"\n",
            &format!("name = \"codex\"\nmax_output_tokens = {v}\n"),
        )
    };
    let c = load(&with("64000")).unwrap();
    assert_eq!(c.providers[0].max_output_tokens, Some(64000));
    let e = err(&with("0"));
    assert!(
        e.contains("providers[\"codex\"].max_output_tokens") && e.contains("at least 1"),
        "{e}"
    );
    assert!(load(&with("-5")).is_err());
    assert!(load(&with("\"many\"")).is_err());
}

#[test]
fn relay_settings_that_leave_the_relay_out_are_warned_about() {
    let warnings = |top: &str, relay: &str| {
        load(&format!("{top}\n[relay]\n{relay}\n{MINIMAL}"))
            .unwrap()
            .warnings()
    };
    assert!(warnings("", "").is_empty());
    assert!(warnings("", "handoff_providers = [\"Codex\", \"*\"]").is_empty());
    let typo = warnings("", "handoff_providers = [\"codx\"]");
    assert!(
        typo.iter()
            .any(|w| w.contains("relay.handoff_providers names \"codx\"")),
        "{typo:?}"
    );
    // A raised request limit leaves the larger bodies unread, unless the relay's follows.
    let raised = warnings("max_request_bytes = 33554432", "");
    assert!(
        raised
            .iter()
            .any(|w| w.contains("max_request_bytes (33554432) is above")),
        "{raised:?}"
    );
    assert!(warnings("max_request_bytes = 33554432", "max_body_bytes = 33554432").is_empty());
    let lowered = warnings("", "max_body_bytes = 1048576");
    assert!(
        lowered
            .iter()
            .any(|w| w.contains("relay.max_body_bytes (1048576) is below")),
        "{lowered:?}"
    );
    let combo = MINIMAL.to_owned() + "  [combos.relay]\n  handoff_providers = [\"claude\"]\n";
    let per_combo = load(&combo).unwrap().warnings();
    assert!(
        per_combo
            .iter()
            .any(|w| w.contains("combos[\"codex-relay\"].relay.handoff_providers")),
        "{per_combo:?}"
    );
}

#[test]
fn a_credential_file_on_a_key_provider_is_told_its_auth_not_asked_for_a_key() {
    let text = MINIMAL.replace("  api_key = \"k-a\"\n", "  credentials = \"auth.json\"\n");
    let e = err(&text);
    assert!(
        e.contains("accounts[\"a\"].credentials") && e.contains("auth = \"chatgpt\""),
        "{e}"
    );
    assert!(!e.contains("neither"), "{e}");
}

#[test]
fn relay_settings_are_not_warned_about_where_no_combo_relays() {
    let text = format!(
        "max_request_bytes = 33554432\n[relay]\nhandoff_providers = [\"codx\"]\n{}  [combos.relay]\n  model_switch = false\n",
        MINIMAL.replace(
            "name = \"codex-relay\"\n",
            "name = \"codex-relay\"\nstrategy = \"priority\"\n"
        )
    );
    let w = load(&text).unwrap().warnings();
    assert!(w.is_empty(), "{w:?}");
    // A priority combo still relays model switches: its settings are read.
    let priority = text.replace("  [combos.relay]\n  model_switch = false\n", "");
    let w = load(&priority).unwrap().warnings();
    assert!(w.iter().any(|l| l.contains("\"codx\"")), "{w:?}");
}

#[test]
fn keys_nothing_reads_are_warned_about() {
    let text =
        format!("[store]\nbackend = \"memory\"\nprefix = \"relay:\"\nwait_replicas = 1\n{MINIMAL}");
    let w = load(&text).unwrap().warnings();
    assert!(
        w.iter()
            .any(|l| l.contains("store.prefix applies to backend = \"redis\" only"))
            && w.iter().any(|l| l.contains("store.wait_replicas")),
        "{w:?}"
    );
    let capped = MINIMAL.replace(
        "name = \"codex\"\n",
        "name = \"codex\"\nmax_output_tokens = 800\n",
    );
    let w = load(&capped).unwrap().warnings();
    assert!(
        w.iter().any(|l| l.contains(
            "providers[\"codex\"].max_output_tokens applies to api = \"anthropic\" only"
        )),
        "{w:?}"
    );
}
