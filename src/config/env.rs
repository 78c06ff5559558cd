//! The variables, read through a lookup (the process environment, or a map in tests), and the
//! URL rules the address settings share; each error names the variable.

use std::cell::RefCell;

use url::Url;

use super::ConfigError;
use crate::domain::redact_raw;

/// `raw` as a URL of one of `schemes`, or what is wrong with it.
pub(crate) fn parse_url(raw: &str, schemes: &[&str]) -> Result<Url, String> {
    // A password with `#`, `/` or `?` in it ends the authority early: the server is then
    // taken from the password (or the URL refused for its "port"), and the `@` lands later.
    const ENCODE: &str = "a `#`, `/`, `?` or `@` in the user or password must be \
                          percent-encoded (%23, %2F, %3F, %40)";
    let url = Url::parse(raw).map_err(|e| {
        if raw.contains('@') {
            format!("is not a URL: {ENCODE} (the parser said: {e})")
        } else {
            format!("is not a URL ({e})")
        }
    })?;
    let after_host = [
        url.path(),
        url.query().unwrap_or(""),
        url.fragment().unwrap_or(""),
    ];
    if !url.scheme().starts_with("http") && after_host.iter().any(|part| part.contains('@')) {
        return Err(format!("has an `@` after its host; {ENCODE}"));
    }
    // `redis:/:secret@host` parses as a URL without a host (so its password could not even be
    // redacted): only the `scheme://` form is a server address.
    if !raw.contains("://") {
        return Err(
            "is not a server URL: write it as scheme://[user:password@]host[:port]…".into(),
        );
    }
    if !schemes.contains(&url.scheme()) {
        return Err(format!(
            "must use one of the schemes {}",
            schemes.join(", ")
        ));
    }
    Ok(url)
}

/// Whether `url`'s host is loopback: 127.0.0.0/8, `::1` or `localhost` (and `*.localhost`,
/// RFC 6761 §6.3).
pub(crate) fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
        None => false,
    }
}

/// The variables, read through a lookup; remembers the deprecated names it was given.
pub(crate) struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    aliases: RefCell<Vec<(&'static str, &'static str)>>,
}

impl<'a> Env<'a> {
    pub(crate) fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            lookup,
            aliases: RefCell::default(),
        }
    }

    /// `var`'s value; empty or blank counts as unset.
    pub(crate) fn get(&self, var: &str) -> Option<String> {
        (self.lookup)(var).filter(|v| !v.trim().is_empty())
    }

    /// Whether `var` is set, but empty or blank.
    pub(crate) fn set_but_empty(&self, var: &str) -> bool {
        (self.lookup)(var).is_some_and(|v| v.trim().is_empty())
    }

    pub(crate) fn error(&self, var: &'static str, problem: &str) -> ConfigError {
        ConfigError {
            var,
            value: redact_raw(&self.get(var).unwrap_or_default()),
            problem: problem.to_owned(),
        }
    }

    /// Remembers that the deprecated `alias` set `name`.
    pub(crate) fn note_alias(&self, alias: &'static str, name: &'static str) {
        self.aliases.borrow_mut().push((alias, name));
    }

    /// `(deprecated name, its setting)` for each alias that was set.
    pub(crate) fn deprecated(&self) -> Vec<(&'static str, &'static str)> {
        self.aliases.borrow().clone()
    }

    /// `raw` as an `https://` URL, or `http://` only to a loopback host or one named in
    /// `PROVIDER_CLEARTEXT_HOSTS` (the provider URLs' rule, also the webhooks'); `why` says
    /// what crosses it. The error is the problem.
    pub(crate) fn checked_url(&self, raw: &str, why: &str) -> Result<Url, String> {
        let url = parse_url(raw, &["http", "https"])?;
        // `PROVIDER_CLEARTEXT_HOSTS`: host names an operator explicitly lets the provider URLs
        // reach over http:// — a stand-in such as compose's `graph-sim`, never a real provider.
        let allowed = self.get("PROVIDER_CLEARTEXT_HOSTS").unwrap_or_default();
        let named = url.host_str().is_some_and(|host| {
            allowed
                .split(',')
                .map(str::trim)
                .any(|h| !h.is_empty() && h.eq_ignore_ascii_case(host))
        });
        if url.scheme() == "http" && !is_loopback(&url) && !named {
            return Err(format!(
                "must use https:// (http:// is accepted only for a loopback host: 127.0.0.0/8, ::1, localhost, or a host named in PROVIDER_CLEARTEXT_HOSTS), because {why}"
            ));
        }
        if url.host().is_none() {
            return Err("must name a host".into());
        }
        Ok(url)
    }
}

/// Whether keys named `<name>:…` hash by a Redis Cluster hash tag of `name`: a `{` followed,
/// later in `name`, by a `}` with at least one byte between (the first `{` and the first `}`
/// after it count, as Redis reads a key).
pub(crate) fn has_hash_tag(name: &str) -> bool {
    name.find('{')
        .and_then(|open| name[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}
