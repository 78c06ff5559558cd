//! One Entra ID app registration and what identifies it: its scope, its token URL and its
//! secret's fingerprint.

use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use url::Url;

use crate::mailer::MailError;

/// One Entra ID app registration, with its secret resolved.
#[derive(Clone)]
pub(crate) struct GraphApp {
    /// `GRAPH_LOGIN_BASE_URL`, e.g. `https://login.microsoftonline.com`.
    pub login_base_url: Url,
    /// Directory (tenant) id or verified domain.
    pub graph_tenant_id: String,
    /// Application (client) id.
    pub client_id: String,
    /// The client secret's value.
    pub client_secret: SecretString,
    /// The requested scope, see [`graph_scope`].
    pub scope: String,
}

impl fmt::Debug for GraphApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphApp")
            .field(
                "login_base_url",
                &crate::domain::redact_url(&self.login_base_url),
            )
            .field("graph_tenant_id", &self.graph_tenant_id)
            .field("client_id", &self.client_id)
            .field(
                "secret_fingerprint",
                &secret_fingerprint(&self.client_secret),
            )
            .field("scope", &self.scope)
            .finish()
    }
}

/// The client-credentials scope for the Graph resource behind `api_base_url`:
/// `<scheme>://<host>[:<port>]/.default`, so `https://graph.microsoft.com/v1.0` gives
/// `https://graph.microsoft.com/.default` and national clouds or a local stand-in get theirs.
pub(crate) fn graph_scope(api_base_url: &Url) -> String {
    format!("{}/.default", api_base_url.origin().ascii_serialization())
}

/// `{login_base_url}/{graph_tenant_id}/oauth2/v2.0/token`, the tenant id path-encoded.
///
/// # Errors
/// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) when `login_base_url` cannot carry a path.
pub(crate) fn token_url(login_base_url: &Url, graph_tenant_id: &str) -> Result<Url, MailError> {
    crate::mailer::http::endpoint_url(
        login_base_url,
        "GRAPH_LOGIN_BASE_URL",
        &[graph_tenant_id, "oauth2", "v2.0", "token"],
    )
}

/// A stable, non-reversible fingerprint of a secret for cache keys: the first 16 bytes of
/// SHA-256 over a domain tag and the secret, as 32 hex digits. Never logged with the secret.
pub(crate) fn secret_fingerprint(secret: &SecretString) -> String {
    let digest = Sha256::new()
        .chain_update(b"mail-worker secret fingerprint v1\0")
        .chain_update(secret.expose_secret().as_bytes())
        .finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_is_the_origin_of_the_graph_base_url() {
        let scope = |u: &str| graph_scope(&Url::parse(u).unwrap());
        assert_eq!(
            scope("https://graph.microsoft.com/v1.0"),
            "https://graph.microsoft.com/.default"
        );
        assert_eq!(
            scope("https://graph.microsoft.us/v1.0/"),
            "https://graph.microsoft.us/.default"
        );
        assert_eq!(
            scope("http://127.0.0.1:8123/v1.0"),
            "http://127.0.0.1:8123/.default"
        );
        assert_eq!(
            scope("https://graph.microsoft.com:443/v1.0"),
            "https://graph.microsoft.com/.default"
        );
    }

    #[test]
    fn the_token_url_appends_tenant_and_v2_path() {
        let url = |base: &str, t: &str| token_url(&Url::parse(base).unwrap(), t).unwrap();
        assert_eq!(
            url("https://login.microsoftonline.com", "contoso.example").as_str(),
            "https://login.microsoftonline.com/contoso.example/oauth2/v2.0/token"
        );
        assert_eq!(
            url("http://127.0.0.1:9/login/", "a b").as_str(),
            "http://127.0.0.1:9/login/a%20b/oauth2/v2.0/token"
        );
    }

    #[test]
    fn fingerprints_are_stable_short_and_differ_per_secret() {
        let a = secret_fingerprint(&SecretString::from("one"));
        assert_eq!(a, secret_fingerprint(&SecretString::from("one")));
        assert_eq!(a.len(), 32);
        assert_ne!(a, secret_fingerprint(&SecretString::from("two")));
        assert!(!a.contains("one"));
    }
}
