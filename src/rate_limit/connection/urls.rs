//! [`RedisUrls`]: the limiter's Redis as configured (`MAIL_RATE_LIMIT_REDIS_URL`).

use std::fmt;

use url::Url;

/// The limiter's Redis as configured: one URL (a standalone Redis, or a cluster node found out
/// from its first `MOVED`) or several (seed nodes of a Redis Cluster). Never empty.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrls(Vec<Url>);

impl RedisUrls {
    /// `urls`, or `None` for an empty list.
    pub fn new(urls: Vec<Url>) -> Option<Self> {
        (!urls.is_empty()).then_some(Self(urls))
    }

    /// The first URL (the only one unless this is a list of cluster seeds).
    pub fn first(&self) -> &Url {
        &self.0[0]
    }

    /// Every URL, in the configured order.
    pub fn as_slice(&self) -> &[Url] {
        &self.0
    }

    /// Whether several seeds were given: a Redis Cluster from the start.
    pub fn is_cluster(&self) -> bool {
        self.0.len() > 1
    }

    /// The URLs comma-separated with passwords replaced by `***`, for `check-config`, logs and
    /// error messages.
    pub fn redacted(&self) -> String {
        self.0
            .iter()
            .map(crate::domain::redact_url)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl From<Url> for RedisUrls {
    fn from(url: Url) -> Self {
        Self(vec![url])
    }
}

impl fmt::Debug for RedisUrls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Redacted: a `{:?}` of the configuration must not print a password.
        f.debug_tuple("RedisUrls").field(&self.redacted()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_urls_is_redacted_when_printed() {
        let urls = RedisUrls::new(vec![
            Url::parse("redis://:secret@a:7000").unwrap(),
            Url::parse("redis://b:7001").unwrap(),
        ])
        .unwrap();
        assert_eq!(urls.redacted(), "redis://:***@a:7000,redis://b:7001");
        assert!(!format!("{urls:?}").contains("secret"));
        assert!(urls.is_cluster());
        assert!(RedisUrls::new(Vec::new()).is_none());
    }
}
