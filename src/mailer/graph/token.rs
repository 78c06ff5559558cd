//! Graph access tokens: OAuth2 client credentials (the `oauth2` crate, secret in the request
//! body as Microsoft documents), cached per app and shared by every mailer of that app,
//! refreshed ahead of expiry, single-flight, with a 30 s pause after a refusal and a growing,
//! jittered pause after transient failures (every waiting send is deferred meanwhile).
//!
//! Flow: <https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow>.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Weak},
    time::Duration,
};

use chrono::{DateTime, Utc};
use oauth2::{
    AuthType, ClientId, ClientSecret, EndpointNotSet, EndpointSet, RequestTokenError, Scope,
    TokenResponse, TokenUrl,
    basic::{BasicClient, BasicErrorResponseType},
};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use url::Url;

use crate::{
    clock::Clock,
    events,
    mailer::{MailError, http::describe_transport_error, redact::scrub_provider_text},
};

/// How long before its expiry a token is replaced: 5 minutes (never more than half the
/// token's lifetime, so a short-lived token is still used).
pub(crate) const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

/// After the token endpoint refused an app's credentials, the refusal is answered from cache
/// for 30 s: at most one token request per app per 30 s while the secret is wrong.
pub(crate) const REFUSAL_PAUSE: Duration = Duration::from_secs(30);

/// The lifetime assumed when the token endpoint omits `expires_in` (Entra ID always sends it;
/// its tokens live 60–90 minutes).
pub(crate) const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

