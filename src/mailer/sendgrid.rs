//! `SendGridMailer`: sends one message through SendGrid's v3 `POST /v3/mail/send`
//! (<https://www.twilio.com/docs/sendgrid/api-reference/mail-send/mail-send>). Not wrapped by our
//! limiter: SendGrid enforces its own, wider limits.
//!
//! The ONE place a SendGrid status becomes a [`MailError`] is `interpret`:
//!
//! | SendGrid answer              | verdict                                                      |
//! | ---------------------------- | ------------------------------------------------------------ |
//! | `202` (any 2xx)              | sent (`X-Message-Id` → provider id)                          |
//! | `429`                        | `Throttled`, `retry_after` = `X-RateLimit-Reset` (epoch s) − now, 0 if past, `None` if missing/garbage |
//! | `401`, `403`                 | `Unauthorized`                                               |
//! | `400`, `413`, other 4xx but 408 | `Permanent { code: "SendGrid<status>", message: SendGrid's errors }` |
//! | `408`, 5xx, 1xx/3xx, timeouts, connection errors | `Transient`                              |

use std::{fmt, sync::Arc, time::Duration};

use base64::Engine as _;
use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::{
    clock::Clock,
    domain::{BodyContentType, MailboxAddress, OutgoingMail, Recipient},
    mailer::{
        MailError, Mailer, SendAttempt, SendReceipt,
        http::{describe_transport_error, endpoint_url},
        redact::scrub_provider_text,
        validate::check_sender,
    },
};

/// Sends as one verified SendGrid sender with one API key.
pub struct SendGridMailer {
    http: reqwest::Client,
    send_url: Url,
    from: MailboxAddress,
    api_key: SecretString,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for SendGridMailer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendGridMailer")
            .field("from", &self.from)
            .field("send_url", &self.send_url.as_str())
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct MailSend<'a> {
    personalizations: [Personalization<'a>; 1],
    from: Address<'a>,
    subject: &'a str,
    content: [Content<'a>; 1],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    attachments: Vec<SgAttachment<'a>>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    headers: std::collections::BTreeMap<&'a str, &'a str>,
    custom_args: CustomArgs,
}

#[derive(Serialize)]
struct Personalization<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    to: Vec<Address<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cc: Vec<Address<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    bcc: Vec<Address<'a>>,
}

#[derive(Serialize)]
struct Address<'a> {
    email: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

#[derive(Serialize)]
struct Content<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    value: &'a str,
}

#[derive(Serialize)]
struct SgAttachment<'a> {
    content: String,
    #[serde(rename = "type")]
    kind: &'a str,
    filename: &'a str,
    disposition: &'static str,
}

#[derive(Serialize)]
struct CustomArgs {
    /// Our `messages.id`, echoed in SendGrid's event webhooks.
    mail_worker_message_id: String,
}

fn addresses(list: &[Recipient]) -> Vec<Address<'_>> {
    list.iter()
        .map(|r| Address {
            email: r.address.trim(),
            name: r.name.as_deref().filter(|n| !n.trim().is_empty()),
        })
        .collect()
}

/// The v3 JSON body: one personalization with to/cc/bcc (empty lists left out), `from`,
/// `subject`, one `content` (`text/plain` or `text/html`), base64 `attachments`, custom
/// `headers`, and `custom_args.mail_worker_message_id`.
pub(crate) fn mail_send_body(mail: &OutgoingMail, from: &MailboxAddress) -> Vec<u8> {
    let body = MailSend {
        personalizations: [Personalization {
            to: addresses(&mail.to),
            cc: addresses(&mail.cc),
            bcc: addresses(&mail.bcc),
        }],
        from: Address {
            email: from.as_str(),
            name: None,
        },
        subject: &mail.subject,
        content: [Content {
            kind: match mail.body_content_type {
                BodyContentType::Text => "text/plain",
                BodyContentType::Html => "text/html",
            },
            value: &mail.body,
        }],
        attachments: mail
            .attachments
            .iter()
            .map(|a| SgAttachment {
                content: base64::engine::general_purpose::STANDARD.encode(&a.content),
                kind: &a.content_type,
                filename: &a.name,
                disposition: "attachment",
            })
            .collect(),
        headers: mail
            .headers
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_str()))
            .collect(),
        custom_args: CustomArgs {
            mail_worker_message_id: mail.id.to_string(),
        },
    };
    // Serialising plain strings and vectors into memory cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

