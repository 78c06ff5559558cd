//! Graph access tokens: OAuth2 client credentials (the `oauth2` crate, secret in the request
//! body as Microsoft documents), cached per app and shared by every mailer of that app,
//! refreshed ahead of expiry, single-flight, with a 30 s pause after a refusal and a growing,
//! jittered pause after transient failures (every waiting send is deferred meanwhile).
//!
//! Here one app's [`TokenSource`] and its state; beside it the app and its identifiers
//! (`app.rs`), the per-process cache of sources (`cache.rs`) and the token request itself
//! (`fetch.rs`).
//!
//! Flow: <https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow>.

mod app;
mod cache;
mod fetch;

pub(crate) use app::{GraphApp, graph_scope, secret_fingerprint, token_url};
pub(crate) use cache::GraphTokenCache;

use std::{fmt, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use oauth2::{AuthType, ClientId, ClientSecret, TokenUrl, basic::BasicClient};
use secrecy::{ExposeSecret, SecretString};
use tokio::sync::Mutex;
use url::Url;

use crate::{
    clock::Clock,
    log_events,
    mailer::{MailError, graph::assertion},
};

pub(crate) use fetch::aadsts_code;
use fetch::{FetchError, GraphOAuthClient};

/// How long before its expiry a token is replaced: 5 minutes (never more than half the
/// token's lifetime, so a short-lived token is still used).
pub(crate) const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

/// After the token endpoint refused an app's credentials, the refusal is answered from cache
/// for 30 s: at most one token request per app per 30 s while the secret is wrong.
pub(crate) const REFUSAL_PAUSE: Duration = Duration::from_secs(30);

/// A bearer token. `Debug` shows only its generation (each fetch increments it).
#[derive(Clone)]
pub(crate) struct AccessToken {
    value: SecretString,
    generation: u64,
    /// Its `roles` claim, read once when it was fetched (`None`: not a readable JWT).
    roles: Option<Arc<[String]>>,
}

impl AccessToken {
    pub(crate) fn bearer(&self) -> &str {
        self.value.expose_secret()
    }

    /// The application permissions it carries; `None` when it cannot be read
    /// ([`super::permissions::roles_claim`]).
    pub(crate) fn roles(&self) -> Option<&[String]> {
        self.roles.as_deref()
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AccessToken(generation {})", self.generation)
    }
}

enum TokenState {
    Empty,
    Valid {
        token: AccessToken,
        refresh_at: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    },
    Refused {
        error: MailError,
        until: DateTime<Utc>,
    },
}

struct Inner {
    state: TokenState,
    generation: u64,
    /// Transient token-endpoint failures in a row, and until when no new request is made.
    transient_failures: u32,
    paused_until: Option<(DateTime<Utc>, String)>,
}

/// The pause after the `n`th transient token-endpoint failure in a row: 2 s × 2^(n−1), capped
/// at 60 s, jittered ([`crate::backoff::jittered`]). A token endpoint answering 500 for a minute
/// gets about 6 requests per app, not one per waiting send.
pub(crate) fn transient_backoff(n: u32) -> Duration {
    crate::backoff::jittered(n, Duration::from_secs(2), Duration::from_secs(60))
}

/// One app's token: fetched on first use, reused until [`REFRESH_MARGIN`] before expiry, then
/// replaced by exactly one request however many sends wait for it (they queue on one async
/// mutex, held only by the caller that fetches).
pub(crate) struct TokenSource {
    oauth: GraphOAuthClient,
    /// Set when the app's credential is a certificate: token requests carry a signed
    /// `client_assertion` instead of the secret.
    certificate: Option<assertion::CertificateCredential>,
    token_url: Url,
    http: reqwest::Client,
    clock: Arc<dyn Clock>,
    scope: String,
    graph_tenant_id: String,
    client_id: String,
    secret: SecretString,
    inner: Mutex<Inner>,
}

crate::debug_showing::debug_showing!(TokenSource {
    graph_tenant_id,
    client_id,
    scope
});

impl TokenSource {
    pub(super) fn new(
        app: GraphApp,
        token_url: Url,
        http: reqwest::Client,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailError> {
        let certificate = if assertion::is_certificate_bundle(app.client_secret.expose_secret()) {
            Some(
                assertion::CertificateCredential::from_pem(app.client_secret.expose_secret())
                    .map_err(|e| {
                        MailError::misconfigured(format!(
                            "app {} in tenant {}: {e}",
                            app.client_id, app.graph_tenant_id
                        ))
                    })?,
            )
        } else {
            None
        };
        let oauth = BasicClient::new(ClientId::new(app.client_id.clone()))
            .set_client_secret(ClientSecret::new(
                app.client_secret.expose_secret().to_owned(),
            ))
            .set_auth_type(AuthType::RequestBody)
            .set_token_uri(TokenUrl::from_url(token_url.clone()));
        Ok(Self {
            oauth,
            certificate,
            token_url,
            http,
            clock,
            scope: app.scope,
            graph_tenant_id: app.graph_tenant_id,
            client_id: app.client_id,
            secret: app.client_secret,
            inner: Mutex::new(Inner {
                state: TokenState::Empty,
                generation: 0,
                transient_failures: 0,
                paused_until: None,
            }),
        })
    }

    /// A token valid for at least the refresh margin, fetching one if needed.
    ///
    /// # Errors
    /// [`MailErrorKind::Unauthorized`](crate::mailer::MailErrorKind::Unauthorized) when the endpoint refused the credentials (now or within the
    /// last 30 s), with Microsoft's `AADSTS…` code; [`MailErrorKind::Transient`](crate::mailer::MailErrorKind::Transient) on network trouble
    /// or a token-endpoint server error (while the old token has not really expired, it is
    /// returned instead).
    pub(crate) async fn access_token(&self) -> Result<AccessToken, MailError> {
        let mut inner = self.inner.lock().await;
        let now = self.clock.now();
        match &inner.state {
            TokenState::Valid {
                token, refresh_at, ..
            } if now < *refresh_at => return Ok(token.clone()),
            TokenState::Refused { error, until } if now < *until => return Err(error.clone()),
            _ => {}
        }
        if let Some((until, why)) = &inner.paused_until
            && now < *until
        {
            return match &inner.state {
                TokenState::Valid {
                    token, expires_at, ..
                } if now < *expires_at => Ok(token.clone()),
                _ => Err(MailError::token_unavailable(
                    (*until - now).to_std().unwrap_or_default(),
                    why.clone(),
                )),
            };
        }
        match self.fetch().await {
            Ok((value, lifetime)) => {
                inner.transient_failures = 0;
                inner.paused_until = None;
                inner.generation += 1;
                let roles = super::permissions::roles_claim(value.expose_secret()).map(Arc::from);
                let token = AccessToken {
                    value,
                    generation: inner.generation,
                    roles,
                };
                let margin = REFRESH_MARGIN.min(lifetime / 2);
                inner.state = TokenState::Valid {
                    token: token.clone(),
                    refresh_at: now + chrono_duration(lifetime - margin),
                    expires_at: now + chrono_duration(lifetime),
                };
                tracing::info!(
                    event = log_events::GRAPH_TOKEN_FETCHED,
                    graph.tenant_id = %self.graph_tenant_id,
                    client_id = %self.client_id,
                    expires_in_s = lifetime.as_secs(),
                    "fetched a Graph access token"
                );
                Ok(token)
            }
            Err(FetchError::Refused(error)) => {
                tracing::error!(
                    event = log_events::GRAPH_TOKEN_REFUSED,
                    graph.tenant_id = %self.graph_tenant_id,
                    client_id = %self.client_id,
                    error = %error,
                    "the token endpoint refused the app's credentials"
                );
                inner.state = TokenState::Refused {
                    error: error.clone(),
                    until: now + chrono_duration(REFUSAL_PAUSE),
                };
                Err(error)
            }
            Err(FetchError::Transient(error)) => {
                inner.transient_failures += 1;
                let pause = transient_backoff(inner.transient_failures);
                let why = error.to_string();
                inner.paused_until = Some((now + chrono_duration(pause), why.clone()));
                tracing::warn!(
                    event = log_events::GRAPH_TOKEN_UNAVAILABLE,
                    graph.tenant_id = %self.graph_tenant_id,
                    client_id = %self.client_id,
                    failures = inner.transient_failures,
                    pause_ms = pause.as_millis() as u64,
                    error = %why,
                    "the token endpoint failed; no new token request during the pause"
                );
                match &inner.state {
                    TokenState::Valid {
                        token, expires_at, ..
                    } if now < *expires_at => Ok(token.clone()),
                    _ => Err(MailError::token_unavailable(pause, why)),
                }
            }
        }
    }

    /// Forgets `stale` (Graph answered 401 to it) so the next [`Self::access_token`] fetches a
    /// new one. A no-op when another caller already replaced it, so N sends that all saw a 401
    /// cause one fetch, not N.
    pub(crate) async fn invalidate(&self, stale: &AccessToken) {
        let mut inner = self.inner.lock().await;
        if let TokenState::Valid { token, .. } = &inner.state
            && token.generation == stale.generation
        {
            inner.state = TokenState::Empty;
        }
    }

    /// The app's client id (named in a pause's reason).
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// An error text of this app's requests with credentials and this app's secret (should
    /// Graph ever echo it) replaced by `***`; addresses were masked where Graph's text entered.
    pub(crate) fn scrub_known(&self, text: &str) -> String {
        crate::mailer::redact::redact_secrets(text, &[self.secret.expose_secret()])
    }
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}
