//! `SendGridMailer`: sends one message through SendGrid's v3 `POST /v3/mail/send`
//! (<https://www.twilio.com/docs/sendgrid/api-reference/mail-send/mail-send>). Not wrapped by our
//! limiter: SendGrid enforces its own, wider limits. Beside it: the JSON body (`body.rs`) and
//! the ONE status → [`MailError`] mapping (`answer.rs`).

mod answer;
mod body;

#[cfg(feature = "fuzzing")]
pub use answer::fuzz_interpret;

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use url::Url;

use crate::{
    clock::Clock,
    domain::{MailboxAddress, OutgoingMail},
    mailer::{
        MailError, MailResult, Mailer, SendAttempt, http::endpoint_url, validate::check_sender,
    },
};

use answer::{SendGridAnswer, interpret};
use body::mail_send_body;

/// Sends as one verified SendGrid sender with one API key (its `Debug` shows the key as
/// `[REDACTED]`).
#[derive(Debug)]
pub struct SendGridMailer {
    http: reqwest::Client,
    send_url: Url,
    from: MailboxAddress,
    api_key: SecretString,
    clock: Arc<dyn Clock>,
}

impl SendGridMailer {
    /// A mailer sending as `from` to `{api_base_url}/v3/mail/send` with `api_key` as bearer
    /// token. `http` is the shared client; `clock` turns `X-RateLimit-Reset` into a delay.
    ///
    /// # Errors
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) when `api_base_url` cannot carry a path.
    pub(crate) fn new(
        http: reqwest::Client,
        api_base_url: &Url,
        from: MailboxAddress,
        api_key: SecretString,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailError> {
        let send_url = endpoint_url(
            api_base_url,
            "SENDGRID_API_BASE_URL",
            &["v3", "mail", "send"],
        )?;
        Ok(Self {
            http,
            send_url,
            from,
            api_key,
            clock,
        })
    }
}

#[async_trait::async_trait]
impl Mailer for SendGridMailer {
    /// Validates locally and sends; SendGrid has no steps, so `attempt` changes nothing.
    async fn send_with(&self, mail: &OutgoingMail, _attempt: &SendAttempt<'_>) -> MailResult {
        self.check(mail)?;
        check_sender(mail, &self.from)?;
        let outcome = self
            .http
            .post(self.send_url.clone())
            .bearer_auth(self.api_key.expose_secret())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(mail_send_body(mail, &self.from))
            .send()
            .await;
        let answer = match outcome {
            Ok(response) => Ok(SendGridAnswer::read(response).await),
            Err(error) => Err(error),
        };
        interpret(answer, self.clock.now()).map_err(|e| {
            e.map_text(|t| {
                crate::mailer::redact::redact_secrets(t, &[self.api_key.expose_secret()])
            })
        })
    }
}