type GraphOAuthClient =
    BasicClient<EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

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
            .field("login_base_url", &self.login_base_url.as_str())
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
/// [`MailError::Misconfigured`] when `login_base_url` cannot carry a path.
pub(crate) fn token_url(login_base_url: &Url, graph_tenant_id: &str) -> Result<Url, MailError> {
    let mut url = login_base_url.clone();
    url.path_segments_mut()
        .map_err(|()| {
            MailError::Misconfigured(format!(
                "GRAPH_LOGIN_BASE_URL {login_base_url} cannot be used as a base URL"
            ))
        })?
        .pop_if_empty()
        .push(graph_tenant_id)
        .extend(["oauth2", "v2.0", "token"]);
    Ok(url)
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

/// A bearer token. `Debug` shows only its generation (each fetch increments it).
#[derive(Clone)]
pub(crate) struct AccessToken {
    value: SecretString,
    generation: u64,
}

impl AccessToken {
    pub(crate) fn bearer(&self) -> &str {
        self.value.expose_secret()
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AccessToken(generation {})", self.generation)
    }
}

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
    /// [`MailError::Misconfigured`] when the token URL cannot be built.
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

enum FetchError {
    /// The endpoint refused the credentials: cached for [`REFUSAL_PAUSE`].
    Refused(MailError),
    /// Network trouble or a server error: not cached.
    Transient(MailError),
}

/// One app's token: fetched on first use, reused until [`REFRESH_MARGIN`] before expiry, then
/// replaced by exactly one request however many sends wait for it (they queue on one async
/// mutex, held only by the caller that fetches).
pub(crate) struct TokenSource {
    oauth: GraphOAuthClient,
    /// Set when the app's credential is a certificate: token requests carry a signed
    /// `client_assertion` instead of the secret.
    certificate: Option<super::assertion::CertificateCredential>,
    token_url: Url,
    http: reqwest::Client,
    clock: Arc<dyn Clock>,
    scope: String,
    graph_tenant_id: String,
    client_id: String,
    secret: SecretString,
    inner: Mutex<Inner>,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("graph_tenant_id", &self.graph_tenant_id)
            .field("client_id", &self.client_id)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    fn new(
        app: GraphApp,
        token_url: Url,
        http: reqwest::Client,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailError> {
        let certificate =
            if super::assertion::is_certificate_bundle(app.client_secret.expose_secret()) {
                Some(
                    super::assertion::CertificateCredential::from_pem(
                        app.client_secret.expose_secret(),
                    )
                    .map_err(|e| {
                        MailError::Misconfigured(format!(
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
    /// [`MailError::Unauthorized`] when the endpoint refused the credentials (now or within the
    /// last 30 s), with Microsoft's `AADSTS…` code; [`MailError::Transient`] on network trouble
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
                _ => Err(MailError::TokenUnavailable {
                    retry_after: (*until - now).to_std().unwrap_or_default(),
                    why: why.clone(),
                }),
            };
        }
        match self.fetch().await {
            Ok((value, lifetime)) => {
                inner.transient_failures = 0;
                inner.paused_until = None;
                inner.generation += 1;
                let token = AccessToken {
                    value,
                    generation: inner.generation,
                };
                let margin = REFRESH_MARGIN.min(lifetime / 2);
                inner.state = TokenState::Valid {
                    token: token.clone(),
                    refresh_at: now + chrono_duration(lifetime - margin),
                    expires_at: now + chrono_duration(lifetime),
                };
                tracing::info!(
                    event = events::GRAPH_TOKEN_FETCHED,
                    graph.tenant_id = %self.graph_tenant_id,
                    client_id = %self.client_id,
                    expires_in_s = lifetime.as_secs(),
                    "fetched a Graph access token"
                );
                Ok(token)
            }
            Err(FetchError::Refused(error)) => {
                tracing::error!(
                    event = events::GRAPH_TOKEN_REFUSED,
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
                    event = events::GRAPH_TOKEN_UNAVAILABLE,
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
                    _ => Err(MailError::TokenUnavailable {
                        retry_after: pause,
                        why,
                    }),
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

    async fn fetch(&self) -> Result<(SecretString, Duration), FetchError> {
        if let Some(certificate) = &self.certificate {
            return self.fetch_with_assertion(certificate).await;
        }
        let answer = self
            .oauth
            .exchange_client_credentials()
            .add_scope(Scope::new(self.scope.clone()))
            .request_async(&self.http)
            .await;
        match answer {
            Ok(response) => Ok((
                SecretString::from(response.access_token().secret().clone()),
                response
                    .expires_in()
                    .filter(|d| !d.is_zero())
                    .unwrap_or(DEFAULT_TOKEN_LIFETIME),
            )),
            Err(RequestTokenError::ServerResponse(refusal)) => {
                let message = self.refusal_message(
                    "",
                    refusal.error().as_ref(),
                    refusal.error_description().map(String::as_str),
                );
                match refusal.error() {
                    BasicErrorResponseType::Extension(ext)
                        if ext == "temporarily_unavailable" || ext == "server_error" =>
                    {
                        Err(FetchError::Transient(MailError::Transient(message)))
                    }
                    _ => Err(FetchError::Refused(MailError::Unauthorized(message))),
                }
            }
            Err(RequestTokenError::Request(oauth2::HttpClientError::Reqwest(error))) => {
                Err(FetchError::Transient(MailError::Transient(
                    describe_transport_error("the Graph token request", &error),
                )))
            }
            Err(RequestTokenError::Request(other)) => Err(FetchError::Transient(
                MailError::Transient(format!("the Graph token request failed: {other}")),
            )),
            Err(RequestTokenError::Parse(_, body)) => {
                Err(FetchError::Transient(MailError::Transient(format!(
                    "the Graph token endpoint answered something that is not a token response ({} bytes)",
                    body.len()
                ))))
            }
            Err(RequestTokenError::Other(text)) => Err(FetchError::Transient(
                MailError::Transient(format!("the Graph token endpoint answered badly: {text}")),
            )),
        }
    }

    /// The client-credentials request with a certificate: `client_assertion` (RS256, see
    /// [`super::assertion`]) instead of `client_secret`, the answer mapped like the secret's.
    async fn fetch_with_assertion(
        &self,
        certificate: &super::assertion::CertificateCredential,
    ) -> Result<(SecretString, Duration), FetchError> {
        let assertion = certificate
            .assertion(&self.client_id, self.token_url.as_str(), self.clock.now())
            .map_err(|e| FetchError::Refused(MailError::Misconfigured(e)))?;
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", self.client_id.as_str()),
            ("scope", self.scope.as_str()),
            ("client_assertion_type", super::assertion::ASSERTION_TYPE),
            ("client_assertion", assertion.as_str()),
        ];
        let response = self
            .http
            .post(self.token_url.clone())
            .form(&form)
            .send()
            .await
            .map_err(|e| {
                FetchError::Transient(MailError::Transient(describe_transport_error(
                    "the Graph token request",
                    &e,
                )))
            })?;
        let status = response.status().as_u16();
        let body = response.bytes().await.unwrap_or_default();
        #[derive(serde::Deserialize)]
        struct Answer {
            access_token: Option<String>,
            expires_in: Option<u64>,
            error: Option<String>,
            error_description: Option<String>,
        }
        let answer: Answer = serde_json::from_slice(&body).map_err(|_| {
            FetchError::Transient(MailError::Transient(format!(
                "the Graph token endpoint answered HTTP {status} with something that is not a token response ({} bytes)",
                body.len()
            )))
        })?;
        if (200..300).contains(&status)
            && let Some(token) = answer.access_token
        {
            let lifetime = answer
                .expires_in
                .filter(|s| *s > 0)
                .map_or(DEFAULT_TOKEN_LIFETIME, Duration::from_secs);
            return Ok((SecretString::from(token), lifetime));
        }
        let code = answer.error.unwrap_or_else(|| format!("HTTP {status}"));
        let message = self.refusal_message(
            &format!(" (certificate {})", certificate.thumbprint()),
            &code,
            answer.error_description.as_deref(),
        );
        if status >= 500 || code == "temporarily_unavailable" || code == "server_error" {
            Err(FetchError::Transient(MailError::Transient(message)))
        } else {
            Err(FetchError::Refused(MailError::Unauthorized(message)))
        }
    }

    /// The text of the token endpoint's refusal `code` for this app (`via`: how it
    /// authenticated, e.g. ` (certificate <thumbprint>)`, or empty), with the AADSTS code and
    /// the first line of `description` (scrubbed) when there is one.
    fn refusal_message(&self, via: &str, code: &str, description: Option<&str>) -> String {
        let description = description
            .map(|d| self.scrub(first_line(d)))
            .unwrap_or_default();
        let aadsts = aadsts_code(&description);
        format!(
            "the token endpoint refused app {} in tenant {}{via}: {code}{}{}",
            self.client_id,
            self.graph_tenant_id,
            aadsts.map(|c| format!(" ({c})")).unwrap_or_default(),
            if description.is_empty() {
                String::new()
            } else {
                format!(": {description}")
            },
        )
    }

    /// An error text of this app's requests with credentials and this app's secret (should
    /// Graph ever echo it) replaced by `***`; addresses were masked where Graph's text entered.
    pub(crate) fn scrub_known(&self, text: &str) -> String {
        crate::mailer::redact::redact_secrets(text, &[self.secret.expose_secret()])
    }

    /// Provider text with addresses masked and the secret (should it ever be echoed) removed.
    fn scrub(&self, text: &str) -> String {
        let secret = self.secret.expose_secret();
        let text = if secret.is_empty() {
            text.to_owned()
        } else {
            text.replace(secret, "***")
        };
        scrub_provider_text(&text)
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// `AADSTS7000215` from `"AADSTS7000215: Invalid client secret provided. …"`.
fn aadsts_code(text: &str) -> Option<String> {
    let start = text.find("AADSTS")?;
    let digits: String = text[start + 6..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (!digits.is_empty()).then(|| format!("AADSTS{digits}"))
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
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

    #[test]
    fn the_aadsts_code_is_found_in_microsofts_description() {
        assert_eq!(
            aadsts_code("AADSTS7000215: Invalid client secret provided."),
            Some("AADSTS7000215".into())
        );
        assert_eq!(aadsts_code("no code"), None);
        assert_eq!(aadsts_code("AADSTS: x"), None);
    }
}
