//! The HTTP ingest's variables (`INGEST_*`, docs/ingest.md, [`crate::ingest`]): where it
//! listens, who may post and how much one request may carry.

use std::{net::SocketAddr, num::NonZeroU32, path::PathBuf};

use super::{ConfigError, env::Env};
use crate::domain::SecretRef;

/// `INGEST_MAX_BODY_BYTES`' default: 10 MiB (a request of 1,000 lines of about 10 KiB).
pub const DEFAULT_MAX_BODY_BYTES: u32 = 10 * 1024 * 1024;
/// `INGEST_MAX_LINES`' default.
pub const DEFAULT_MAX_LINES: u32 = 1_000;

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
    /// `INGEST_MAX_BODY_BYTES`, default [`DEFAULT_MAX_BODY_BYTES`]: a larger body is 413.
    pub max_body_bytes: NonZeroU32,
    /// `INGEST_MAX_LINES`, default [`DEFAULT_MAX_LINES`]: a request with more lines is 413.
    pub max_lines: NonZeroU32,
}

impl IngestConfig {
    /// `INGEST_TOKENS` as `check-config` prints it: names and the secrets' kinds only.
    pub(super) fn tokens_shown(&self) -> String {
        if self.tokens.is_empty() {
            return "(unset)".to_owned();
        }
        let shown: Vec<String> = self
            .tokens
            .iter()
            .map(|(name, secret)| format!("{name}={}", secret.describe()))
            .collect();
        shown.join(",")
    }
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

impl<F: Fn(&str) -> Option<String>> Env<'_, F> {
    /// The `INGEST_*` variables.
    pub(super) fn ingest(&self) -> Result<IngestConfig, ConfigError> {
        let listen = self.listen("INGEST_LISTEN", "off")?;
        let mut tokens: Vec<(String, SecretRef)> = Vec::new();
        if let Some(raw) = self.get("INGEST_TOKENS") {
            for (n, element) in raw.split(',').map(str::trim).enumerate() {
                // Never the secret: the names only.
                let bad = |problem: String| ConfigError {
                    var: "INGEST_TOKENS",
                    value: "***".into(),
                    problem: format!("list element {} {problem}", n + 1),
                };
                let Some((name, secret)) = element.split_once('=') else {
                    return Err(bad("is not name=secret".into()));
                };
                let name = name.trim();
                if !is_token_name(name) {
                    return Err(bad(format!(
                        "names the token {name:?}: a name is 1 to 64 letters, digits, `_`, `-` or `.`"
                    )));
                }
                if tokens.iter().any(|(other, _)| other == name) {
                    return Err(bad(format!("names the token {name:?} twice")));
                }
                let secret = SecretRef::new(secret.trim());
                SecretRef::check(secret.raw()).map_err(|e| bad(format!("({name}): {e}")))?;
                tokens.push((name.to_owned(), secret));
            }
        }
        let tokens_file = self
            .get("INGEST_TOKENS_FILE")
            .map(|p| PathBuf::from(p.trim()));
        if listen.is_some() && tokens.is_empty() && tokens_file.is_none() {
            return Err(self.error(
                "INGEST_LISTEN",
                "is set but no producer may post: set INGEST_TOKENS (name=secret,…) or INGEST_TOKENS_FILE",
            ));
        }
        Ok(IngestConfig {
            listen,
            tokens,
            tokens_file,
            max_body_bytes: self.positive("INGEST_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)?,
            max_lines: self.positive("INGEST_MAX_LINES", DEFAULT_MAX_LINES)?,
        })
    }
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
        assert_eq!(
            c.ingest.tokens_shown(),
            "crm=<literal>,billing=env:BILLING_TOKEN"
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
            assert!(e.problem.contains(says), "{tokens}: {e}");
            assert!(!e.to_string().contains("hunter"), "{e}");
        }
    }

    #[test]
    fn a_listener_without_tokens_is_refused() {
        let e = config(&[("INGEST_LISTEN", "127.0.0.1:9186")]).unwrap_err();
        assert_eq!(e.var, "INGEST_LISTEN");
        assert!(
            config(&[("INGEST_LISTEN", "off")])
                .unwrap()
                .ingest
                .listen
                .is_none()
        );
    }
}
