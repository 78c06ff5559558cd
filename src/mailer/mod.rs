//! The `Mailer` trait and its implementations: Microsoft Graph (`graph/`), SendGrid
//! (`sendgrid.rs`), the rate-limited decorator (`rate_limited.rs`) and the config-hash
//! factory (`factory.rs`). Callers see only [`Mailer::send`] and [`MailError`]; never HTTP.

pub mod factory;
pub mod graph;
pub mod http;
pub mod rate_limited;
pub mod redact;
pub mod sendgrid;
pub mod validate;

use std::time::Duration;

use crate::{domain::OutgoingMail, rate_limit::DenyReason};

pub use factory::MailerFactory;
pub use graph::MicrosoftGraphMailer;
pub use rate_limited::RateLimitedGraphMailer;
pub use sendgrid::SendGridMailer;

/// Sends one message through one provider for one sender. Used as `Arc<dyn Mailer>`.
#[async_trait::async_trait]
pub trait Mailer: Send + Sync + std::fmt::Debug {
    /// Sends `mail` once. Never retries after the provider accepted it.
    ///
    /// # Errors
    /// A [`MailError`] that says what to do next.
    async fn send(&self, mail: &OutgoingMail) -> Result<SendReceipt, MailError>;
}

/// What the provider told us about an accepted message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendReceipt {
    /// The provider's id for the message or request (Graph `request-id`, SendGrid
    /// `X-Message-Id`), for support tickets.
    pub provider_id: Option<String>,
}

/// Why a send did not happen, phrased as what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MailError {
    /// Our limiter refused: defer by `retry_after` (+ spread unless `booked`). Not a failure.
    #[error("mail rate limit exceeded ({reason}); retry after {} ms", retry_after.as_millis())]
    RateLimitExceeded {
        /// The budget that refused.
        reason: DenyReason,
        /// Time until the message may go.
        retry_after: Duration,
        /// A slot at `now + retry_after` is booked for this message: come back exactly then.
        booked: bool,
    },
    /// The provider throttled (HTTP 429/503/504): defer by `retry_after`, or back off
    /// exponentially when the provider gave none.
    #[error("provider throttled the request{}", retry_after.map(|d| format!("; Retry-After {} ms", d.as_millis())).unwrap_or_default())]
    Throttled {
        /// The provider's `Retry-After`, parsed.
        retry_after: Option<Duration>,
    },
    /// The request surely did not reach the provider (a connect error, 408, token trouble):
    /// retry with backoff, up to `MAIL_MAX_ATTEMPTS`.
    #[error("transient failure: {0}")]
    Transient(String),
    /// The request was written but its outcome is unknown (a timeout or reset while waiting
    /// for the answer, a 5xx): the provider may have delivered it. Retried like
    /// [`Self::Transient`], but the limiter keeps its budget counted.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The message itself is bad (Graph `ErrorInvalidRecipients`, a non-`x-` header, too large):
    /// never retry.
    #[error("{code}: {message}")]
    Permanent {
        /// The provider's error code or ours (e.g. `ErrorInvalidRecipients`).
        code: String,
        /// A message a person can act on.
        message: String,
    },
    /// The credentials were refused (e.g. AADSTS7000215); fix the app registration.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The sender's configuration cannot work (unresolvable secret, missing credentials).
    #[error("misconfigured: {0}")]
    Misconfigured(String),
}
