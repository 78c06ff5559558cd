//! Graph `sendMail` answers → what to do next. This is the ONE place a Graph HTTP status
//! becomes a [`MailError`]:
//!
//! | Graph answer                                   | verdict                                              |
//! | ---------------------------------------------- | ---------------------------------------------------- |
//! | `202` (any 2xx), with or without `Retry-After` | sent; never resent (`request-id` → provider id)      |
//! | `429`, `503`, `504`                            | `Throttled { retry_after }` from `Retry-After`       |
//! | `401` (`InvalidAuthenticationToken`)           | refresh the token once and resend; second → `Unauthorized` |
//! | `403 ErrorAccessDenied`                        | `Unauthorized`: the sender pauses ([`sender_fault`]) |
//! | `404 ErrorInvalidUser`, `MailboxNotEnabledForRESTAPI` | `Misconfigured`: the sender pauses ([`sender_fault`]) |
//! | `400`, `403`, `404`, `413`, other 4xx but 408  | `Permanent { code: Graph's code, message }`          |
//! | `408`, 1xx/3xx                                 | `Transient`                                          |
//! | other 5xx                                      | `OutcomeUnknown` (Graph may have delivered it)       |
//! | connection error (connect failed)              | `Transient`                                          |
//! | timeout, reset, broken answer                  | `OutcomeUnknown`                                     |

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::{
    domain::MailboxAddress,
    mailer::{MailError, SendReceipt, http::describe_transport_error, redact::scrub_provider_text},
};

use super::retry_after::parse_retry_after;

/// The parts of a Graph answer the mapping reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct HttpAnswer {
    /// HTTP status code.
    pub status: u16,
    /// The `Retry-After` header, if any and if it is text.
    pub retry_after: Option<String>,
    /// The `request-id` header Graph sets on every answer.
    pub request_id: Option<String>,
    /// The body (Graph's `{"error":{"code","message"}}` on failures).
    pub body: Vec<u8>,
}

/// What the mailer does with an answer.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// Accepted: stop, never resend.
    Sent(SendReceipt),
    /// 401: Graph did not accept the message or its token. Refresh the token and resend once;
    /// if this happens again, fail with the enclosed error.
    TokenRejected(MailError),
    /// Stop with this error.
    Failed(MailError),
}

/// Verdicts are equal when they do the same: their errors compare by kind.
#[cfg(test)]
impl PartialEq for Verdict {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Sent(a), Self::Sent(b)) => a == b,
            (Self::TokenRejected(a), Self::TokenRejected(b))
            | (Self::Failed(a), Self::Failed(b)) => a.kind == b.kind,
            _ => false,
        }
    }
}

#[derive(Deserialize)]
struct GraphErrorBody {
    error: GraphError,
}

