//! Secret columns: either the secret itself or a reference `env:NAME` / `file:/path`,
//! resolved at use. Neither the value nor a resolved secret is ever printed.
//!
//! [`SecretRef::check`] is what the senders import accepts: `env:NAME` with `NAME` a valid
//! environment variable name, `file:/absolute/path`, or a literal that does not look like a
//! reference or URL (`file:http://…`, `http://…`, `Env:X`, `vault:…` are refused: they would
//! otherwise be sent to Entra ID or SendGrid as the secret itself).

use std::fmt;

use secrecy::{ExposeSecret, SecretString};

/// A secret column's raw value. `Debug` prints only its kind (`env:NAME`, `file:/path` or
/// `<literal>`): a reference's name is not secret, its value is.
#[derive(Clone)]
pub struct SecretRef(SecretString);

/// A secret reference that cannot be resolved. Names the reference, never a value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// `env:NAME` where `NAME` is unset or empty.
    #[error("secret reference env:{0} names an environment variable that is not set")]
    MissingEnv(String),
    /// `file:/path` that cannot be read or is empty.
    #[error("secret reference file:{path} cannot be read: {reason}")]
    File {
        /// The file's path.
        path: String,
        /// The I/O error, or `empty file`.
        reason: String,
    },
    /// An empty column.
    #[error("secret is empty")]
    Empty,
    /// A value that is neither a valid reference nor a plausible literal (see
    /// [`SecretRef::check`]). The text says what is wrong without quoting a literal.
    #[error("{0}")]
    Malformed(String),
}

/// Whether `name` is a portable environment variable name: `[A-Za-z_][A-Za-z0-9_]*`
/// (POSIX.1-2017 §8.1).
pub(crate) fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl SecretRef {
    /// Wraps a column value.
    pub fn new(raw: impl Into<String>) -> Self {
        Self(SecretString::from(raw.into()))
    }

    /// Checks a column value before it is stored:
    /// - `env:NAME` — `NAME` must be a valid environment variable name ([`is_env_name`]);
    /// - `file:/absolute/path` — the path must be absolute, not a URL (`file://host/…`,
    ///   `file:http://…` are refused), without control characters;
    /// - anything else is a literal secret: not empty, no whitespace or control characters, and
    ///   not starting like a URL or reference (`scheme:` — `http://…`, `Env:NAME`, `vault:x`).
    ///
    /// # Errors
    /// [`SecretError::Malformed`] or [`SecretError::Empty`]; a literal's value is never quoted.
    pub(crate) fn check(raw: &str) -> Result<(), SecretError> {
        let malformed = |text: String| Err(SecretError::Malformed(text));
        if raw.is_empty() {
            return Err(SecretError::Empty);
        }
        if let Some(name) = raw.strip_prefix("env:") {
            if is_env_name(name) {
                return Ok(());
            }
            return malformed(format!(
                "env:{} is not a valid reference: the name must be letters, digits and _ and not start with a digit",
                name.escape_debug()
            ));
        }
        if let Some(path) = raw.strip_prefix("file:") {
            if path.starts_with('/') && !path.starts_with("//") && !path.contains(char::is_control)
            {
                return Ok(());
            }
            return malformed(format!(
                "file:{} is not a valid reference: write file:/absolute/path (not a URL)",
                path.escape_debug()
            ));
        }
        if let Some((scheme, _)) = raw.split_once(':') {
            let looks_like_scheme = !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
            if looks_like_scheme {
                return malformed(format!(
                    "a literal secret may not start with `{}:` (a URL or reference); references are env:NAME or file:/absolute/path",
                    scheme.escape_debug()
                ));
            }
        }
        if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return malformed(
                "a literal secret may not contain whitespace or control characters".into(),
            );
        }
        Ok(())
    }

    /// The stored value, for writing it back to the database.
    pub(crate) fn raw(&self) -> &str {
        self.0.expose_secret()
    }

    /// What the reference looks like without its secret: `env:NAME`, `file:/path` or `<literal>`.
    pub fn describe(&self) -> String {
        let raw = self.0.expose_secret();
        if raw.starts_with("env:") || raw.starts_with("file:") {
            raw.to_owned()
        } else {
            "<literal>".to_owned()
        }
    }

    /// Resolves the secret: `env:NAME` reads the variable, `file:/path` reads the file
    /// (trailing newline trimmed), anything else is the secret itself.
    ///
    /// # Errors
    /// [`SecretError`] naming the reference when it cannot be resolved.
    pub fn resolve(&self) -> Result<SecretString, SecretError> {
        self.resolve_with(|name| std::env::var(name).ok())
    }

    /// [`Self::resolve`] with an injectable environment (tests).
    ///
    /// # Errors
    /// As [`Self::resolve`].
    pub(crate) fn resolve_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<SecretString, SecretError> {
        let raw = self.0.expose_secret();
        let value = if let Some(name) = raw.strip_prefix("env:") {
            env(name)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| SecretError::MissingEnv(name.to_owned()))?
        } else if let Some(path) = raw.strip_prefix("file:") {
            let text = std::fs::read_to_string(path).map_err(|e| SecretError::File {
                path: path.to_owned(),
                reason: e.to_string(),
            })?;
            let text = text.trim_end_matches(['\r', '\n']).to_owned();
            if text.is_empty() {
                return Err(SecretError::File {
                    path: path.to_owned(),
                    reason: "empty file".into(),
                });
            }
            text
        } else {
            raw.to_owned()
        };
        if value.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(SecretString::from(value))
    }
}

impl fmt::Debug for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretRef({})", self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_and_literal_references_resolve() {
        let env = |n: &str| (n == "X_SECRET").then(|| "s3cret".to_owned());
        let r = SecretRef::new("env:X_SECRET");
        assert_eq!(r.resolve_with(env).unwrap().expose_secret(), "s3cret");
        let lit = SecretRef::new("plain-value");
        assert_eq!(
            lit.resolve_with(env).unwrap().expose_secret(),
            "plain-value"
        );
        assert!(!format!("{lit:?}").contains("plain-value"));
    }

    #[test]
    fn check_accepts_references_and_literals_and_refuses_lookalikes() {
        for good in [
            "env:CONTOSO_GRAPH_SECRET",
            "env:_x1",
            "file:/run/secrets/graph",
            "abc8Q~x.y_z-1",
            "SG.aaaa.bbbb",
        ] {
            assert_eq!(SecretRef::check(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "env:",
            "env:1X",
            "env:A-B",
            "env:A B",
            "file:",
            "file:relative/path",
            "file:http://evil.example/x",
            "file://host/x",
            "http://evil.example/secret",
            "https://x",
            "Env:X",
            "vault:kv/x",
            "has space",
            "tab\there",
        ] {
            assert!(SecretRef::check(bad).is_err(), "{bad:?}");
        }
        let err = SecretRef::check("https://user:hunter2@x").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn unresolvable_references_name_the_reference() {
        let err = SecretRef::new("env:NOPE")
            .resolve_with(|_| None)
            .unwrap_err();
        assert_eq!(err, SecretError::MissingEnv("NOPE".into()));
        assert!(err.to_string().contains("env:NOPE"));
        let err = SecretRef::new("file:/nonexistent/x").resolve().unwrap_err();
        assert!(err.to_string().contains("file:/nonexistent/x"), "{err}");
    }
}
