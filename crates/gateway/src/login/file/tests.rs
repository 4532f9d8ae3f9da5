use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::*;

fn jwt(claims: &Value) -> String {
    format!("e30.{}.c2ln", URL_SAFE_NO_PAD.encode(claims.to_string()))
}

fn codex_file() -> String {
    let auth = json!({"chatgpt_account_id": "ws-1"});
    json!({
        "OPENAI_API_KEY": null,
        "tokens": {
            "id_token": jwt(&json!({"https://api.openai.com/auth": auth})),
            "access_token": jwt(&json!({"exp": 1_800_000_000u64})),
            "refresh_token": "rt-secret-1",
            "account_id": null
        },
        "last_refresh": "2026-01-02T03:04:05.123456Z",
        "agent_identity": null
    })
    .to_string()
}

#[test]
fn codex_files_are_read() {
    let f = parse(&codex_file()).unwrap();
    assert_eq!(f.kind, LoginKind::Codex);
    assert_eq!(f.tokens.refresh.expose(), "rt-secret-1");
    assert_eq!(
        f.tokens.account_id.as_deref(),
        Some("ws-1"),
        "from the id token"
    );
    assert_eq!(
        f.tokens.expires_at.map(to_unix_millis),
        Some(1_800_000_000_000)
    );
    assert_eq!(
        f.tokens.obtained_at.map(to_unix_millis),
        Some(1_767_323_045_123)
    );
}

#[test]
fn claude_files_are_read() {
    let text = r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-a","refreshToken":"sk-ant-ort01-r","expiresAt":1800000000000,"scopes":["user:inference"],"subscriptionType":"max"}}"#;
    let f = parse(text).unwrap();
    assert_eq!(f.kind, LoginKind::Claude);
    assert_eq!(f.tokens.access.expose(), "sk-ant-oat01-a");
    assert_eq!(
        f.tokens.expires_at.map(to_unix_millis),
        Some(1_800_000_000_000)
    );
}

#[test]
fn other_files_get_errors_that_name_keys_never_values() {
    let cases = [
        ("not json sk-live-1", "expected JSON"),
        ("[\"sk-live-1\"]", "found a JSON array"),
        (
            r#"{"OPENAI_API_KEY":"sk-live-1"}"#,
            "holding only an API key",
        ),
        (r#"{"api_key":"sk-live-1"}"#, "keys \"api_key\""),
        (
            r#"{"claudeAiOauth":{"accessToken":"sk-live-1"}}"#,
            "without a non-empty string `claudeAiOauth.refreshToken`",
        ),
        (
            r#"{"tokens":{"access_token":"sk-live-1","refresh_token":"r"}}"#,
            "ChatGPT account id",
        ),
        (
            r#"{"tokens":{"access_token":"sk live-1","refresh_token":"r","account_id":"a"}}"#,
            "`tokens.access_token` to be a token of visible ASCII",
        ),
        ("{}", "an empty JSON object"),
        // A key pasted where a name belongs.
        (
            r#"{"sk-live-1234567890abcdef":"v","tokens":"x"}"#,
            "(a name that looks like a key), \"tokens\"",
        ),
    ];
    for (text, expected) in cases {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(expected), "{text}: {e}");
        assert!(!e.contains("live-1"), "{e}");
    }
}

#[test]
fn writing_back_changes_only_the_tokens() {
    let mut f = parse(&codex_file()).unwrap();
    f.tokens.access = Secret::new("at-2");
    f.tokens.refresh = Secret::new("rt-2");
    f.tokens.obtained_at = Some(from_unix_millis(1_767_400_000_000));
    let text = patched(LoginKind::Codex, Some(&codex_file()), &f.tokens);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["tokens"]["refresh_token"], "rt-2");
    assert_eq!(v["tokens"]["access_token"], "at-2");
    assert_eq!(v["tokens"]["account_id"], "ws-1");
    assert!(v["agent_identity"].is_null() && v.get("agent_identity").is_some());
    assert!(
        v["last_refresh"]
            .as_str()
            .unwrap()
            .starts_with("2026-01-03T")
    );
    assert_eq!(parse(&text).unwrap().tokens.refresh.expose(), "rt-2");

    let claude = r#"{"claudeAiOauth":{"accessToken":"a","refreshToken":"r","expiresAt":1,"scopes":["user:inference"],"subscriptionType":"pro"},"mcpOAuth":{"x":1}}"#;
    let mut t = parse(claude).unwrap().tokens;
    t.refresh = Secret::new("r2");
    t.expires_at = Some(from_unix_millis(5_000));
    let v: Value = serde_json::from_str(&patched(LoginKind::Claude, Some(claude), &t)).unwrap();
    assert_eq!(v["claudeAiOauth"]["refreshToken"], "r2");
    assert_eq!(v["claudeAiOauth"]["expiresAt"], 5_000);
    assert_eq!(v["claudeAiOauth"]["subscriptionType"], "pro");
    assert_eq!(v["mcpOAuth"]["x"], 1);
    // A file gone or damaged meanwhile is written whole.
    let v: Value = serde_json::from_str(&patched(LoginKind::Claude, Some("{"), &t)).unwrap();
    assert_eq!(parse(&v.to_string()).unwrap().tokens.refresh.expose(), "r2");
}

#[test]
fn the_file_is_replaced_atomically_and_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.json");
    fs::write(&path, codex_file()).unwrap();
    let mut t = read(&path).unwrap().tokens;
    t.refresh = Secret::new("rt-3");
    write(&path, LoginKind::Codex, &t).unwrap();
    assert_eq!(read(&path).unwrap().tokens.refresh.expose(), "rt-3");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file left behind");
    // A folder that does not exist: an error, nothing written.
    assert!(write(&dir.path().join("nope/auth.json"), LoginKind::Codex, &t).is_err());
}

#[cfg(unix)]
#[test]
fn a_link_is_written_through_and_the_owner_kept() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.json");
    fs::write(&real, codex_file()).unwrap();
    let link = dir.path().join("auth.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // Another user's file, where this process may give it away (as root, as a gateway run
    // by an operator for users' logins would be); else the process's own.
    let owner = if std::os::unix::fs::chown(&real, Some(4242), Some(4243)).is_ok() {
        (4242, 4243)
    } else {
        let m = fs::metadata(&real).unwrap();
        (m.uid(), m.gid())
    };
    let mut t = read(&link).unwrap().tokens;
    t.refresh = Secret::new("rt-4");
    write(&link, LoginKind::Codex, &t).unwrap();
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(read(&real).unwrap().tokens.refresh.expose(), "rt-4");
    let m = fs::metadata(&real).unwrap();
    assert_eq!((m.uid(), m.gid()), owner);
    // A link to a file that is no credential file of this client is replaced, not followed.
    let other = dir.path().join("other.txt");
    fs::write(&other, "not a login").unwrap();
    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&other, &link).unwrap();
    write(&link, LoginKind::Codex, &t).unwrap();
    assert_eq!(fs::read_to_string(&other).unwrap(), "not a login");
    assert!(
        !fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(read(&link).unwrap().tokens.refresh.expose(), "rt-4");
}
