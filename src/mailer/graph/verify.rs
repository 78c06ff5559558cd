//! The Graph requests of `mail-worker senders verify` (`crate::service::verify`): a fresh token
//! through the product's own token code (a new [`TokenSource`], not the shared cache), and
//! harmless mailbox requests whose raw answers (status, Graph's error code) the checks explain.
//! Nothing here sends a message; the test message of `--send-test-to` goes through the mailer
//! factory like any other send, and [`GraphProbe::find_in_sent_items`] looks for it.

use std::sync::Arc;

use reqwest::Method;
use secrecy::ExposeSecret;
use url::Url;

use crate::{
    clock::Clock,
    domain::MailboxAddress,
    mailer::{
        MailError,
        http::{endpoint_url, transport_failure},
        redact::scrub_provider_text,
    },
};

use super::{AccessToken, GraphApp, TokenSource, assertion, permissions, segments, token};

/// What a sender authenticates with, as the report names it (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Credential {
    /// A client secret.
    Secret,
    /// A certificate: its `x5t#S256` thumbprint and when it expires (`Err`: unreadable).
    Certificate {
        thumbprint: String,
        not_after: Result<chrono::DateTime<chrono::Utc>, String>,
    },
}

/// What a fresh token says about the grant: its application permissions (`roles`; `None`: not
/// a readable JWT) and its delegated ones (`scp`), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub roles: Option<Vec<String>>,
    pub delegated: Option<String>,
}

/// Graph's answer to one request: its status and, for an error, Graph's `error.code` and
/// `error.message` (addresses masked, the secret removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeAnswer {
    pub status: u16,
    pub code: Option<String>,
    pub message: Option<String>,
}

impl ProbeAnswer {
    /// Whether Graph accepted the request (2xx).
    pub(crate) fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// One sender's app and mailbox, for the checks' requests.
pub(crate) struct GraphProbe {
    http: reqwest::Client,
    user_url: Url,
    mailbox: MailboxAddress,
    tokens: TokenSource,
    credential: Credential,
    token: tokio::sync::Mutex<Option<AccessToken>>,
}

crate::debug_showing::debug_showing!(GraphProbe {
    user_url,
    credential
});

impl GraphProbe {
    /// A probe for `mailbox` with `app` (its secret resolved), on its own token source: the
    /// token it fetches is fresh, whatever the daemon has cached.
    ///
    /// # Errors
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) when a URL cannot be built or a certificate bundle cannot be
    /// read (the text names what is wrong, never the key).
    pub(crate) fn new(
        http: reqwest::Client,
        api_base_url: &Url,
        app: GraphApp,
        mailbox: &MailboxAddress,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailError> {
        let pem = app.client_secret.expose_secret();
        let credential = if assertion::is_certificate_bundle(pem) {
            Credential::Certificate {
                thumbprint: assertion::certificate_thumbprint(pem).unwrap_or_default(),
                not_after: assertion::certificate_not_after(pem),
            }
        } else {
            Credential::Secret
        };
        let user_url = endpoint_url(
            api_base_url,
            "GRAPH_API_BASE_URL",
            &["users", mailbox.as_str()],
        )?;
        let token_url = token::token_url(&app.login_base_url, &app.graph_tenant_id)?;
        let tokens = TokenSource::new(app, token_url, http.clone(), clock)?;
        Ok(Self {
            http,
            user_url,
            mailbox: mailbox.clone(),
            tokens,
            credential,
            token: tokio::sync::Mutex::new(None),
        })
    }

    /// The credential's kind (and a certificate's thumbprint and expiry).
    pub(crate) fn credential(&self) -> &Credential {
        &self.credential
    }

    /// A fresh token request; what the token grants.
    ///
    /// # Errors
    /// The token endpoint's refusal ([`MailErrorKind::Unauthorized`](crate::mailer::MailErrorKind::Unauthorized) with the `AADSTS…` code), or
    /// trouble reaching it.
    pub(crate) async fn fetch_token(&self) -> Result<Grant, MailError> {
        let token = self.tokens.access_token().await?;
        let grant = Grant {
            roles: token.roles().map(<[String]>::to_vec),
            delegated: permissions::delegated_scopes(token.bearer()),
        };
        *self.token.lock().await = Some(token);
        Ok(grant)
    }

    /// `POST /users/{mailbox}/messages` (a draft addressed to the mailbox itself, saying what
    /// it is; never sent), then `DELETE` it: the answer of the first request that was not a
    /// success, else the delete's. (Graph takes a draft without recipients too; graph-sim
    /// checks a draft's recipients at creation, so the draft has one.)
    ///
    /// # Errors
    /// No token yet, or a transport failure (described).
    pub(crate) async fn create_and_delete_draft(&self) -> Result<ProbeAnswer, MailError> {
        let body = serde_json::json!({
            "subject": "mail-worker senders verify: a check draft, deleted at once",
            "body": {
                "contentType": "Text",
                "content": "Created by `mail-worker senders verify` to check that the app may write to this mailbox; deleted right after. Nothing was sent."
            },
            "toRecipients": [{"emailAddress": {"address": self.mailbox.as_str()}}],
        });
        let url = segments(&self.user_url, &["messages"]);
        let (created, bytes) = self
            .request(Method::POST, &url, Some(body.to_string().into_bytes()))
            .await?;
        if !created.ok() {
            return Ok(created);
        }
        let id = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("id").and_then(|id| id.as_str()).map(str::to_owned))
            .ok_or_else(|| {
                MailError::transient("Graph created the check draft but its answer carries no id")
            })?;
        let url = segments(&self.user_url, &["messages", &id]);
        Ok(self.request(Method::DELETE, &url, None).await?.0)
    }

