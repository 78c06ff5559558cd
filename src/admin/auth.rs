//! Who may use the admin UI: the operators' token (`ADMIN_TOKEN`, compared in constant time),
//! the session cookie it buys (signed, `HttpOnly`, `SameSite=Strict`, `Secure` with
//! `ADMIN_COOKIE_SECURE`), the CSRF token every POST carries, and the failed-login limit.
//!
//! Sessions are stateless: the cookie is `<expires>.<nonce>.<HMAC-SHA256(token, …)>`, so
//! several admin processes (or a restarted one) accept each other's sessions, and changing
//! `ADMIN_TOKEN` ends every session. A session's CSRF token is an HMAC of its nonce.

use std::{
    collections::{HashMap, VecDeque},
    net::IpAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::{config::ConfigError, domain::SecretRef};

/// The shortest token `mail-worker admin` accepts, in characters.
pub(crate) const MIN_TOKEN_CHARS: usize = 16;
/// How long a session lasts after login: 8 hours.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// The session cookie's name.
pub const SESSION_COOKIE: &str = "mw_admin";
/// The login form's own cookie (its CSRF token is bound to it).
pub const LOGIN_COOKIE: &str = "mw_admin_login";
/// Failed logins allowed per client address within [`LOGIN_WINDOW`]; past them every login
/// from that address is refused (429) until the window has passed.
pub const MAX_FAILED_LOGINS: usize = 5;
/// The failed-login window: 60 s.
pub(crate) const LOGIN_WINDOW: Duration = Duration::from_secs(60);

type HmacSha256 = Hmac<Sha256>;

/// The resolved `ADMIN_TOKEN`.
pub struct AdminToken(SecretString);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

fn token_error(problem: String) -> ConfigError {
    ConfigError {
        var: "ADMIN_TOKEN",
        value: "***".into(),
        problem,
    }
}

impl AdminToken {
    /// Resolves `ADMIN_TOKEN` (`env:`/`file:` references included) and refuses an unset,
    /// empty or short one, naming the variable (never the value).
    ///
    /// # Errors
    /// A [`ConfigError`] for `ADMIN_TOKEN`.
    pub fn resolve(token: Option<&SecretRef>) -> Result<Self, ConfigError> {
        let Some(token) = token else {
            return Err(ConfigError {
                value: String::new(), // unset: nothing to show
                ..token_error(format!(
                    "must be set for `mail-worker admin`: a random value of at least {MIN_TOKEN_CHARS} characters, or an env:NAME / file:/path reference to one"
                ))
            });
        };
        let value = token
            .resolve()
            .map_err(|e| token_error(format!("{} ({e})", token.describe())))?;
        let chars = value.expose_secret().trim().chars().count();
        if chars < MIN_TOKEN_CHARS {
            return Err(token_error(format!(
                "{} is {chars} characters long; it must have at least {MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 24`)",
                token.describe()
            )));
        }
        Ok(Self(SecretString::from(
            value.expose_secret().trim().to_owned(),
        )))
    }

    /// Whether `given` is the token, compared in constant time (its length aside).
    pub(crate) fn matches(&self, given: &str) -> bool {
        self.0
            .expose_secret()
            .as_bytes()
            .ct_eq(given.trim().as_bytes())
            .into()
    }

    fn mac(&self, parts: &[&str]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(self.0.expose_secret().as_bytes())
            .expect("HMAC takes a key of any length");
        for part in parts {
            mac.update(part.as_bytes());
            mac.update(b"\x1f");
        }
        mac
    }

    fn sign(&self, parts: &[&str]) -> String {
        hex(&self.mac(parts).finalize().into_bytes())
    }

    fn verify(&self, parts: &[&str], signature: &str) -> bool {
        let Some(bytes) = unhex(signature) else {
            return false;
        };
        self.mac(parts).verify_slice(&bytes).is_ok()
    }

    /// A new session's cookie value, valid until `now + SESSION_TTL`.
    pub(crate) fn new_session(&self, now: chrono::DateTime<chrono::Utc>) -> String {
        let expires = (now.timestamp() + SESSION_TTL.as_secs() as i64).to_string();
        let nonce = nonce();
        let mac = self.sign(&["session", &expires, &nonce]);
        format!("{expires}.{nonce}.{mac}")
    }

    /// The session of a cookie value, if it is ours and not expired.
    pub(crate) fn session(
        &self,
        cookie: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<Session> {
        let mut parts = cookie.split('.');
        let (expires, nonce, mac) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !self.verify(&["session", expires, nonce], mac) {
            return None;
        }
        let expires: i64 = expires.parse().ok()?;
        (expires > now.timestamp()).then(|| Session {
            csrf: self.sign(&["csrf", nonce]),
        })
    }

    /// A login form's cookie value and the CSRF token its form carries.
    pub(crate) fn new_login(&self) -> (String, String) {
        let nonce = nonce();
        let csrf = self.sign(&["login", &nonce]);
        (nonce, csrf)
    }

    /// Whether `csrf` belongs to the login cookie `nonce`.
    pub(crate) fn login_csrf_ok(&self, nonce: &str, csrf: &str) -> bool {
        self.verify(&["login", nonce], csrf)
    }
}

/// A valid session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    /// The CSRF token its forms carry.
    pub csrf: String,
}

impl Session {
    /// Whether a POST's `csrf` field is this session's, compared in constant time.
    pub(crate) fn csrf_ok(&self, given: Option<&str>) -> bool {
        given.is_some_and(|g| bool::from(self.csrf.as_bytes().ct_eq(g.as_bytes())))
    }
}

/// The `Set-Cookie` value of a cookie: `HttpOnly`, `SameSite=Strict`, `Path=/`, `Secure`
/// when `secure`; `max_age` 0 deletes it.
pub(crate) fn set_cookie(name: &str, value: &str, max_age: Duration, secure: bool) -> String {
    format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        max_age.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The value of cookie `name` in a `Cookie` header.
pub(crate) fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// Failed logins per client address in the last [`LOGIN_WINDOW`].
#[derive(Debug, Default)]
pub struct LoginThrottle {
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

impl LoginThrottle {
    /// `Some(wait)` when `client` has used up its failed logins: how long until it may try.
    pub(crate) fn blocked(&self, client: IpAddr, now: Instant) -> Option<Duration> {
        let mut failures = self.failures.lock().ok()?;
        let list = failures.get_mut(&client)?;
        while list
            .front()
            .is_some_and(|t| now.duration_since(*t) >= LOGIN_WINDOW)
        {
            list.pop_front();
        }
        if list.len() < MAX_FAILED_LOGINS {
            return None;
        }
        list.front()
            .map(|first| LOGIN_WINDOW.saturating_sub(now.duration_since(*first)))
    }

    /// Counts a failed login of `client`; returns its failures in the window.
    pub(crate) fn failed(&self, client: IpAddr, now: Instant) -> usize {
        let Ok(mut failures) = self.failures.lock() else {
            return 0;
        };
        // Forget addresses whose window has passed, so the map cannot grow without bound.
        failures.retain(|_, list| {
            list.back()
                .is_some_and(|t| now.duration_since(*t) < LOGIN_WINDOW)
        });
        let list = failures.entry(client).or_default();
        list.push_back(now);
        list.len()
    }
}

fn nonce() -> String {
    let bytes: [u8; 16] = rand::random();
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> AdminToken {
        AdminToken::resolve(Some(&SecretRef::new("0123456789abcdef-admin"))).unwrap()
    }

    #[test]
    fn short_empty_and_unset_tokens_are_refused_naming_the_variable() {
        for bad in [None, Some("short"), Some("env:MW_ADMIN_TOKEN_SURELY_UNSET")] {
            let r = bad.map(SecretRef::new);
            let err = AdminToken::resolve(r.as_ref()).unwrap_err();
            assert_eq!(err.var, "ADMIN_TOKEN");
            assert!(err.to_string().starts_with("ADMIN_TOKEN"), "{err}");
            let shown = if bad.is_none() { "" } else { "***" };
            assert_eq!(
                err.value, shown,
                "the value is never shown (unset: nothing)"
            );
        }
        let err = AdminToken::resolve(Some(&SecretRef::new("fifteen-chars!!"))).unwrap_err();
        assert!(err.problem.contains("15 characters"), "{err}");
    }

    #[test]
    fn sessions_verify_expire_and_refuse_tampering() {
        let t = token();
        let now = chrono::Utc::now();
        let cookie = t.new_session(now);
        let session = t.session(&cookie, now).expect("a fresh session");
        assert_eq!(session.csrf.len(), 64);
        assert!(session.csrf_ok(Some(&session.csrf)));
        assert!(!session.csrf_ok(Some("00")) && !session.csrf_ok(None));
        let later = now + chrono::Duration::seconds(SESSION_TTL.as_secs() as i64 + 1);
        assert_eq!(t.session(&cookie, later), None, "expired");
        let mut forged = cookie.clone();
        forged.replace_range(0..1, "9");
        assert_eq!(t.session(&forged, now), None, "expiry changed");
        let other = AdminToken::resolve(Some(&SecretRef::new("another-token-0123456"))).unwrap();
        assert_eq!(other.session(&cookie, now), None, "another token");
        assert!(t.matches("0123456789abcdef-admin") && !t.matches("0123456789abcdef-admiN"));
    }

    #[test]
    fn failed_logins_block_an_address_for_the_window() {
        let throttle = LoginThrottle::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let t0 = Instant::now();
        for n in 1..=MAX_FAILED_LOGINS {
            assert_eq!(throttle.blocked(ip, t0), None);
            assert_eq!(throttle.failed(ip, t0), n);
        }
        assert_eq!(throttle.blocked(ip, t0), Some(LOGIN_WINDOW));
        assert_eq!(throttle.blocked("127.0.0.2".parse().unwrap(), t0), None);
        assert_eq!(throttle.blocked(ip, t0 + LOGIN_WINDOW), None);
    }
}
