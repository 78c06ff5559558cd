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
    /// Our limiter refused: defer by `retry_after` (+ spread). Not a failure.
    #[error("mail rate limit exceeded ({reason}); retry after {} ms", retry_after.as_millis())]
    RateLimitExceeded {
        /// The spent budget.
        reason: DenyReason,
        /// Time until it resets.
        retry_after: Duration,
    },
    /// The provider throttled (HTTP 429/503/504): defer by `retry_after`, or back off
    /// exponentially when the provider gave none.
    #[error("provider throttled the request{}", retry_after.map(|d| format!("; Retry-After {} ms", d.as_millis())).unwrap_or_default())]
    Throttled {
        /// The provider's `Retry-After`, parsed.
        retry_after: Option<Duration>,
    },
    /// A 5xx, timeout or connection error: retry with backoff, up to `MAIL_MAX_ATTEMPTS`.
    #[error("transient failure: {0}")]
    Transient(String),
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

impl MailError {
    /// Whether a later attempt may succeed (rate limits, throttling, transient trouble).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::RateLimitExceeded { .. } | Self::Throttled { .. } | Self::Transient(_)
        )
    }

    /// The delay the limiter or provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimitExceeded { retry_after, .. } => Some(*retry_after),
            Self::Throttled { retry_after } => *retry_after,
            _ => None,
        }
    }
}
