//! Who may post: the producers' bearer tokens from `INGEST_TOKENS` (every sender) and
//! `INGEST_TOKENS_FILE` (each narrowed to the senders it lists), resolved at start-up and
//! compared in constant time. A secret is kept only as its SHA-256, and never logged.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::IngestError;
use crate::{config::IngestConfig, domain::SecretRef};

/// The shortest token secret taken, in characters (as `ADMIN_TOKEN`'s).
pub(crate) const MIN_SECRET_CHARS: usize = 16;

/// One producer: a token's name, its secret's digest and the senders it may post for.
#[derive(Clone)]
pub struct Producer {
    /// The token's name (logs, the answer's `producer`, the admin UI).
    pub name: String,
    digest: [u8; 32],
    /// The senders (a system mailbox's address or a tenant's name) it may post for; `None`:
    /// every sender.
    pub senders: Option<Vec<String>>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("name", &self.name)
            .field("senders", &self.senders)
            .finish_non_exhaustive()
    }
}

/// Every producer the listener knows.
#[derive(Debug, Clone, Default)]
pub struct Producers(Vec<Producer>);

/// One entry of `INGEST_TOKENS_FILE`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToken {
    name: String,
    secret: String,
    #[serde(default)]
    senders: Option<Vec<String>>,
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

impl Producers {
    /// The producers of `config`: `INGEST_TOKENS`' and then `INGEST_TOKENS_FILE`'s, secrets
    /// resolved (`env:`, `file:`) now.
    ///
    /// # Errors
    /// [`IngestError::Tokens`] naming the variable and the token (never a secret): an
    /// unreadable file or reference, a short secret, a name or secret given twice.
    pub fn load(config: &IngestConfig) -> Result<Self, IngestError> {
        let mut producers = Self::default();
        for (name, secret) in &config.tokens {
            producers.add("INGEST_TOKENS", name, secret, None)?;
        }
        if let Some(path) = &config.tokens_file {
            for t in read_file(path)? {
                let var = "INGEST_TOKENS_FILE";
                if !crate::config::is_token_name(&t.name) {
                    return Err(IngestError::Tokens(format!(
                        "{var} ({}): the token name {:?} is not 1 to 64 letters, digits, `_`, `-` or `.`",
                        path.display(),
                        t.name
                    )));
                }
                if t.senders.as_ref().is_some_and(Vec::is_empty) {
                    return Err(IngestError::Tokens(format!(
                        "{var} ({}): token {}: `senders` lists no sender, so it could post \
                         nothing (leave `senders` out to allow every sender)",
                        path.display(),
                        t.name
                    )));
                }
                let secret = SecretRef::new(t.secret);
                SecretRef::check(secret.raw()).map_err(|e| {
                    IngestError::Tokens(format!(
                        "{var} ({}): token {}: {e}",
                        path.display(),
                        t.name
                    ))
                })?;
                producers.add(var, &t.name, &secret, t.senders)?;
            }
        }
        // An empty file and no INGEST_TOKENS: every request would be refused (a trial found
        // `[]` accepted while no token at all is refused).
        if producers.0.is_empty() {
            return Err(IngestError::Tokens(
                "INGEST_TOKENS and INGEST_TOKENS_FILE give no token: every request would be \
                 refused (give at least one producer's token)"
                    .into(),
            ));
        }
        Ok(producers)
    }

    /// Producers from `(name, secret, senders)` (tests, benchmarks).
    pub fn from_secrets<'a>(
        tokens: impl IntoIterator<Item = (&'a str, &'a str, Option<Vec<String>>)>,
    ) -> Self {
        Self(
            tokens
                .into_iter()
                .map(|(name, secret, senders)| Producer {
                    name: name.to_owned(),
                    digest: digest(secret),
                    senders,
                })
                .collect(),
        )
    }

    fn add(
        &mut self,
        var: &str,
        name: &str,
        secret: &SecretRef,
        senders: Option<Vec<String>>,
    ) -> Result<(), IngestError> {
        let bad = |problem: String| IngestError::Tokens(format!("{var}: token {name}: {problem}"));
        let value = secret
            .resolve()
            .map_err(|e| bad(format!("{} ({e})", secret.describe())))?;
        let value = secrecy::ExposeSecret::expose_secret(&value).trim();
        let chars = value.chars().count();
        if chars < MIN_SECRET_CHARS {
            return Err(bad(format!(
                "{} is {chars} characters long; a token needs at least {MIN_SECRET_CHARS} (e.g. `openssl rand -hex 24`)",
                secret.describe()
            )));
        }
        let digest = digest(value);
        if self.0.iter().any(|p| p.name == name) {
            return Err(bad("the name is given twice".into()));
        }
        if let Some(other) = self.0.iter().find(|p| bool::from(p.digest.ct_eq(&digest))) {
            return Err(bad(format!("its secret is token {}'s too", other.name)));
        }
        self.0.push(Producer {
            name: name.to_owned(),
            digest,
            senders,
        });
        Ok(())
    }

    /// The producer whose secret `bearer` is: every token compared, in constant time each.
    pub fn find(&self, bearer: &str) -> Option<&Producer> {
        let given = digest(bearer.trim());
        let mut found = None;
        for p in &self.0 {
            if bool::from(p.digest.ct_eq(&given)) {
                found = Some(p);
            }
        }
        found
    }

    /// How many producers there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn read_file(path: &Path) -> Result<Vec<FileToken>, IngestError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        IngestError::Tokens(format!("INGEST_TOKENS_FILE ({}): {e}", path.display()))
    })?;
    serde_json::from_str(&text).map_err(|e| {
        IngestError::Tokens(format!(
            "INGEST_TOKENS_FILE ({}): not a JSON array of {{\"name\", \"secret\", \"senders\"}}: {e}",
            path.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_found_by_its_secret_only() {
        let p = Producers::from_secrets([
            ("crm", "0123456789abcdef-crm", None),
            (
                "billing",
                "0123456789abcdef-billing",
                Some(vec!["northwind".into()]),
            ),
        ]);
        assert_eq!(p.find("0123456789abcdef-billing").unwrap().name, "billing");
        assert_eq!(p.find(" 0123456789abcdef-crm ").unwrap().name, "crm");
        assert!(p.find("0123456789abcdef-cr").is_none());
        assert!(p.find("").is_none());
    }

    #[test]
    fn short_repeated_and_unresolvable_secrets_are_refused_without_the_secret() {
        let config = |tokens: Vec<(&str, &str)>| IngestConfig {
            tokens: tokens
                .into_iter()
                .map(|(n, s)| (n.to_owned(), SecretRef::new(s)))
                .collect(),
            ..crate::config::Config::from_lookup(|_| None).unwrap().ingest
        };
        for (tokens, says) in [
            (vec![("a", "hunter2")], "7 characters"),
            (
                vec![
                    ("a", "hunter2-hunter2-hunter2"),
                    ("b", "hunter2-hunter2-hunter2"),
                ],
                "token a's too",
            ),
            (vec![("a", "env:MW_INGEST_SURELY_UNSET")], "not set"),
        ] {
            let e = Producers::load(&config(tokens)).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }
}
