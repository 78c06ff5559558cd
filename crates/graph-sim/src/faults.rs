//! Fault injection: added latency, scripted sendMail answers and token endpoint failures, per
//! mailbox or global; set in process or through `POST /_sim/...`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::SimError;

/// Which requests a fault applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Every mailbox that has no fault of its own.
    Global,
    /// One mailbox, by address (case-insensitive) or id.
    Mailbox(String),
}

impl Target {
    /// One mailbox, by address or id.
    pub fn mailbox(address_or_id: impl Into<String>) -> Self {
        Self::Mailbox(address_or_id.into())
    }
}

/// Latency added to each sendMail request after it took its concurrency slot (so slow requests
/// hold their slot, as real ones do). A mailbox's own latency replaces the global one.
///
/// JSON: `"none"`, `{"fixed": 250}`, `{"uniform": [100, 400]}` (ms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Latency {
    /// No added latency (default).
    #[default]
    None,
    /// Exactly this many ms.
    Fixed(u64),
    /// Uniformly between these ms (inclusive).
    Uniform(u64, u64),
}

impl Latency {
    pub(crate) fn check(self) -> Result<Self, SimError> {
        match self {
            Self::Uniform(min, max) if min > max => Err(SimError::InvalidFault(format!(
                "uniform latency needs min <= max, got {min} > {max}"
            ))),
            other => Ok(other),
        }
    }

    /// Draws one delay.
    pub(crate) fn sample(self) -> Duration {
        match self {
            Self::None => Duration::ZERO,
            Self::Fixed(ms) => Duration::from_millis(ms),
            Self::Uniform(min, max) => {
                use rand::Rng;
                Duration::from_millis(rand::rng().random_range(min..=max))
            }
        }
    }
}

/// One scripted sendMail answer, used once by the next request of its target that got past
/// authentication, mailbox lookup, concurrency and request quota.
///
/// - `deliver = false`: the answer is given instead of processing the message (nothing is
///   recorded), e.g. `503` without `Retry-After`, `429` with `Retry-After: 2.128`.
/// - `deliver = true`: the message is validated, checked against the limits and recorded as
///   usual; if that succeeds the answer is this one instead of `202` (Graph sometimes delivers
///   and still answers `504`, or answers `202` with a `Retry-After`). If validation or a limit
///   refuses the message, that refusal is the answer and the scripted answer is used up.
///
/// Non-2xx answers carry Graph's error body with `code` (default by status: 429
/// `ApplicationThrottled`, 500 `ErrorInternalServerError`, 503 `ErrorServerBusy`, 504
/// `UnknownError`, else `generalException`). JSON:
/// `{"status":429,"retry_after":"2.128"}`, `{"status":504,"deliver":true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScriptedAnswer {
    /// HTTP status, 200–599.
    pub status: u16,
    /// The error body's `code`; `None` = the default for `status`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The error body's `message`; `None` = a generic one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The raw `Retry-After` header value (seconds such as `2.128`, or an HTTP-date); `None` =
    /// no header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<String>,
    /// Whether the message is processed and recorded before this answer is given.
    #[serde(default)]
    pub deliver: bool,
    /// After recording (with `deliver`), close the connection without any answer (the client
    /// sees a reset / "connection closed before message completed").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    /// Wait this many ms before answering: after recording with `deliver` ("accepted, answered
    /// late", past the client's timeout), or instead of delivering without it (a hang).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_ms: Option<u64>,
}

