//! [`GraphTokenCache`]: every app's [`TokenSource`], one per process.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Weak},
};

use crate::{clock::Clock, mailer::MailError};

use super::{GraphApp, TokenSource, app::token_url, secret_fingerprint};

#[derive(Clone, PartialEq, Eq, Hash)]
struct AppKey {
    token_url: String,
    client_id: String,
    secret_fingerprint: String,
    scope: String,
}

/// Every app's [`TokenSource`], keyed by (token URL — login URL and tenant —, client id,
/// secret fingerprint, scope). One per process, shared by all Graph mailers.
///
/// It holds its sources weakly: a source lives as long as some mailer holds it, so the cache
/// is bounded by the factory's (bounded) mailer cache and never outlives a mailer that still
/// uses its token.
pub(crate) struct GraphTokenCache {
    http: reqwest::Client,
    clock: Arc<dyn Clock>,
    apps: std::sync::Mutex<HashMap<AppKey, Weak<TokenSource>>>,
}

impl fmt::Debug for GraphTokenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphTokenCache")
            .field(
                "apps",
                &self.apps.lock().map(|apps| apps.len()).unwrap_or_default(),
            )
            .finish()
    }
}

impl GraphTokenCache {
    /// An empty cache fetching tokens through `http` (which must not follow redirects, see
    /// [`crate::mailer::http::build_http_client`]) and timing them with `clock`.
    pub(crate) fn new(http: reqwest::Client, clock: Arc<dyn Clock>) -> Self {
        Self {
            http,
            clock,
            apps: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The shared token source of `app`; while any mailer holds it, every call with the same
    /// app (same secret) returns the same `Arc`.
    ///
    /// # Errors
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) when the token URL cannot be built.
    pub(crate) fn source(&self, app: GraphApp) -> Result<Arc<TokenSource>, MailError> {
        let url = token_url(&app.login_base_url, &app.graph_tenant_id)?;
        let key = AppKey {
            token_url: url.to_string(),
            client_id: app.client_id.clone(),
            secret_fingerprint: secret_fingerprint(&app.client_secret),
            scope: app.scope.clone(),
        };
        // A poisoned lock only means another thread panicked mid-insert; the map is still whole.
        let mut apps = self
            .apps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(source) = apps.get(&key).and_then(Weak::upgrade) {
            return Ok(source);
        }
        apps.retain(|_, source| source.strong_count() > 0);
        let source = Arc::new(TokenSource::new(
            app,
            url,
            self.http.clone(),
            Arc::clone(&self.clock),
        )?);
        apps.insert(key, Arc::downgrade(&source));
        Ok(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::SecretString;
    use url::Url;

    fn app(secret: &str) -> GraphApp {
        GraphApp {
            login_base_url: Url::parse("https://login.microsoftonline.com").unwrap(),
            graph_tenant_id: "contoso.example".into(),
            client_id: "app-1".into(),
            client_secret: SecretString::from(secret),
            scope: "https://graph.microsoft.com/.default".into(),
        }
    }

    #[test]
    fn one_app_shares_one_source_while_a_mailer_holds_it() {
        let cache =
            GraphTokenCache::new(reqwest::Client::new(), Arc::new(crate::clock::SystemClock));
        let a = cache.source(app("one")).unwrap();
        let b = cache.source(app("one")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let rotated = cache.source(app("two")).unwrap();
        assert!(!Arc::ptr_eq(&a, &rotated));
        assert!(!format!("{a:?} {:?}", app("one")).contains("one\""));
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert_eq!(weak.strong_count(), 0, "the cache does not keep it alive");
        let _again = cache.source(app("one")).unwrap();
        assert_eq!(
            cache.apps.lock().unwrap().len(),
            2,
            "the dead entry was replaced"
        );
    }
}