#[derive(Deserialize)]
struct GraphError {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// Maps one `sendMail` attempt's outcome (see the module table). `now` dates an HTTP-date
/// `Retry-After`. Messages name the mailbox, Graph's code and its message with addresses masked.
pub(crate) fn interpret(
    outcome: Result<HttpAnswer, reqwest::Error>,
    mailbox: &MailboxAddress,
    now: DateTime<Utc>,
) -> Verdict {
    let answer = match outcome {
        Ok(answer) => answer,
        Err(error) => {
            let text =
                describe_transport_error(&format!("Graph sendMail for mailbox {mailbox}"), &error);
            // Only a failed connect proves the request never reached Graph; a timeout or reset
            // after it was written may follow a delivery.
            let failure = if error.is_connect() {
                MailError::transient(text)
            } else {
                MailError::outcome_unknown(text)
            };
            return Verdict::Failed(failure.caused_by_transport(error));
        }
    };
    let status = answer.status;
    if (200..300).contains(&status) {
        return Verdict::Sent(SendReceipt {
            provider_id: answer.request_id,
            ..SendReceipt::default()
        });
    }
    let (code, message) = graph_error(&answer.body);
    let described = |fallback: &str| {
        let code = code.clone().unwrap_or_else(|| fallback.to_owned());
        let message = message
            .clone()
            .unwrap_or_else(|| format!("Graph answered HTTP {status} without an error body"));
        (code, message)
    };
    match status {
        429 | 503 | 504 => {
            use crate::domain::adaptive::Signal;
            let signal = match status {
                429 => message.as_deref().and_then(Signal::of_throttle_message),
                _ => Some(Signal::ServerErrors),
            };
            Verdict::Failed(MailError::throttled_by(
                parse_retry_after(answer.retry_after.as_deref(), now),
                signal,
            ))
        }
        401 => {
            let (code, message) = described("InvalidAuthenticationToken");
            Verdict::TokenRejected(MailError::unauthorized(format!(
                "Graph refused the access token for mailbox {mailbox} twice: {code}: {message}"
            )))
        }
        403 | 404 if sender_fault(status, code.as_deref()).is_some() => {
            let (code, message) = described("");
            let fix = sender_fault(status, Some(&code)).unwrap_or_default();
            let text =
                format!("Graph answered {status} {code} for mailbox {mailbox}: {message}; {fix}");
            Verdict::Failed(if status == 403 {
                MailError::unauthorized(text)
            } else {
                MailError::misconfigured(text)
            })
        }
        408 => Verdict::Failed(MailError::transient(format!(
            "Graph sendMail for mailbox {mailbox} answered 408 Request Timeout"
        ))),
        400..=499 => {
            let fallback = match status {
                400 => "BadRequest",
                403 => "Forbidden",
                404 => "NotFound",
                413 => "ErrorMessageSizeExceeded",
                _ => "ClientError",
            };
            let (code, message) = described(fallback);
            Verdict::Failed(MailError::permanent(
                code,
                format!("Graph refused the message (HTTP {status}): {message}"),
            ))
        }
        500..=599 => {
            let (code, message) = described("ServerError");
            Verdict::Failed(MailError::outcome_unknown(format!(
                "Graph sendMail for mailbox {mailbox} answered {status}: {code}: {message}"
            )))
        }
        _ => Verdict::Failed(MailError::transient(format!(
            "Graph sendMail for mailbox {mailbox} answered unexpected HTTP {status}"
        ))),
    }
}

/// Whether Graph's answer `status` / `code` is about the sender (its mailbox or the app's
/// access to it), not the message: then every message of the mailbox would get it, so the
/// sender pauses instead of failing its queue one message at a time. Returns the fix to name.
/// - `403 ErrorAccessDenied`: the app lacks the application permission, or the mailbox is
///   outside its RBAC for Applications scope / application access policy (which takes up to an
///   hour to apply) (<https://learn.microsoft.com/graph/resolve-auth-errors>,
///   <https://learn.microsoft.com/graph/auth-limit-mailbox-access>,
///   <https://learn.microsoft.com/exchange/permissions-exo/application-rbac>). Graph gives the
///   same code to both, so the fix names both. Per-message refusals have codes of their own
///   (`ErrorSendAsDenied`, …) and stay `Permanent`;
/// - `404 ErrorInvalidUser`: no such mailbox in the tenant;
/// - `404 MailboxNotEnabledForRESTAPI`: the mailbox is unlicensed, inactive or on-premises
///   (<https://learn.microsoft.com/graph/api/resources/mail-api-overview>).
pub(crate) fn sender_fault(status: u16, code: Option<&str>) -> Option<&'static str> {
    match (status, code?) {
        (403, "ErrorAccessDenied") => Some(
            "fix: grant the app the application permissions its send mode needs (Mail.Send; \
             GRAPH_SEND_MODE=draft also Mail.ReadWrite) with admin consent, or add the mailbox to \
             the app's RBAC for Applications scope / application access policy (up to an hour to \
             apply); or set GRAPH_SEND_MODE=sendmail",
        ),
        (404, "ErrorInvalidUser") => Some(
            "fix: the mailbox does not exist in the Graph tenant: correct the sender's mailbox or tenant",
        ),
        (404, "MailboxNotEnabledForRESTAPI") => Some(
            "fix: give the mailbox an Exchange Online licence (an unlicensed, inactive or on-premises mailbox cannot use Graph mail)",
        ),
        _ => None,
    }
}

/// [`sender_fault`] of an answer: `true` when its status and Graph code are about the sender.
pub(crate) fn is_sender_fault(answer: &HttpAnswer) -> bool {
    sender_fault(answer.status, graph_error(&answer.body).0.as_deref()).is_some()
}

/// Graph's `error.code` of an error body, scrubbed (`None`: not Graph's error JSON).
pub(crate) fn graph_code(body: &[u8]) -> Option<String> {
    graph_error(body).0
}

/// Graph's `error.code` and scrubbed `error.message`, when the body is Graph's error JSON.
fn graph_error(body: &[u8]) -> (Option<String>, Option<String>) {
    match serde_json::from_slice::<GraphErrorBody>(body) {
        Ok(GraphErrorBody { error }) => (
            Some(error.code)
                .map(|c| scrub_provider_text(&c))
                .filter(|c| !c.is_empty()),
            Some(scrub_provider_text(&error.message)).filter(|m| !m.is_empty()),
        ),
        Err(_) => (None, None),
    }
}

/// The fuzz target's door to [`interpret`] (`fuzz/fuzz_targets/answers.rs`): `Ok(request-id)`
/// when sent, `Err` otherwise; a 401 is reported as its second-time error. Only with the
/// `fuzzing` feature.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_graph_answer(
    status: u16,
    retry_after: Option<String>,
    request_id: Option<String>,
    body: Vec<u8>,
    now: DateTime<Utc>,
) -> Result<Option<String>, MailError> {
    let mailbox = MailboxAddress::parse("fuzz@contoso.example")
        .map_err(|e| MailError::misconfigured(e.to_string()))?;
    match interpret(
        Ok(HttpAnswer {
            status,
            retry_after,
            request_id,
            body,
        }),
        &mailbox,
        now,
    ) {
        Verdict::Sent(receipt) => Ok(receipt.provider_id),
        Verdict::TokenRejected(e) | Verdict::Failed(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
