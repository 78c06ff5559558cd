//! The kinds of the address settings: database and Redis URLs, provider and webhook URLs (https
//! unless loopback or `PROVIDER_CLEARTEXT_HOSTS`), listen addresses. Passwords are never shown.

use std::net::SocketAddr;

use url::Url;

use super::kinds::{Bad, Kind};
use crate::config::{
    REDIS_SCHEMES,
    env::{Env, parse_url},
    events::shown,
    redact_url,
};
use crate::domain::redact_raw;
use crate::rate_limit::RedisUrls;

/// A server URL of one of `.0`'s schemes (`DATABASE_URL`).
pub(crate) struct ServerUrl(pub(crate) &'static [&'static str]);

impl Kind for ServerUrl {
    type Value = Url;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<Url, Bad> {
        parse_url(raw, self.0).map_err(Bad::from)
    }
    fn show(&self, value: &Url) -> String {
        redact_url(value)
    }
}

/// One Redis URL, or comma-separated Redis Cluster seeds.
pub(crate) struct Redis;

impl Kind for Redis {
    type Value = RedisUrls;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<RedisUrls, Bad> {
        redis_urls(raw)
    }
    fn show(&self, value: &RedisUrls) -> String {
        value.redacted()
    }
}

/// One URL as [`ServerUrl`] of `redis`/`rediss`, or several comma-separated (seed nodes of
/// one Redis Cluster), each with the first one's scheme and credentials (the cluster client
/// uses one set for every node). A bad element is named by its position and shown redacted.
fn redis_urls(raw: &str) -> Result<RedisUrls, Bad> {
    if !raw.contains(',') {
        return Ok(parse_url(raw, REDIS_SCHEMES)?.into());
    }
    let mut urls: Vec<Url> = Vec::new();
    for (n, element) in raw.split(',').map(str::trim).enumerate() {
        let bad = |problem: &str| Bad {
            problem: format!("list element {} {problem}", n + 1),
            value: Some(redact_raw(element)),
        };
        if element.is_empty() {
            return Err(bad("is empty"));
        }
        let url = parse_url(element, REDIS_SCHEMES).map_err(|e| bad(&e))?;
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

/// A provider's base URL: `https://` (or `http://` to loopback or `PROVIDER_CLEARTEXT_HOSTS`),
/// no user, password, query or fragment.
pub(crate) struct ProviderUrl;

impl Kind for ProviderUrl {
    type Value = Url;
    fn parse(&self, raw: &str, env: &Env<'_>) -> Result<Url, Bad> {
        let url = env.checked_url(raw, "client secrets, API keys and tokens cross it")?;
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
            return Err(Bad {
                value: Some(format!(
                    "{shown} (its user, password, query or #fragment not shown)"
                )),
                problem: "must be a base URL alone: no user or password, no ?query, no #fragment \
                          (the provider's credentials are the client secret or API key; a \
                          gateway's go in HTTPS_PROXY)"
                    .into(),
            });
        }
        Ok(url)
    }
    fn show(&self, value: &Url) -> String {
        redact_url(value)
    }
}

/// `EVENTS_WEBHOOK_URL`: comma-separated receivers, each as [`ProviderUrl`]'s scheme rule, or
/// `off` (none).
pub(crate) struct WebhookUrls;

impl Kind for WebhookUrls {
    type Value = Vec<Url>;
    fn parse(&self, raw: &str, env: &Env<'_>) -> Result<Vec<Url>, Bad> {
        let mut urls = Vec::new();
        if raw.eq_ignore_ascii_case("off") {
            return Ok(urls);
        }
        for (n, element) in raw.split(',').map(str::trim).enumerate() {
            // As `shown`: the password and the query (a receiver's token) hidden.
            let value = match element.split_once('?') {
                Some((head, _)) => format!("{}?***", redact_raw(head)),
                None => redact_raw(element),
            };
            let bad = |problem: &str| Bad {
                problem: format!("list element {} {problem}", n + 1),
                value: Some(value.clone()),
            };
            if element.is_empty() {
                return Err(bad("is empty"));
            }
            let url = env
                .checked_url(element, "signed events cross it")
                .map_err(|e| bad(&e))?;
            if urls.contains(&url) {
                return Err(bad("is listed twice"));
            }
            urls.push(url);
        }
        Ok(urls)
    }
    fn show(&self, value: &Vec<Url>) -> String {
        if value.is_empty() {
            return "off".to_owned();
        }
        value.iter().map(shown).collect::<Vec<_>>().join(",")
    }
}

/// An IP address and port (`localhost:PORT` is 127.0.0.1; nothing else is resolved).
pub(crate) struct Listen;

impl Kind for Listen {
    type Value = SocketAddr;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<SocketAddr, Bad> {
        let loopback = raw
            .strip_prefix("localhost:")
            .map(|port| format!("127.0.0.1:{port}"));
        loopback.as_deref().unwrap_or(raw).parse().map_err(|_| {
            "must be an IP address and port (e.g. 0.0.0.0:9184, 127.0.0.1:9090, [::1]:9090; \
             localhost:PORT for 127.0.0.1); host names are not resolved"
                .into()
        })
    }
    fn show(&self, value: &SocketAddr) -> String {
        value.to_string()
    }
}