impl SendGridMailer {
    /// A mailer sending as `from` to `{api_base_url}/v3/mail/send` with `api_key` as bearer
    /// token. `http` is the shared client; `clock` turns `X-RateLimit-Reset` into a delay.
    ///
    /// # Errors
    /// [`MailError::Misconfigured`] when `api_base_url` cannot carry a path.
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
    async fn send_with(
        &self,
        mail: &OutgoingMail,
        _attempt: &SendAttempt<'_>,
    ) -> Result<SendReceipt, MailError> {
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
            Ok(response) => Ok(SendGridAnswer {
                status: response.status().as_u16(),
                message_id: crate::mailer::http::header(&response, "x-message-id"),
                rate_limit_reset: crate::mailer::http::header(&response, "x-ratelimit-reset"),
                body: crate::mailer::http::error_body(response).await,
            }),
            Err(error) => Err(error),
        };
        interpret(answer, self.clock.now()).map_err(|e| {
            e.map_text(|t| {
                crate::mailer::redact::redact_secrets(t, &[self.api_key.expose_secret()])
            })
        })
    }
}

/// The parts of a SendGrid answer the mapping reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct SendGridAnswer {
    status: u16,
    message_id: Option<String>,
    rate_limit_reset: Option<String>,
    body: Vec<u8>,
}

#[derive(Deserialize)]
struct SendGridErrors {
    #[serde(default)]
    errors: Vec<SendGridError>,
}

#[derive(Deserialize)]
struct SendGridError {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    field: Option<String>,
}

/// Maps one `mail/send` outcome (see the module table).
pub(crate) fn interpret(
    outcome: Result<SendGridAnswer, reqwest::Error>,
    now: DateTime<Utc>,
) -> Result<SendReceipt, MailError> {
    let answer = outcome
        .map_err(|e| MailError::Transient(describe_transport_error("SendGrid mail/send", &e)))?;
    let status = answer.status;
    match status {
        200..=299 => Ok(SendReceipt {
            provider_id: answer.message_id,
            ..SendReceipt::default()
        }),
        429 => Err(MailError::Throttled {
            retry_after: parse_reset(answer.rate_limit_reset.as_deref(), now),
        }),
        401 | 403 => Err(MailError::Unauthorized(format!(
            "SendGrid refused the API key (HTTP {status}): {}",
            errors_text(&answer.body)
        ))),
        408 => Err(MailError::Transient(
            "SendGrid mail/send answered 408 Request Timeout".to_owned(),
        )),
        400..=499 => Err(MailError::Permanent {
            code: format!("SendGrid{status}"),
            message: format!(
                "SendGrid refused the message (HTTP {status}): {}",
                errors_text(&answer.body)
            ),
        }),
        500..=599 => Err(MailError::Transient(format!(
            "SendGrid mail/send answered {status}: {}",
            errors_text(&answer.body)
        ))),
        _ => Err(MailError::Transient(format!(
            "SendGrid mail/send answered unexpected HTTP {status}"
        ))),
    }
}

