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
