//! Reading one variable at a time from a lookup (the process environment, or a map in tests):
//! defaults, units, URLs with their schemes, Redis seed lists; each error names the variable.

use std::{num::NonZeroU32, time::Duration};

use url::Url;

use super::{ConfigError, REDIS_SCHEMES};
use crate::domain::redact_raw;
use crate::rate_limit::RedisUrls;

/// `raw` as a URL of one of `schemes`, or what is wrong with it.
fn parse_url(raw: &str, schemes: &[&str]) -> Result<Url, String> {
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

/// The variables, read through a lookup.
pub(super) struct Env<'a, F: Fn(&str) -> Option<String>>(pub(super) &'a F);

impl<F: Fn(&str) -> Option<String>> Env<'_, F> {
    pub(super) fn get(&self, var: &str) -> Option<String> {
        (self.0)(var).filter(|v| !v.trim().is_empty())
    }

    pub(super) fn error(&self, var: &'static str, problem: &str) -> ConfigError {
        ConfigError {
            var,
            value: redact_raw(&self.get(var).unwrap_or_default()),
            problem: problem.to_owned(),
        }
    }

    /// `host:port`, or `off` (`None`).
    pub(super) fn listen(
        &self,
        var: &'static str,
        default: &str,
    ) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        let raw = self.get(var).unwrap_or_else(|| default.to_owned());
        if raw.trim().eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let raw = raw.trim();
        // `localhost` is the one name taken (as 127.0.0.1): nothing else is resolved at start.
        let loopback = raw
            .strip_prefix("localhost:")
            .map(|port| format!("127.0.0.1:{port}"));
        loopback
            .as_deref()
            .unwrap_or(raw)
            .parse()
            .map(Some)
            .map_err(|_| {
                self.error(
                var,
                &format!(
                    "must be an IP address and port (e.g. {default}, 127.0.0.1:9090, [::1]:9090; \
                     localhost:PORT for 127.0.0.1) or `off`; host names are not resolved"
                ),
            )
            })
    }

    pub(super) fn text(&self, var: &'static str, default: &str) -> Result<String, ConfigError> {
        Ok(self.get(var).unwrap_or_else(|| default.to_owned()))
    }

    /// `var`'s trimmed value as `parse` reads it, or `default` when it is unset; `parse`'s
    /// error is the problem the [`ConfigError`] names.
    pub(super) fn parsed<T>(
        &self,
        var: &'static str,
        default: T,
        parse: impl FnOnce(&str) -> Result<T, &'static str>,
    ) -> Result<T, ConfigError> {
        match self.get(var) {
            None => Ok(default),
            Some(raw) => parse(raw.trim()).map_err(|problem| self.error(var, problem)),
        }
    }

    pub(super) fn positive(
        &self,
        var: &'static str,
        default: u32,
    ) -> Result<NonZeroU32, ConfigError> {
        let default = NonZeroU32::new(default).expect("defaults are positive");
        self.parsed(var, default, |raw| {
            raw.parse::<u32>()
                .ok()
                .and_then(NonZeroU32::new)
                .ok_or("must be a whole number from 1 to 4294967295")
        })
    }

    pub(super) fn millis(&self, var: &'static str, default: u64) -> Result<Duration, ConfigError> {
        self.parsed(var, Duration::from_millis(default), |raw| {
            match raw.parse::<u64>() {
                Ok(0) => Err("must be a positive number of milliseconds, not 0"),
                Ok(ms) => Ok(Duration::from_millis(ms)),
                Err(_) => Err("must be a whole number of milliseconds"),
            }
        })
    }

    /// A duration with a unit: `500ms`, `30s`, `15m`, `24h`, `1d` (not 0).
    pub(super) fn duration(
        &self,
        var: &'static str,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        self.parsed(var, default, parse_duration)
    }

    /// A duration as [`Self::duration`], or `off` in any case (`None`).
    pub(super) fn duration_or_off(
        &self,
        var: &'static str,
        default: Duration,
    ) -> Result<Option<Duration>, ConfigError> {
        match self.get(var) {
            Some(raw) if raw.trim().eq_ignore_ascii_case("off") => Ok(None),
            _ => self.duration(var, default).map(Some),
        }
    }

    pub(super) fn bool(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        self.parsed(var, default, |raw| {
            match raw.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err("must be `true` or `false`"),
            }
        })
    }

    /// A provider base URL: `https://`, or `http://` only to a loopback host (127.0.0.0/8,
    /// `::1`, `localhost`: a stand-in on this machine). Credentials and tokens cross these
    /// URLs, so cleartext to any other host is refused.
    pub(super) fn provider_url(
        &self,
        var: &'static str,
        default: &str,
    ) -> Result<Url, ConfigError> {
        let raw = self.get(var).unwrap_or_else(|| default.to_owned());
        let url = self
            .checked_url(raw.trim(), "client secrets, API keys and tokens cross it")
            .map_err(|problem| self.error(var, &problem))?;
        // The client adds a URL's user and password as a second Authorization header beside
        // the token (the provider refuses both), and its debug lines print the URL whole.
        if !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
        {
            let mut shown = url.clone();
            // Cannot fail: the URL has a host (`checked_url`).
            let _ = (shown.set_username(""), shown.set_password(None));
            shown.set_query(None);
            shown.set_fragment(None);
            return Err(ConfigError {
                var,
                value: format!("{shown} (its user, password, query or #fragment not shown)"),
                problem: "must be a base URL alone: no user or password, no ?query, no #fragment \
                          (the provider's credentials are the client secret or API key; a \
                          gateway's go in HTTPS_PROXY)"
                    .into(),
            });
        }
        Ok(url)
    }

    /// `raw` as an `https://` URL, or `http://` only to a loopback host or one named in
    /// `PROVIDER_CLEARTEXT_HOSTS` (the provider URLs' rule, also the webhooks'); `why` says
    /// what crosses it. The error is the problem.
    pub(super) fn checked_url(&self, raw: &str, why: &str) -> Result<Url, String> {
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

    pub(super) fn url(
        &self,
        var: &'static str,
        default: &str,
        schemes: &[&str],
    ) -> Result<Url, ConfigError> {
        let raw = self.get(var).unwrap_or_else(|| default.to_owned());
        parse_url(raw.trim(), schemes).map_err(|problem| self.error(var, &problem))
    }

    /// `REDIS_URL` or `MAIL_RATE_LIMIT_REDIS_URL`: one URL as [`Self::url`], or several
    /// comma-separated (seed nodes of one Redis Cluster), each with the first one's scheme and
    /// credentials (the cluster client uses one set for every node). A bad element is named by
    /// its position and shown redacted.
    pub(super) fn redis_urls(
        &self,
        var: &'static str,
        default: &str,
    ) -> Result<RedisUrls, ConfigError> {
        let raw = self.get(var).unwrap_or_else(|| default.to_owned());
        if !raw.contains(',') {
            return Ok(self.url(var, default, REDIS_SCHEMES)?.into());
        }
        let mut urls: Vec<Url> = Vec::new();
        for (n, element) in raw.split(',').map(str::trim).enumerate() {
            let bad = |problem: &str| ConfigError {
                var,
                value: redact_raw(element),
                problem: format!("list element {} {problem}", n + 1),
            };
            if element.is_empty() {
                return Err(bad("is empty"));
            }
            let url = parse_url(element, REDIS_SCHEMES).map_err(|problem| bad(&problem))?;
            if let Some(first) = urls.first()
                && (first.scheme(), first.username(), first.password())
                    != (url.scheme(), url.username(), url.password())
            {
                return Err(bad(
                    "must use the first element's scheme and credentials (the seeds of one Redis Cluster)",
                ));
            }
            urls.push(url);
        }
        Ok(RedisUrls::new(urls).expect("split yields at least one element"))
    }
}