/// `X-RateLimit-Reset` is the Unix time (s) when the limit resets; the delay is from `now`.
fn parse_reset(value: Option<&str>, now: DateTime<Utc>) -> Option<Duration> {
    let reset: i64 = value?.trim().parse().ok()?;
    let at = DateTime::<Utc>::from_timestamp(reset, 0)?;
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// `field: message; …` from SendGrid's `{"errors":[{"message","field"}]}`, addresses masked.
fn errors_text(body: &[u8]) -> String {
    let parts: Vec<String> = serde_json::from_slice::<SendGridErrors>(body)
        .map(|e| e.errors)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| match (e.field, e.message) {
            (Some(field), Some(message)) => Some(format!("{field}: {message}")),
            (None, Some(message)) => Some(message),
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        "no error details".to_owned()
    } else {
        scrub_provider_text(&parts.join("; "))
    }
}

/// The fuzz target's door to [`interpret`] (`fuzz/fuzz_targets/answers.rs`); only with the
/// `fuzzing` feature.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_interpret(
    status: u16,
    message_id: Option<String>,
    rate_limit_reset: Option<String>,
    body: Vec<u8>,
    now: DateTime<Utc>,
) -> Result<SendReceipt, MailError> {
    interpret(
        Ok(SendGridAnswer {
            status,
            message_id,
            rate_limit_reset,
            body,
        }),
        now,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailer::validate::tests::{header, mail, rcpt};
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000, 0).unwrap()
    }

    fn answer(status: u16, reset: Option<&str>, body: &str) -> Result<SendReceipt, MailError> {
        interpret(
            Ok(SendGridAnswer {
                status,
                message_id: Some("sg-1".into()),
                rate_limit_reset: reset.map(str::to_owned),
                body: body.as_bytes().to_vec(),
            }),
            now(),
        )
    }

    #[test]
    fn every_row_of_the_sendgrid_mapping() {
        assert_eq!(
            answer(202, None, ""),
            Ok(SendReceipt {
                provider_id: Some("sg-1".into()),
                ..SendReceipt::default()
            })
        );
        assert_eq!(
            answer(429, Some("1700000042"), ""),
            Err(MailError::Throttled {
                retry_after: Some(Duration::from_secs(42))
            })
        );
        assert_eq!(
            answer(429, Some("1600000000"), ""),
            Err(MailError::Throttled {
                retry_after: Some(Duration::ZERO)
            })
        );
        assert_eq!(
            answer(429, Some("soon"), ""),
            Err(MailError::Throttled { retry_after: None })
        );
        assert_eq!(
            answer(429, None, ""),
            Err(MailError::Throttled { retry_after: None })
        );
        let bad = r#"{"errors":[{"message":"Does not contain a valid address: lotte@example.com","field":"personalizations.0.to.0.email"}]}"#;
        assert_eq!(
            answer(400, None, bad),
            Err(MailError::Permanent {
                code: "SendGrid400".into(),
                message: "SendGrid refused the message (HTTP 400): personalizations.0.to.0.email: Does not contain a valid address: l***@example.com".into()
            })
        );
        for status in [401, 403] {
            assert!(
                matches!(answer(status, None, r#"{"errors":[{"message":"The provided authorization grant is invalid, expired, or revoked"}]}"#),
                    Err(MailError::Unauthorized(ref m)) if m.contains("revoked")),
                "{status}"
            );
        }
        for status in [500, 502, 503, 408] {
            assert!(
                matches!(answer(status, None, ""), Err(MailError::Transient(_))),
                "{status}"
            );
        }
    }

    #[test]
    fn the_v3_body_has_personalizations_content_and_headers() {
        let mut m = mail();
        m.bcc = vec![rcpt("b@example.org")];
        m.headers = vec![header("X-Campaign", "7")];
        let from = m.from.clone();
        let json: serde_json::Value = serde_json::from_slice(&mail_send_body(&m, &from)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "personalizations": [{
                    "to": [{"email": "lotte.jansen@example.com", "name": "Lotte"}],
                    "bcc": [{"email": "b@example.org"}]
                }],
                "from": {"email": "events@contoso.example"},
                "subject": "Hello",
                "content": [{"type": "text/plain", "value": "Hi"}],
                "headers": {"X-Campaign": "7"},
                "custom_args": {"mail_worker_message_id": m.id.to_string()}
            })
        );
    }
}