impl ScriptedAnswer {
    /// An answer with this status, no `Retry-After`, not delivering.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            code: None,
            message: None,
            retry_after: None,
            deliver: false,
            reset: false,
            late_ms: None,
        }
    }

    /// Records the message as delivered, then resets the connection without an answer.
    pub fn reset_after_delivery() -> Self {
        Self {
            reset: true,
            ..Self::status(202).delivering()
        }
    }

    /// Records the message as delivered, then answers `202` only after `late_ms` (past the
    /// client's timeout).
    pub fn late_after_delivery(late_ms: u64) -> Self {
        Self {
            late_ms: Some(late_ms),
            ..Self::status(202).delivering()
        }
    }

    /// `503` with this `Retry-After` after recording the message as delivered.
    pub fn unavailable_after_delivery(retry_after: impl Into<String>) -> Self {
        Self::status(503).with_retry_after(retry_after).delivering()
    }

    /// Hangs for `ms` without delivering, then answers `504` (a request a killed client never
    /// sees answered).
    pub fn hang_without_delivery(ms: u64) -> Self {
        Self {
            late_ms: Some(ms),
            ..Self::status(504)
        }
    }

    /// How graph-sim records this answer's fault on a delivered message.
    pub(crate) fn fault_label(&self) -> Option<String> {
        if self.reset {
            Some("reset".into())
        } else if let Some(ms) = self.late_ms {
            Some(format!("late {ms} ms"))
        } else if (200..300).contains(&self.status) && self.retry_after.is_none() {
            None
        } else {
            Some(format!("status {}", self.status))
        }
    }

    /// `503` without `Retry-After`.
    pub fn unavailable() -> Self {
        Self::status(503)
    }

    /// `429` with this raw `Retry-After` value (e.g. `"2.128"`).
    pub fn throttled(retry_after: impl Into<String>) -> Self {
        Self::status(429).with_retry_after(retry_after)
    }

    /// `429 ApplicationThrottled` "Application is over its MailboxConcurrency limit." with
    /// `Retry-After: 1`: Outlook's limit of 4 concurrent requests per app and mailbox
    /// (<https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>), on
    /// demand. `n` of them in a row ([`crate::SimServer::mailbox_concurrency_storm`]) are a
    /// storm.
    pub fn mailbox_concurrency() -> Self {
        Self::throttled("1")
            .with_code("ApplicationThrottled")
            .with_message("Application is over its MailboxConcurrency limit.")
    }

    /// `429 ApplicationThrottled` "Application is over its IncomingBytes limit." with
    /// `Retry-After: 1`: Outlook's 150 MB uploaded per 5 minutes per app and mailbox
    /// (<https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>).
    pub fn incoming_bytes() -> Self {
        Self::throttled("1")
            .with_code("ApplicationThrottled")
            .with_message("Application is over its IncomingBytes limit.")
    }

    /// Sets the error body's `message`.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// `504` after recording the message as delivered.
    pub fn gateway_timeout_after_delivery() -> Self {
        Self::status(504).delivering()
    }

    /// `202` with a `Retry-After` header, after recording the message as delivered.
    pub fn accepted_with_retry_after(retry_after: impl Into<String>) -> Self {
        Self::status(202).with_retry_after(retry_after).delivering()
    }

    /// Sets the raw `Retry-After` value.
    pub fn with_retry_after(mut self, value: impl Into<String>) -> Self {
        self.retry_after = Some(value.into());
        self
    }

    /// Sets `Retry-After` to an HTTP-date (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110 §5.6.7).
    pub fn with_retry_after_date(self, at: DateTime<Utc>) -> Self {
        self.with_retry_after(at.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
    }

    /// Sets the error body's `code`.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// Processes and records the message before answering.
    pub fn delivering(mut self) -> Self {
        self.deliver = true;
        self
    }

    pub(crate) fn check(&self) -> Result<(), SimError> {
        if !(200..=599).contains(&self.status) {
            return Err(SimError::InvalidFault(format!(
                "scripted status {} is not 200-599",
                self.status
            )));
        }
        if let Some(v) = &self.retry_after
            && axum::http::HeaderValue::from_str(v).is_err()
        {
            return Err(SimError::InvalidFault(format!(
                "Retry-After {v:?} is not a valid header value"
            )));
        }
        Ok(())
    }

    /// The error `code` this answer carries.
    pub(crate) fn error_code(&self) -> String {
        if let Some(code) = &self.code {
            return code.clone();
        }
        match self.status {
            429 => "ApplicationThrottled",
            500 => "ErrorInternalServerError",
            503 => "ErrorServerBusy",
            504 => "UnknownError",
            _ => "generalException",
        }
        .to_owned()
    }

    /// The error `message` this answer carries.
    pub(crate) fn error_message(&self) -> String {
        self.message.clone().unwrap_or_else(|| match self.status {
            429 => "Application is over its MailboxConcurrency limit.".to_owned(),
            503 => "The server is busy. Try again later.".to_owned(),
            504 => "The operation timed out.".to_owned(),
            s => format!("graph-sim scripted answer {s}."),
        })
    }
}

