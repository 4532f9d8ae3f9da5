//! Who may use the admin routes and the console: the `admin_token` as a Bearer token, or the
//! console's login cookie.
//!
//! Logging in (`POST /admin/login` with the token) sets `context_relay_console`, an HttpOnly,
//! `SameSite=Strict` cookie valid for [`SESSION`] on `/admin`: its value is an expiry time and
//! an HMAC-SHA256 of it under a key derived from the token, so every replica with the same
//! token accepts it, no token is stored in the browser, and changing the token ends every
//! session. A request authenticated by the cookie that changes something (any method but
//! `GET`/`HEAD`) must also carry `x-context-relay-console: 1`, which a cross-site form cannot
//! send.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderValue, Method, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How long a console login lasts.
pub(crate) const SESSION: Duration = Duration::from_secs(12 * 3600);
/// The login cookie's name.
pub(crate) const COOKIE: &str = "context_relay_console";
/// The header a cookie-authenticated change must carry.
pub(crate) const CONSOLE_HEADER: &str = "x-context-relay-console";

/// The admin credential checks (see the module docs).
#[derive(Clone)]
pub(crate) struct AdminAuth {
    /// SHA-256 of the token: comparing digests in constant time hides the token's length too.
    token_digest: [u8; 32],
    /// The cookie's MAC key.
    cookie_key: [u8; 32],
}

impl std::fmt::Debug for AdminAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminAuth")
    }
}

impl AdminAuth {
    /// The checks for `token`.
    pub(crate) fn new(token: &str) -> Self {
        let mut key = Sha256::new();
        key.update(b"context-relay console session\0");
        key.update(token.as_bytes());
        Self {
            token_digest: Sha256::digest(token.as_bytes()).into(),
            cookie_key: key.finalize().into(),
        }
    }

    /// Whether `candidate` is the token.
    pub(crate) fn is_token(&self, candidate: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(candidate.as_bytes()).into();
        digest.ct_eq(&self.token_digest).into()
    }

    /// Whether a request with `headers` may call an admin route with `method`: the Bearer
    /// token, or a live login cookie (with the console header when it changes something).
    pub(crate) fn allows(&self, method: &Method, headers: &HeaderMap) -> bool {
        if let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
        {
            return self.is_token(token);
        }
        let changes = !matches!(*method, Method::GET | Method::HEAD);
        if changes && headers.get(CONSOLE_HEADER).is_none_or(|v| v != "1") {
            return false;
        }
        self.has_session(headers, SystemTime::now())
    }

    /// Whether `headers` carry a login cookie valid at `now`.
    pub(crate) fn has_session(&self, headers: &HeaderMap, now: SystemTime) -> bool {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .any(|value| self.verify(value, now))
    }

    /// A `set-cookie` value starting a session at `now`; `secure` when the console is reached
    /// over HTTPS.
    pub(crate) fn login_cookie(&self, now: SystemTime, secure: bool) -> Option<HeaderValue> {
        let expires = now.checked_add(SESSION)?.duration_since(UNIX_EPOCH).ok()?;
        let expires = expires.as_secs();
        let value = format!("{expires}.{}", hex(&self.mac(expires)));
        cookie(&value, SESSION.as_secs(), secure)
    }

    /// A `set-cookie` value ending the session.
    pub(crate) fn logout_cookie(secure: bool) -> Option<HeaderValue> {
        cookie("", 0, secure)
    }

    fn mac(&self, expires: u64) -> [u8; 32] {
        // Any key length is accepted: this cannot fail.
        let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.cookie_key) else {
            return [0; 32];
        };
        mac.update(&expires.to_be_bytes());
        mac.finalize().into_bytes().into()
    }

    fn verify(&self, value: &str, now: SystemTime) -> bool {
        let Some((expires, mac)) = value.split_once('.') else {
            return false;
        };
        let Ok(expires) = expires.parse::<u64>() else {
            return false;
        };
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if expires <= now || expires > now + SESSION.as_secs() {
            return false;
        }
        let expected = hex(&self.mac(expires));
        mac.len() == expected.len() && bool::from(mac.as_bytes().ct_eq(expected.as_bytes()))
    }
}

fn cookie(value: &str, max_age: u64, secure: bool) -> Option<HeaderValue> {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/admin; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    ))
    .ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn bearer_token_check() {
        let a = AdminAuth::new("s3cret");
        let get = Method::GET;
        assert!(a.allows(&get, &with("authorization", "Bearer s3cret")));
        assert!(a.allows(&get, &with("authorization", "bearer  s3cret ")));
        assert!(!a.allows(&get, &with("authorization", "Bearer s3cre")));
        assert!(!a.allows(&get, &with("authorization", "Bearer s3cret2")));
        assert!(!a.allows(&get, &with("authorization", "Basic s3cret")));
        assert!(!a.allows(&get, &with("authorization", "s3cret")));
        assert!(!a.allows(&get, &HeaderMap::new()));
    }

    #[test]
    fn a_login_cookie_opens_the_console_until_it_expires() {
        let a = AdminAuth::new("s3cret");
        let now = SystemTime::now();
        let set = a.login_cookie(now, false).unwrap();
        let set = set.to_str().unwrap();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(
            !set.contains("s3cret"),
            "the token never reaches the browser"
        );
        let pair = set.split(';').next().unwrap();
        let mut h = with("cookie", &format!("other=1; {pair}"));
        assert!(a.has_session(&h, now));
        assert!(a.allows(&Method::GET, &h));
        assert!(!a.has_session(&h, now + SESSION + Duration::from_secs(1)));
        // A change needs the console header.
        assert!(!a.allows(&Method::DELETE, &h));
        h.insert(CONSOLE_HEADER, HeaderValue::from_static("1"));
        assert!(a.allows(&Method::DELETE, &h));
        // Another token's cookie, or a forged one, is refused.
        assert!(!AdminAuth::new("other").has_session(&h, now));
        let forged = pair.replace(
            |c: char| c.is_ascii_hexdigit() && c.is_ascii_lowercase(),
            "0",
        );
        assert!(!a.has_session(&with("cookie", &forged), now));
        assert!(!a.has_session(&with("cookie", &format!("{COOKIE}=9999999999999.00")), now));
    }
}
