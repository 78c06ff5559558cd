//! SendGrid `mail/send` answers → what to do next. This is the ONE place a SendGrid status
//! becomes a [`MailError`]:
//!
//! | SendGrid answer              | verdict                                                      |
//! | ---------------------------- | ------------------------------------------------------------ |
//! | `202` (any 2xx)              | sent (`X-Message-Id` → provider id)                          |
//! | `429`                        | `Throttled`, `retry_after` = `X-RateLimit-Reset` (epoch s) − now, 0 if past, `None` if missing/garbage |
//! | `401`, `403`                 | `Unauthorized`                                               |
//! | `400`, `413`, other 4xx but 408 | `Permanent { code: "SendGrid<status>", message: SendGrid's errors }` |
//! | `408`, 5xx, 1xx/3xx, timeouts, connection errors | `Transient`                              |

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::mailer::{
    MailError, SendReceipt,
    http::{error_body, header, transport_failure},
    redact::scrub_provider_text,
};

/// The parts of a SendGrid answer the mapping reads: status, `X-Message-Id`,
/// `X-RateLimit-Reset` (Unix seconds) and the body (`{"errors":[…]}` on failures).
#[derive(Debug, Clone, Default)]
pub(crate) struct SendGridAnswer {
    status: u16,
    message_id: Option<String>,
    rate_limit_reset: Option<String>,
    body: Vec<u8>,
}

impl SendGridAnswer {
    /// What the mapping needs of `response`.
    pub(super) async fn read(response: reqwest::Response) -> Self {
        Self {
            status: response.status().as_u16(),
            message_id: header(&response, "x-message-id"),
            rate_limit_reset: header(&response, "x-ratelimit-reset"),
            body: error_body(response).await,
        }
    }
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
    let answer = outcome.map_err(|e| transport_failure("SendGrid mail/send", e))?;
    let status = answer.status;
    match status {
        200..=299 => Ok(SendReceipt {
            provider_id: answer.message_id,
            ..SendReceipt::default()
        }),
        429 => Err(MailError::throttled(parse_reset(
            answer.rate_limit_reset.as_deref(),
            now,
        ))),
        401 | 403 => Err(MailError::unauthorized(format!(
            "SendGrid refused the API key (HTTP {status}): {}",
            errors_text(&answer.body)
        ))),
        408 => Err(MailError::transient(
            "SendGrid mail/send answered 408 Request Timeout",
        )),
        400..=499 => Err(MailError::permanent(
            format!("SendGrid{status}"),
            format!(
                "SendGrid refused the message (HTTP {status}): {}",
                errors_text(&answer.body)
            ),
        )),
        500..=599 => Err(MailError::transient(format!(
            "SendGrid mail/send answered {status}: {}",
            errors_text(&answer.body)
        ))),
        _ => Err(MailError::transient(format!(
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
    use crate::mailer::MailErrorKind;
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
            answer(202, None, "").map_err(|e| e.kind),
            Ok(SendReceipt {
                provider_id: Some("sg-1".into()),
                ..SendReceipt::default()
            })
        );
        assert_eq!(
            answer(429, Some("1700000042"), "").map_err(|e| e.kind),
            Err(MailError::throttled(Some(Duration::from_secs(42))).kind)
        );
        assert_eq!(
            answer(429, Some("1600000000"), "").map_err(|e| e.kind),
            Err(MailError::throttled(Some(Duration::ZERO)).kind)
        );
        assert_eq!(
            answer(429, Some("soon"), "").map_err(|e| e.kind),
            Err(MailError::throttled(None).kind)
        );
        assert_eq!(
            answer(429, None, "").map_err(|e| e.kind),
            Err(MailError::throttled(None).kind)
        );
        let bad = r#"{"errors":[{"message":"Does not contain a valid address: lotte@example.com","field":"personalizations.0.to.0.email"}]}"#;
        assert_eq!(
            answer(400, None, bad).map_err(|e| e.kind),
            Err(MailError::permanent("SendGrid400", "SendGrid refused the message (HTTP 400): personalizations.0.to.0.email: Does not contain a valid address: l***@example.com").kind)
        );
        for status in [401, 403] {
            assert!(
                matches!(answer(status, None, r#"{"errors":[{"message":"The provided authorization grant is invalid, expired, or revoked"}]}"#),
                    Err(MailError { kind: MailErrorKind::Unauthorized(m), .. }) if m.contains("revoked")),
                "{status}"
            );
        }
        for status in [500, 502, 503, 408] {
            assert!(
                matches!(
                    answer(status, None, ""),
                    Err(MailError {
                        kind: MailErrorKind::Transient(_),
                        ..
                    })
                ),
                "{status}"
            );
        }
    }
}
