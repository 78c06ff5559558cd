//! Secret columns: either the secret itself or a reference `env:NAME` / `file:/path`,
//! resolved at use. Neither the value nor a resolved secret is ever printed.

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
}

impl SecretRef {
    /// Wraps a column value.
    pub fn new(raw: impl Into<String>) -> Self {
        Self(SecretString::from(raw.into()))
    }

    /// The stored value, for writing it back to the database.
    pub fn raw(&self) -> &str {
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
    pub fn resolve_with(
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
