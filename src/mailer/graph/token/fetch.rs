//! The token request of one [`TokenSource`]: client credentials with the secret (the `oauth2`
//! crate) or with a certificate's signed assertion, and the refusal's text.

use std::time::Duration;

use oauth2::{
    EndpointNotSet, EndpointSet, RequestTokenError, Scope, TokenResponse,
    basic::{BasicClient, BasicErrorResponseType},
};
use secrecy::{ExposeSecret, SecretString};

use crate::mailer::{
    MailError, graph::assertion, http::transport_failure, redact::scrub_provider_text,
};

use super::TokenSource;

/// The lifetime assumed when the token endpoint omits `expires_in` (Entra ID always sends it;
/// its tokens live 60–90 minutes).
pub(crate) const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

pub(super) type GraphOAuthClient =
    BasicClient<EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

pub(super) enum FetchError {
    /// The endpoint refused the credentials: cached for [`REFUSAL_PAUSE`].
    Refused(MailError),
    /// Network trouble or a server error: not cached.
    Transient(MailError),
}

impl TokenSource {
    pub(super) async fn fetch(&self) -> Result<(SecretString, Duration), FetchError> {
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
                        Err(FetchError::Transient(MailError::transient(message)))
                    }
                    _ => Err(FetchError::Refused(MailError::unauthorized(message))),
                }
            }
            Err(RequestTokenError::Request(oauth2::HttpClientError::Reqwest(error))) => Err(
                FetchError::Transient(transport_failure("the Graph token request", *error)),
            ),
            Err(RequestTokenError::Request(other)) => Err(FetchError::Transient(
                MailError::transient(format!("the Graph token request failed: {other}")),
            )),
            Err(RequestTokenError::Parse(_, body)) => {
                Err(FetchError::Transient(MailError::transient(format!(
                    "the Graph token endpoint answered something that is not a token response ({} bytes)",
                    body.len()
                ))))
            }
            Err(RequestTokenError::Other(text)) => Err(FetchError::Transient(
                MailError::transient(format!("the Graph token endpoint answered badly: {text}")),
            )),
        }
    }

    /// The client-credentials request with a certificate: `client_assertion` (RS256, see
    /// [`super::assertion`]) instead of `client_secret`, the answer mapped like the secret's.
    async fn fetch_with_assertion(
        &self,
        certificate: &assertion::CertificateCredential,
    ) -> Result<(SecretString, Duration), FetchError> {
        let assertion = certificate
            .assertion(&self.client_id, self.token_url.as_str(), self.clock.now())
            .map_err(|e| FetchError::Refused(MailError::misconfigured(e)))?;
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", self.client_id.as_str()),
            ("scope", self.scope.as_str()),
            ("client_assertion_type", assertion::ASSERTION_TYPE),
            ("client_assertion", assertion.as_str()),
        ];
        let response = self
            .http
            .post(self.token_url.clone())
            .form(&form)
            .send()
            .await
            .map_err(|e| FetchError::Transient(transport_failure("the Graph token request", e)))?;
        let status = response.status().as_u16();
        let body = response.bytes().await.unwrap_or_default();
        #[derive(serde::Deserialize)]
        struct Answer {
            access_token: Option<String>,
            expires_in: Option<u64>,
            error: Option<String>,
            error_description: Option<String>,
        }
        let answer: Answer = serde_json::from_slice(&body).map_err(|e| {
            FetchError::Transient(MailError::transient(format!(
                "the Graph token endpoint answered HTTP {status} with something that is not a token response ({} bytes)",
                body.len()
            )).caused_by(e))
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
            Err(FetchError::Transient(MailError::transient(message)))
        } else {
            Err(FetchError::Refused(MailError::unauthorized(message)))
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
pub(crate) fn aadsts_code(text: &str) -> Option<String> {
    let start = text.find("AADSTS")?;
    let digits: String = text[start + 6..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (!digits.is_empty()).then(|| format!("AADSTS{digits}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
