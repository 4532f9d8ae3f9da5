use std::path::Path;

use super::*;

const CODEX: &str = r#"{"OPENAI_API_KEY":null,"tokens":{"id_token":null,"access_token":"at-secret-c","refresh_token":"rt-secret-c","account_id":"ws-1"},"last_refresh":"2026-01-02T03:04:05Z"}"#;
const CLAUDE: &str = r#"{"claudeAiOauth":{"accessToken":"at-secret-x","refreshToken":"rt-secret-x","expiresAt":1800000000000,"scopes":["user:inference"],"subscriptionType":"max"}}"#;

/// A config with one provider of `auth` (and `extra` provider keys) whose account `a` has
/// `account` keys.
fn text(auth: &str, extra: &str, account: &str) -> String {
    format!(
        "[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\nauth = \"{auth}\"\n{extra}\n  [[providers.accounts]]\n  id = \"a\"\n  {account}\n"
    )
}

fn load(dir: &Path, text: &str) -> Result<Config, ConfigError> {
    let home = dir.display().to_string();
    Config::from_toml_str(text, move |name| (name == "HOME").then(|| home.clone()))
}

fn err(dir: &Path, text: &str) -> String {
    let e = load(dir, text).expect_err("refused").to_string();
    assert!(!e.contains("secret"), "{e}");
    e
}

#[test]
fn logins_are_read_with_the_clients_defaults() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("auth.json"), CODEX).unwrap();
    std::fs::write(dir.path().join("claude.json"), CLAUDE).unwrap();
    let c = load(
        dir.path(),
        &text("chatgpt", "", "credentials = \"~/auth.json\""),
    )
    .unwrap();
    let p = &c.providers[0];
    assert_eq!(
        (p.token_url(), p.client_id()),
        (login::CODEX_TOKEN_URL, login::CODEX_CLIENT_ID)
    );
    assert_eq!(
        p.accounts[0].credentials.as_deref(),
        Some(dir.path().join("auth.json").as_path())
    );
    assert_eq!(
        p.accounts[0].login.as_ref().map(|l| l.kind),
        Some(LoginKind::Codex)
    );
    assert_eq!(c.logins(), 1);
    let shown = format!("{c:?}");
    assert!(!shown.contains("secret"), "{shown}");

    let path = dir.path().join("claude.json").display().to_string();
    let extra = "token_url = \"http://127.0.0.1:9/v1/oauth/token\"\nclient_id = \"my-client\"";
    let c = load(
        dir.path(),
        &text("claude-oauth", extra, &format!("credentials = {path:?}")),
    )
    .unwrap();
    let p = &c.providers[0];
    assert_eq!(
        (p.token_url(), p.client_id()),
        ("http://127.0.0.1:9/v1/oauth/token", "my-client")
    );
    let c = load(
        dir.path(),
        &text("claude-oauth", "", &format!("credentials = {path:?}")),
    )
    .unwrap();
    assert_eq!(c.providers[0].token_url(), login::CLAUDE_TOKEN_URL);
    assert_eq!(c.providers[0].client_id(), login::CLAUDE_CLIENT_ID);
    // Key providers have neither.
    let keyed = load(dir.path(), &text("bearer", "", "api_key = \"k\"")).unwrap();
    assert_eq!((keyed.providers[0].token_url(), keyed.logins()), ("", 0));
}

#[test]
fn misconfigured_logins_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("auth.json"), CODEX).unwrap();
    std::fs::write(dir.path().join("claude.json"), CLAUDE).unwrap();
    std::fs::write(dir.path().join("other.json"), r#"{"token":"secret-1"}"#).unwrap();
    let at = |f: &str| {
        format!(
            "credentials = {:?}",
            dir.path().join(f).display().to_string()
        )
    };
    let cases = [
        (
            text("chatgpt", "", &at("nope.json")),
            "cannot use the credential file",
        ),
        (text("chatgpt", "", &at("other.json")), "keys \"token\""),
        (
            text("chatgpt", "", &at("claude.json")),
            "expected a Codex CLI auth.json for auth = \"chatgpt\", found a Claude Code .credentials.json",
        ),
        (
            text("claude-oauth", "", &at("auth.json")),
            "expected a Claude Code .credentials.json",
        ),
        (
            text("chatgpt", "", ""),
            "accounts[\"a\"].credentials: expected the path of a Codex CLI auth.json",
        ),
        (
            text(
                "chatgpt",
                "",
                &format!("{}\n  api_key = \"k\"", at("auth.json")),
            ),
            "`api_key`",
        ),
        (
            text(
                "bearer",
                "",
                &format!("api_key = \"k\"\n  {}", at("auth.json")),
            ),
            "credentials on a provider with auth = \"bearer\"",
        ),
        (
            text("bearer", "token_url = \"https://x/t\"", "api_key = \"k\""),
            "providers[\"p\"].token_url",
        ),
        (
            text("chatgpt", "token_url = \"ftp://x/t\"", &at("auth.json")),
            "an absolute http:// or https:// URL",
        ),
        (
            text("chatgpt", "client_id = \" \"", &at("auth.json")),
            "client_id: expected a non-empty OAuth client id",
        ),
    ];
    for (config, expected) in cases {
        let e = err(dir.path(), &config);
        assert!(e.contains(expected), "{expected:?} not in {e}");
    }
    // One login per account: two accounts on one file would kill each other's refresh token.
    let two = format!(
        "{}  [[providers.accounts]]\n  id = \"b\"\n  {}\n",
        text("chatgpt", "", &at("auth.json")),
        at("auth.json")
    );
    assert!(err(dir.path(), &two).contains("no other account uses"));
    // The same file under another name: a hard link, a symbolic link (where the system tells
    // a file by its device and inode).
    #[cfg(unix)]
    {
        std::fs::hard_link(dir.path().join("auth.json"), dir.path().join("hard.json")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("auth.json"), dir.path().join("soft.json"))
            .unwrap();
    }
    let names: &[&str] = if cfg!(unix) {
        &["hard.json", "soft.json"]
    } else {
        &[]
    };
    for other in names {
        let two = format!(
            "{}  [[providers.accounts]]\n  id = \"b\"\n  {}\n",
            text("chatgpt", "", &at("auth.json")),
            at(other)
        );
        assert!(
            err(dir.path(), &two).contains("no other account uses"),
            "{other}"
        );
    }
}

#[test]
fn logins_on_the_memory_store_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("auth.json"), CODEX).unwrap();
    let account = format!("credentials = \"{}/auth.json\"", dir.path().display());
    let logins = text("chatgpt", "", &account);
    let memory = |c: &Config| {
        c.warnings()
            .iter()
            .any(|w| w.contains("backend = \"memory\" with subscription logins"))
    };
    assert!(!memory(&load(dir.path(), &logins).unwrap()));
    let on_memory = format!("[store]\nbackend = \"memory\"\n{logins}");
    assert!(memory(&load(dir.path(), &on_memory).unwrap()));
    let keys = text("bearer", "", "api_key = \"k\"");
    let keys_on_memory = format!("[store]\nbackend = \"memory\"\n{keys}");
    assert!(!memory(&load(dir.path(), &keys_on_memory).unwrap()));
}