/// One scripted token endpoint failure, used once by the next token request (of any app).
///
/// Answered in Entra ID's shape: `{"error", "error_description": "AADSTS<code>: <description>
/// Trace ID: … Correlation ID: … Timestamp: …", "error_codes": [code], "timestamp", "trace_id",
/// "correlation_id", "error_uri"}`. JSON:
/// `{"status":503,"error":"temporarily_unavailable","error_code":50000,"description":"…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenFault {
    /// HTTP status, 400–599.
    pub status: u16,
    /// The OAuth `error`, e.g. `temporarily_unavailable`.
    pub error: String,
    /// The AADSTS number, e.g. 50000.
    pub error_code: u32,
    /// The description after `AADSTS<code>: `.
    pub description: String,
}

impl TokenFault {
    /// `500 server_error` AADSTS50000 ("There was an error issuing a token or an issue with our
    /// sign-in service.", <https://learn.microsoft.com/entra/identity-platform/reference-error-codes>).
    pub fn server_error() -> Self {
        Self {
            status: 500,
            error: "server_error".into(),
            error_code: 50000,
            description: "There was an error issuing a token or an issue with our sign-in service."
                .into(),
        }
    }

    /// `503 temporarily_unavailable` AADSTS50000: Entra ID is briefly down.
    pub fn unavailable() -> Self {
        Self {
            status: 503,
            error: "temporarily_unavailable".into(),
            ..Self::server_error()
        }
    }

    /// `401 invalid_client` AADSTS7000222: the secret expired (it was right before).
    pub fn secret_expired() -> Self {
        Self {
            status: 401,
            error: "invalid_client".into(),
            error_code: 7000222,
            description: "The provided client secret keys for app are expired.".into(),
        }
    }

    pub(crate) fn check(&self) -> Result<(), SimError> {
        if !(400..=599).contains(&self.status) {
            return Err(SimError::InvalidFault(format!(
                "token fault status {} is not 400-599",
                self.status
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_answers_read_from_json_as_documented() {
        let a: ScriptedAnswer =
            serde_json::from_str(r#"{"status":429,"retry_after":"2.128"}"#).unwrap();
        assert_eq!(a, ScriptedAnswer::throttled("2.128"));
        let b: ScriptedAnswer = serde_json::from_str(r#"{"status":504,"deliver":true}"#).unwrap();
        assert_eq!(b, ScriptedAnswer::gateway_timeout_after_delivery());
        assert_eq!(b.error_code(), "UnknownError");
        let l: Latency = serde_json::from_str(r#"{"uniform":[100,400]}"#).unwrap();
        assert_eq!(l, Latency::Uniform(100, 400));
        let t: Target = serde_json::from_str(r#"{"mailbox":"a@b.example"}"#).unwrap();
        assert_eq!(t, Target::mailbox("a@b.example"));
    }

    #[test]
    fn an_http_date_retry_after_uses_the_imf_fixdate_format() {
        let at = chrono::DateTime::parse_from_rfc3339("1994-11-06T08:49:37Z")
            .unwrap()
            .with_timezone(&Utc);
        let a = ScriptedAnswer::status(429).with_retry_after_date(at);
        assert_eq!(
            a.retry_after.as_deref(),
            Some("Sun, 06 Nov 1994 08:49:37 GMT")
        );
    }

    #[test]
    fn impossible_faults_are_refused() {
        assert!(ScriptedAnswer::status(99).check().is_err());
        assert!(
            ScriptedAnswer::status(429)
                .with_retry_after("a\nb")
                .check()
                .is_err()
        );
        assert!(Latency::Uniform(5, 1).check().is_err());
        assert!(
            TokenFault {
                status: 200,
                ..TokenFault::unavailable()
            }
            .check()
            .is_err()
        );
    }

    #[test]
    fn uniform_latency_stays_within_its_bounds() {
        for _ in 0..200 {
            let d = Latency::Uniform(10, 20).sample();
            assert!((10..=20).contains(&(d.as_millis() as u64)), "{d:?}");
        }
        assert_eq!(Latency::Fixed(7).sample(), Duration::from_millis(7));
        assert_eq!(Latency::None.sample(), Duration::ZERO);
    }
}
