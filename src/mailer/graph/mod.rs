//! `MicrosoftGraphMailer`: sends one message as one mailbox through Graph's
//! `POST /users/{mailbox}/sendMail` (<https://learn.microsoft.com/graph/api/user-sendmail>),
//! with an app-only token from [`token`]. The answer mapping lives in `answer.rs`.
//!
//! Layout: `token.rs` (OAuth2 client credentials, shared cache), `request.rs` (JSON body),
//! `answer.rs` (status → [`MailError`]), `retry_after.rs` (`Retry-After` parsing).

mod answer;
mod request;
pub mod retry_after;
pub mod token;

use std::{fmt, sync::Arc};

use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use url::Url;
use uuid::Uuid;

use crate::{
    clock::Clock,
    domain::{MailboxAddress, OutgoingMail},
    mailer::{
        MailError, Mailer, SendReceipt,
        validate::{check_sender, validate},
    },
};

use answer::{HttpAnswer, Verdict, interpret};
pub use request::send_mail_body;
pub use retry_after::parse_retry_after;
pub use token::{AccessToken, GraphApp, GraphTokenCache, TokenSource, graph_scope};

/// Sends as one mailbox with one app's token.
///
/// One `send` makes at most two `sendMail` requests: the second only after a `401`, with a
/// freshly fetched token and the byte-identical body. Never a second request after a `202`.
pub struct MicrosoftGraphMailer {
    http: reqwest::Client,
    send_url: Url,
    mailbox: MailboxAddress,
    save_to_sent_items: bool,
    tokens: Arc<TokenSource>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for MicrosoftGraphMailer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MicrosoftGraphMailer")
            .field("mailbox", &self.mailbox)
            .field("send_url", &self.send_url.as_str())
            .field("save_to_sent_items", &self.save_to_sent_items)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl MicrosoftGraphMailer {
    /// A mailer for `mailbox` posting to `{api_base_url}/users/{mailbox}/sendMail` (the mailbox
    /// path-encoded), with `saveToSentItems` = `save_to_sent_items` (`GRAPH_SAVE_TO_SENT_ITEMS`).
    /// `http` is the shared client (its timeout is `HTTP_TIMEOUT_MS`); `tokens` is the app's
    /// shared token source; `clock` dates HTTP-date `Retry-After` values.
    ///
    /// # Errors
    /// [`MailError::Misconfigured`] when `api_base_url` cannot carry a path.
    pub fn new(
        http: reqwest::Client,
        api_base_url: &Url,
        mailbox: MailboxAddress,
        save_to_sent_items: bool,
        tokens: Arc<TokenSource>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailError> {
        let mut send_url = api_base_url.clone();
        send_url
            .path_segments_mut()
            .map_err(|()| {
                MailError::Misconfigured(format!(
                    "GRAPH_API_BASE_URL {api_base_url} cannot be used as a base URL"
                ))
            })?
            .pop_if_empty()
            .extend(["users", mailbox.as_str(), "sendMail"]);
        Ok(Self {
            http,
            send_url,
            mailbox,
            save_to_sent_items,
            tokens,
            clock,
        })
    }

    /// The sending mailbox.
    pub fn mailbox(&self) -> &MailboxAddress {
        &self.mailbox
    }

    /// The `sendMail` URL.
    pub fn send_url(&self) -> &Url {
        &self.send_url
    }

    async fn post(
        &self,
        token: &AccessToken,
        message_id: Uuid,
        body: Vec<u8>,
    ) -> Result<HttpAnswer, reqwest::Error> {
        let response = self
            .http
            .post(self.send_url.clone())
            .bearer_auth(token.bearer())
            .header(CONTENT_TYPE, "application/json")
            .header("client-request-id", message_id.to_string())
            .body(body)
            .send()
            .await?;
        Ok(HttpAnswer {
            status: response.status().as_u16(),
            retry_after: crate::mailer::http::header(&response, RETRY_AFTER.as_str()),
            request_id: crate::mailer::http::header(&response, "request-id"),
            body: crate::mailer::http::error_body(response).await,
        })
    }
}

#[async_trait::async_trait]
impl Mailer for MicrosoftGraphMailer {
    /// Validates locally, then posts; see `answer.rs` for the mapping of Graph's answers.
    async fn send(&self, mail: &OutgoingMail) -> Result<SendReceipt, MailError> {
        validate(mail)?;
        check_sender(mail, &self.mailbox)?;
        let body = send_mail_body(mail, self.save_to_sent_items);
        let mut token = self.tokens.access_token().await?;
        let mut refreshed = false;
        loop {
            let outcome = self.post(&token, mail.id, body.clone()).await;
            match interpret(outcome, &self.mailbox, self.clock.now()) {
                Verdict::Sent(receipt) => return Ok(receipt),
                Verdict::Failed(error) => return Err(error),
                Verdict::TokenRejected(error) if refreshed => return Err(error),
                Verdict::TokenRejected(_) => {
                    self.tokens.invalidate(&token).await;
                    token = self.tokens.access_token().await?;
                    refreshed = true;
                }
            }
        }
    }
}
