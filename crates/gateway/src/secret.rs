//! Keeping secrets out of logs, errors and `Debug` output.

/// `url` with the password of its user-info replaced by `***`, parsed with a URL parser so
/// that unusual forms (`@` or `/` in the password, IPv6 hosts, fragments) cannot leak it. A
/// lone user name is treated as a password too (`redis://secret@host` authenticates with it).
/// Text that does not parse as a URL is replaced whole.
pub(crate) fn redact_url(url: &str) -> String {
    // A cluster's nodes, comma-separated: each without its password.
    if url.contains(',') {
        return url.split(',').map(redact_url).collect::<Vec<_>>().join(",");
    }
    let Ok(mut parsed) = url::Url::parse(url) else {
        return "<unparsable URL>".to_owned();
    };
    let has_password = parsed.password().is_some();
    let has_user = !parsed.username().is_empty();
    if has_password {
        // Cannot fail for a URL with a host (the only kind that can carry a password).
        let _ = parsed.set_password(Some("***"));
    } else if has_user {
        let _ = parsed.set_username("***");
    }
    let mut out = parsed.to_string();
    // `Url` normalises an empty path to `/`; keep the caller's form for readability.
    if !url.ends_with('/')
        && out.ends_with('/')
        && parsed.path() == "/"
        && parsed.query().is_none()
        && parsed.fragment().is_none()
    {
        out.pop();
    }
    out
}

/// Takes the group's and others' permissions off the file at `path` (a file holding secrets);
/// `true` when it changed anything. A no-op where file modes do not exist.
pub(crate) fn restrict_to_owner(path: &std::path::Path) -> std::io::Result<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o077 == 0 {
            return Ok(false);
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))?;
        Ok(true)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_never_leaks_the_password() {
        for (url, secret) in [
            ("redis://:pw1@h:1/0", "pw1"),
            ("rediss://u:pw2@h/", "pw2"),
            ("redis://pw3@h", "pw3"),
            ("redis://u:p%40w4@h/", "w4"),
            ("redis://u:pw5@[::1]:6379/", "pw5"),
            ("redis://u:pw6@h/0#frag", "pw6"),
            // A cluster's nodes.
            ("redis://:pw7@a:1/,redis://b:2/", "pw7"),
            ("redis://a:1/,redis://:pw8@b:2/", "pw8"),
        ] {
            let r = redact_url(url);
            assert!(!r.contains(secret), "{r}");
            assert!(r.contains("***@"), "{r}");
        }
        assert_eq!(redact_url("not a url"), "<unparsable URL>");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }

    #[cfg(unix)]
    #[test]
    fn files_with_secrets_become_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.redb");
        std::fs::write(&path, b"x").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(restrict_to_owner(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!restrict_to_owner(&path).unwrap(), "already private");
        assert!(restrict_to_owner(&dir.path().join("nope")).is_err());
    }
}

#[cfg(test)]
mod examples {
    #[test]
    fn module_example() {
        use crate::secret::redact_url;
        assert_eq!(
            redact_url("rediss://user:pw@cache:6380/0"),
            "rediss://user:***@cache:6380/0"
        );
        assert_eq!(
            redact_url("redis://:s3cret@cache:6379/0"),
            "redis://:***@cache:6379/0"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
    }
}
