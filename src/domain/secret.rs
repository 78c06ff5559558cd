//! Secret columns: either the secret itself or a reference `env:NAME` / `file:/path`,
//! resolved at use. Neither the value nor a resolved secret is ever printed.
//!
//! [`SecretRef::check`] is what the senders import accepts: `env:NAME` with `NAME` a valid
//! environment variable name, `file:/absolute/path`, or a literal that does not look like a
//! reference or URL (`file:http://…`, `http://…`, `Env:X`, `vault:…` are refused: they would
//! otherwise be sent to Entra ID or SendGrid as the secret itself).

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use secrecy::{ExposeSecret, SecretString};

/// A secret column's raw value. `Debug` prints only its kind (`env:NAME`, `file:/path` or
/// `<literal>`): a reference's name is not secret, its value is.
#[derive(Clone)]
pub struct SecretRef(SecretString);

/// A secret reference that cannot be resolved. Names the reference, never a value.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// `env:NAME` where `NAME` is unset or empty.
    #[error("secret reference env:{0} names an environment variable that is not set or is empty")]
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
    /// (blocking; both without a trailing newline), anything else is the secret itself. For one-shot
    /// use at start-up (`ADMIN_TOKEN`); per message, the mailer factory uses
    /// [`Self::resolve_cached`].
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
        if let Some(name) = raw.strip_prefix("env:") {
            // A trailing newline (`$(cat secret.txt)`, a here-string) is trimmed as a `file:`
            // secret's is: it is never part of an Entra secret.
            env(name)
                .map(|v| v.trim_end_matches(['\r', '\n']).to_owned())
                .filter(|v| !v.is_empty())
                .map(SecretString::from)
                .ok_or_else(|| SecretError::MissingEnv(name.to_owned()))
        } else if let Some(path) = raw.strip_prefix("file:") {
            file_secret(path, std::fs::read_to_string(path))
        } else if raw.is_empty() {
            Err(SecretError::Empty)
        } else {
            Ok(SecretString::from(raw.to_owned()))
        }
    }

    /// [`Self::resolve_with`], a `file:` reference read through `files` (async, cached).
    ///
    /// # Errors
    /// As [`Self::resolve`].
    pub(crate) async fn resolve_cached(
        &self,
        env: impl Fn(&str) -> Option<String>,
        files: &SecretFiles,
    ) -> Result<SecretString, SecretError> {
        match self.0.expose_secret().strip_prefix("file:") {
            Some(path) => files.read(path).await,
            None => self.resolve_with(env),
        }
    }
}

/// A `file:` secret from what reading `path` gave: the text without its trailing newline, or
/// [`SecretError::File`] for an unreadable or empty file.
fn file_secret(path: &str, read: std::io::Result<String>) -> Result<SecretString, SecretError> {
    let error = |reason: String| SecretError::File {
        path: path.to_owned(),
        reason,
    };
    let text = read.map_err(|e| error(e.to_string()))?;
    let text = text.trim_end_matches(['\r', '\n']);
    if text.is_empty() {
        return Err(error("empty file".into()));
    }
    Ok(SecretString::from(text.to_owned()))
}

/// How long a `file:` secret's content (or its read error) is kept before the file is read
/// again: a rotated file (a Kubernetes Secret volume swaps it in place) is picked up within
/// 5 s, while a campaign reads each file about once per 5 s instead of once per message.
pub const SECRET_FILE_TTL: Duration = Duration::from_secs(5);

/// The most `file:` secrets kept at once (one per distinct path).
const MAX_SECRET_FILES: u64 = 10_000;

/// `file:` secrets read with `tokio::fs` (no blocking read on a runtime thread) and kept per
/// path for a TTL. Concurrent look-ups of one path share one read. Cheap to clone (shared).
#[derive(Clone)]
pub struct SecretFiles {
    cache: moka::future::Cache<String, Result<SecretString, SecretError>>,
    reads: Arc<AtomicU64>,
}

impl SecretFiles {
    /// Each file's content kept for `ttl` ([`SECRET_FILE_TTL`] in production).
    #[must_use]
    pub fn new(ttl: Duration) -> Self {
        Self {
            cache: moka::future::Cache::builder()
                .max_capacity(MAX_SECRET_FILES)
                .time_to_live(ttl)
                .build(),
            reads: Arc::default(),
        }
    }

    /// The secret in the file at `path`, read at most once per TTL.
    ///
    /// # Errors
    /// [`SecretError::File`] for an unreadable or empty file (kept for the TTL as well).
    pub async fn read(&self, path: &str) -> Result<SecretString, SecretError> {
        self.cache
            .get_with_by_ref(path, async {
                self.reads.fetch_add(1, Ordering::Relaxed);
                file_secret(path, tokio::fs::read_to_string(path).await)
            })
            .await
    }

    /// How many times a file was actually read.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for SecretFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretFiles")
            .field("cached", &self.cache.entry_count())
            .field("reads", &self.reads())
            .finish()
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
    fn an_env_secret_loses_its_trailing_newline_and_an_empty_one_is_named() {
        let env = |n: &str| match n {
            "WITH_NEWLINE" => Some("s3cret\n".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let got = SecretRef::new("env:WITH_NEWLINE")
            .resolve_with(env)
            .unwrap();
        assert_eq!(got.expose_secret(), "s3cret");
        let err = SecretRef::new("env:EMPTY").resolve_with(env).unwrap_err();
        assert_eq!(
            err.to_string(),
            "secret reference env:EMPTY names an environment variable that is not set or is empty"
        );
    }

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
        crate::domain::assert_sorts(
            SecretRef::check,
            &[
                "env:CONTOSO_GRAPH_SECRET",
                "env:_x1",
                "file:/run/secrets/graph",
                "abc8Q~x.y_z-1",
                "SG.aaaa.bbbb",
            ],
            &[
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
            ],
        );
        let err = SecretRef::check("https://user:hunter2@x").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[tokio::test]
    async fn a_file_secret_is_read_once_per_ttl_and_a_rotation_is_picked_up_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "first\n").unwrap();
        let reference = SecretRef::new(format!("file:{}", path.display()));
        let files = SecretFiles::new(Duration::from_millis(300));
        let resolve = async || {
            let secret = reference.resolve_cached(|_| None, &files).await.unwrap();
            secret.expose_secret().to_owned()
        };
        for _ in 0..50 {
            assert_eq!(resolve().await, "first");
        }
        assert_eq!(files.reads(), 1, "50 look-ups, one read");
        std::fs::write(&path, "second\n").unwrap();
        assert_eq!(resolve().await, "first", "kept for the TTL");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            resolve().await,
            "second",
            "rotated file picked up after the TTL"
        );
        assert_eq!(files.reads(), 2);
        std::fs::remove_file(&path).unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let err = reference
            .resolve_cached(|_| None, &files)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, SecretError::File { reason, .. } if !reason.is_empty()),
            "{err}"
        );
        assert!(!format!("{files:?}").contains("second"));
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
