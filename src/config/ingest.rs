//! The HTTP ingest's settings as [`crate::ingest`] takes them (`INGEST_*`, docs/ingest.md;
//! declared in `settings/ingest.rs`): where it listens, who may post and how much one request
//! may carry.

use std::{net::SocketAddr, num::NonZeroU32, path::PathBuf};

use crate::domain::SecretRef;

/// The HTTP ingest's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestConfig {
    /// `INGEST_LISTEN`, default `off` (`None`): where `POST /v1/messages` and
    /// `GET /v1/openapi.json` answer. Plain HTTP: TLS is the ingress's.
    pub listen: Option<SocketAddr>,
    /// `INGEST_TOKENS`: `name=secret[,name=secret…]`, each secret a literal or an `env:NAME` /
    /// `file:/path` reference; each token may post for every sender.
    pub tokens: Vec<(String, SecretRef)>,
    /// `INGEST_TOKENS_FILE`: a JSON array of `{name, secret, senders}`, each token narrowed to
    /// the senders it lists (read at start-up).
    pub tokens_file: Option<PathBuf>,
    /// `INGEST_MAX_BODY_BYTES`: a larger body is 413.
    pub max_body_bytes: NonZeroU32,
    /// `INGEST_MAX_LINES`: a request with more lines is 413.
    pub max_lines: NonZeroU32,
}

/// Whether `name` may name a producer: letters, digits, `_`, `-`, `.` (it is a log field and
/// a metric-free label in the admin UI).
pub(crate) fn is_token_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::config::Config;

    fn config(vars: &[(&str, &str)]) -> Result<Config, crate::config::ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn tokens_are_read_with_names_and_references() {
        let c = config(&[
            ("INGEST_LISTEN", "127.0.0.1:9186"),
            (
                "INGEST_TOKENS",
                "crm=s3cret-s3cret-s3cret, billing=env:BILLING_TOKEN",
            ),
        ])
        .unwrap();
        let names: Vec<&str> = c.ingest.tokens.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["crm", "billing"]);
        assert!(
            c.redacted_lines()
                .contains(&"INGEST_TOKENS=crm=<literal>,billing=env:BILLING_TOKEN".to_owned()),
            "{:?}",
            c.redacted_lines()
        );
    }

    #[test]
    fn bad_tokens_are_refused_without_showing_a_secret() {
        for (tokens, says) in [
            ("crm", "is not name=secret"),
            ("a b=hunter2-hunter2", "names the token"),
            ("crm=hunter2-hunter2,crm=hunter3-hunter3", "twice"),
            ("crm=env:1BAD", "not a valid reference"),
        ] {
            let e = config(&[("INGEST_TOKENS", tokens)]).unwrap_err();
            assert_eq!(e.var, "INGEST_TOKENS");
            assert_eq!(e.value, "***");
            assert!(e.problem.contains(says), "{tokens}: {e}");
            assert!(!e.to_string().contains("hunter"), "{e}");
        }
    }

    #[test]
    fn a_listener_without_tokens_is_refused() {
        let e = config(&[("INGEST_LISTEN", "127.0.0.1:9186")]).unwrap_err();
        assert_eq!(e.var, "INGEST_LISTEN");
        assert!(e.problem.contains("INGEST_TOKENS_FILE"), "{e}");
        let file = config(&[
            ("INGEST_LISTEN", "127.0.0.1:9186"),
            ("INGEST_TOKENS_FILE", " /etc/mail-worker/tokens.json "),
        ])
        .unwrap();
        assert_eq!(
            file.ingest.tokens_file.as_deref(),
            Some(std::path::Path::new("/etc/mail-worker/tokens.json"))
        );
        assert!(
            config(&[("INGEST_LISTEN", "off")])
                .unwrap()
                .ingest
                .listen
                .is_none()
        );
    }
}