/// What [`parse_duration`] says of a duration of 0.
pub(crate) const ZERO: &str = "must be more than 0";

/// A duration with a unit: `500ms`, `30s`, `15m`, `24h`, `1d` (not 0), as the duration
/// variables (`MAIL_RETRY_FOR`, `MAIL_RETENTION`) and `messages purge --older-than` take it.
///
/// # Errors
/// What is wrong with `raw`.
pub(crate) fn parse_duration(raw: &str) -> Result<Duration, &'static str> {
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (number, unit) = raw.split_at(split);
    let problem = "must be a whole number with a unit: ms, s, m, h or d (e.g. 24h)";
    let too_long = "is too long: at most 36500d (100 years)";
    // Any case but `M` (a month to some readers, a minute here).
    let ms_per = match unit.trim() {
        "M" => {
            return Err(
                "must be a whole number with a unit: ms, s, m, h or d (`M` is refused: \
                        minutes are `m`, a month is `30d`)",
            );
        }
        unit => match unit.to_ascii_lowercase().as_str() {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(problem),
        },
    };
    let n: u64 = match number.parse() {
        Ok(n) => n,
        // Digits only, yet past u64: too long rather than not a number.
        Err(_) if !number.is_empty() => return Err(too_long),
        Err(_) => return Err(problem),
    };
    // A larger one overflows the time arithmetic it feeds (now − retention, …).
    const MAX_MS: u64 = 36_500 * 86_400_000;
    match n.checked_mul(ms_per) {
        Some(0) => Err(ZERO),
        Some(ms) if ms <= MAX_MS => Ok(Duration::from_millis(ms)),
        _ => Err(too_long),
    }
}

/// `d` in the largest unit that shows it exactly: `24h`, `90m`, `1500ms` (what a duration
/// variable reads back; `check-config` prints it).
pub(super) fn with_unit(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

/// Whether keys named `<name>:…` hash by a Redis Cluster hash tag of `name`: a `{` followed,
/// later in `name`, by a `}` with at least one byte between (the first `{` and the first `}`
/// after it count, as Redis reads a key).
pub(super) fn has_hash_tag(name: &str) -> bool {
    name.find('{')
        .and_then(|open| name[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}