    /// `GET /users/{mailbox}/messages?$top=1&$select=id`: reads, changes nothing.
    ///
    /// # Errors
    /// As [`Self::create_and_delete_draft`].
    pub(crate) async fn read_one(&self) -> Result<ProbeAnswer, MailError> {
        let mut url = segments(&self.user_url, &["messages"]);
        url.query_pairs_mut()
            .append_pair("$top", "1")
            .append_pair("$select", "id");
        Ok(self.request(Method::GET, &url, None).await?.0)
    }

    /// `GET /users/{mailbox}/mailFolders/sentitems/messages?$filter=internetMessageId eq '…'`:
    /// the id of the Sent Items copy, if there is one yet.
    ///
    /// # Errors
    /// As [`Self::create_and_delete_draft`]; Graph's refusal as [`MailErrorKind::Transient`](crate::mailer::MailErrorKind::Transient).
    pub(crate) async fn find_in_sent_items(&self, imid: &str) -> Result<Option<String>, MailError> {
        let mut url = segments(&self.user_url, &["mailFolders", "sentitems", "messages"]);
        url.query_pairs_mut()
            .append_pair(
                "$filter",
                &format!("internetMessageId eq '{}'", imid.replace('\'', "''")),
            )
            .append_pair("$select", "id,internetMessageId");
        let (answer, bytes) = self.request(Method::GET, &url, None).await?;
        if !answer.ok() {
            return Err(MailError::transient(format!(
                "Graph answered HTTP {} {} to the Sent Items look-up",
                answer.status,
                answer.code.unwrap_or_default()
            )));
        }
        Ok(serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| {
                v.get("value")?
                    .as_array()?
                    .first()?
                    .get("id")?
                    .as_str()
                    .map(str::to_owned)
            }))
    }

    async fn request(
        &self,
        method: Method,
        url: &Url,
        body: Option<Vec<u8>>,
    ) -> Result<(ProbeAnswer, Vec<u8>), MailError> {
        let token =
            self.token.lock().await.clone().ok_or_else(|| {
                MailError::misconfigured("no token: the credentials check failed")
            })?;
        let mut request = self
            .http
            .request(method, url.clone())
            .bearer_auth(token.bearer())
            .header("client-request-id", uuid::Uuid::new_v4().to_string());
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| transport_failure("the Graph request", e))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default();
        let (code, message) = if (200..300).contains(&status) {
            (None, None)
        } else {
            graph_error(&bytes)
        };
        let message = message.map(|m| self.tokens.scrub_known(&scrub_provider_text(&m)));
        Ok((
            ProbeAnswer {
                status,
                code,
                message,
            },
            bytes,
        ))
    }
}

/// Graph's `{"error":{"code","message"}}`.
fn graph_error(body: &[u8]) -> (Option<String>, Option<String>) {
    let value: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        value
            .as_ref()
            .and_then(|v| v.get("error")?.get(name)?.as_str().map(str::to_owned))
    };
    (field("code"), field("message"))
}
