//! [`MailError`]: why a send did not happen, as a [`MailErrorKind`] (what to do next, with the
//! data the decision needs) plus, where there is one, the error it came from (a reqwest, serde
//! or I/O error) as its [`std::error::Error::source`].
//!
//! Displaying a `MailError` shows only its kind, whose texts are scrubbed where they are made
//! ([`super::redact`], [`MailError::map_text`]): one self-contained line for
//! `messages.last_error` and the logs, without credentials or full recipient addresses. A
//! reqwest source is kept without its URL (it names the sending mailbox and tenant).

use std::{error::Error as StdError, fmt, sync::Arc, time::Duration};

use crate::rate_limit::DenyReason;

/// The error under a [`MailError`]; shared so that a `MailError` stays `Clone`.
pub type MailErrorSource = Arc<dyn StdError + Send + Sync + 'static>;

/// Why a send did not happen: a [`MailErrorKind`] and the error it came from, if any.
#[derive(Debug, Clone)]
pub struct MailError {
    /// What to do next. Match on it (`match &error.kind`); compare kinds, not errors.
    pub kind: MailErrorKind,
    source: Option<MailErrorSource>,
}

/// Why a send did not happen, phrased as what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MailErrorKind {
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
        /// Which of Graph's limits, when its answer said (`429 MailboxConcurrency`,
        /// `IncomingBytes`) or a `503`/`504`: what an adaptive rule counts.
        signal: Option<crate::domain::adaptive::Signal>,
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
    /// The token endpoint failed transiently (5xx, network) and is paused for `retry_after`
    /// (single-flight with backoff): nothing was sent; defer, do not count an attempt.
    #[error("Graph token unavailable ({why}); retry after {} ms", retry_after.as_millis())]
    TokenUnavailable {
        /// The rest of the pause.
        retry_after: Duration,
        /// The token endpoint's failure.
        why: String,
    },
    /// An earlier attempt's send had an unknown outcome and the check cannot tell yet whether
    /// it went (Graph is eventually consistent): nothing was sent now; check again after
    /// `retry_after`. Not a failure and not an attempt.
    #[error("outcome of an earlier send not confirmed yet ({why}); checking again in {} ms", retry_after.as_millis())]
    Unconfirmed {
        /// When to check again.
        retry_after: Duration,
        /// What the check saw.
        why: String,
    },
}

impl MailError {
    /// [`MailErrorKind::Transient`].
    pub fn transient(text: impl Into<String>) -> Self {
        MailErrorKind::Transient(text.into()).into()
    }

    /// [`MailErrorKind::OutcomeUnknown`].
    pub fn outcome_unknown(text: impl Into<String>) -> Self {
        MailErrorKind::OutcomeUnknown(text.into()).into()
    }

    /// [`MailErrorKind::Permanent`].
    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> Self {
        MailErrorKind::Permanent {
            code: code.into(),
            message: message.into(),
        }
        .into()
    }

    /// [`MailErrorKind::Unauthorized`].
    pub fn unauthorized(text: impl Into<String>) -> Self {
        MailErrorKind::Unauthorized(text.into()).into()
    }

    /// [`MailErrorKind::Misconfigured`].
    pub fn misconfigured(text: impl Into<String>) -> Self {
        MailErrorKind::Misconfigured(text.into()).into()
    }

    /// [`MailErrorKind::Throttled`].
    #[must_use]
    pub fn throttled(retry_after: Option<Duration>) -> Self {
        MailErrorKind::Throttled {
            retry_after,
            signal: None,
        }
        .into()
    }

    /// [`MailErrorKind::Throttled`] by the limit `signal` names.
    #[must_use]
    pub fn throttled_by(
        retry_after: Option<Duration>,
        signal: Option<crate::domain::adaptive::Signal>,
    ) -> Self {
        MailErrorKind::Throttled {
            retry_after,
            signal,
        }
        .into()
    }

    /// [`MailErrorKind::Unconfirmed`].
    pub fn unconfirmed(retry_after: Duration, why: impl Into<String>) -> Self {
        MailErrorKind::Unconfirmed {
            retry_after,
            why: why.into(),
        }
        .into()
    }

    /// [`MailErrorKind::TokenUnavailable`].
    pub fn token_unavailable(retry_after: Duration, why: impl Into<String>) -> Self {
        MailErrorKind::TokenUnavailable {
            retry_after,
            why: why.into(),
        }
        .into()
    }

    /// The same error caused by `source` (returned by [`StdError::source`], never displayed).
    #[must_use]
    pub fn caused_by(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The same error caused by the transport failure `error`, kept without its URL.
    #[must_use]
    pub(crate) fn caused_by_transport(self, error: reqwest::Error) -> Self {
        self.caused_by(error.without_url())
    }

    /// The same error with `f` applied to every provider-supplied text in its kind (scrubbing);
    /// the source is kept.
    #[must_use]
    pub(crate) fn map_text(self, f: impl Fn(&str) -> String) -> Self {
        use MailErrorKind as K;
        let kind = match self.kind {
            K::Transient(t) => K::Transient(f(&t)),
            K::OutcomeUnknown(t) => K::OutcomeUnknown(f(&t)),
            K::Permanent { code, message } => K::Permanent {
                code: f(&code),
                message: f(&message),
            },
            K::Unauthorized(t) => K::Unauthorized(f(&t)),
            K::Misconfigured(t) => K::Misconfigured(f(&t)),
            K::Unconfirmed { retry_after, why } => K::Unconfirmed {
                retry_after,
                why: f(&why),
            },
            K::TokenUnavailable { retry_after, why } => K::TokenUnavailable {
                retry_after,
                why: f(&why),
            },
            other @ (K::RateLimitExceeded { .. } | K::Throttled { .. }) => other,
        };
        Self { kind, ..self }
    }
}

impl From<MailErrorKind> for MailError {
    fn from(kind: MailErrorKind) -> Self {
        Self { kind, source: None }
    }
}

impl fmt::Display for MailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kind.fmt(f)
    }
}

impl StdError for MailError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailer::redact::scrub_provider_text;

    #[test]
    fn scrubbed_text_keeps_its_source_and_shows_no_address_or_token() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let error = MailError::outcome_unknown(
            "Graph said: bad recipient lisa.smith@example.com; Bearer eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJ4In0.c2lnbmF0dXJl",
        )
        .caused_by(io)
        .map_text(scrub_provider_text);
        let shown = error.to_string();
        assert!(!shown.contains("lisa.smith@"), "{shown}");
        assert!(!shown.contains("eyJ0eXAi"), "{shown}");
        assert!(shown.starts_with("outcome unknown: Graph said: bad recipient l***@example.com"));
        assert_eq!(
            error.source().map(ToString::to_string).as_deref(),
            Some("reset by peer")
        );
        assert_eq!(
            error.kind,
            MailErrorKind::OutcomeUnknown(shown["outcome unknown: ".len()..].to_owned())
        );
    }

    #[test]
    fn a_kind_made_error_has_no_source_and_displays_as_its_kind() {
        let error = MailError::throttled(Some(Duration::from_secs(3)));
        assert!(error.source().is_none());
        assert_eq!(
            error.to_string(),
            "provider throttled the request; Retry-After 3000 ms"
        );
        let kind = error.kind.clone();
        assert_eq!(MailError::from(kind).kind, error.kind);
    }
}
