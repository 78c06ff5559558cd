//! [`Metered`]: the decorator that counts a provider mailer's requests.

use std::{fmt, sync::Arc};

use crate::{
    domain::OutgoingMail,
    mailer::{MailError, MailErrorKind, MailResult, Mailer, SendAttempt, SendReceipt},
    ops::metrics::Metrics,
};

/// Counts every request of the provider mailer it wraps
/// (`mail_worker_provider_requests_total{provider,status}`, `mail_worker_provider_seconds`):
/// inside the rate limiter, so a denial is not a request. Its `Debug` is the inner mailer's.
pub(crate) struct Metered<M: Mailer> {
    inner: M,
    provider: &'static str,
    metrics: Arc<Metrics>,
}

impl<M: Mailer> fmt::Debug for Metered<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<M: Mailer> Metered<M> {
    /// Wraps `inner`, labelled `provider`.
    pub(crate) fn new(inner: M, provider: &'static str, metrics: Arc<Metrics>) -> Self {
        Self {
            inner,
            provider,
            metrics,
        }
    }
}

#[async_trait::async_trait]
impl<M: Mailer> Mailer for Metered<M> {
    async fn send_with(&self, mail: &OutgoingMail, attempt: &SendAttempt<'_>) -> MailResult {
        let started = std::time::Instant::now();
        let result = self.inner.send_with(mail, attempt).await;
        self.count(&result, started);
        result
    }

    fn check(&self, mail: &OutgoingMail) -> Result<(), MailError> {
        self.inner.check(mail)
    }
}

impl<M: Mailer> Metered<M> {
    fn count(&self, result: &Result<SendReceipt, MailError>, started: std::time::Instant) {
        let status = provider_status(result.as_ref().map(|_| ()).map_err(|e| &e.kind));
        self.metrics
            .provider_request(self.provider, status, started.elapsed());
    }
}

/// `mail_worker_provider_requests_total{status}` of a provider call's result: `accepted`, or
/// the class of the refusal — `throttled` (429/503/504), `transient` (connect error, 408, token
/// trouble), `outcome_unknown` (timeout or 5xx after the request was written), `permanent`
/// (the message was refused), `unauthorized`, `misconfigured`. Classes rather than HTTP codes:
/// the providers' own modules own the code → error mapping, and a class is what an alert needs.
pub(crate) fn provider_status(result: Result<(), &MailErrorKind>) -> &'static str {
    match result {
        Ok(()) => "accepted",
        Err(MailErrorKind::Throttled { .. }) => "throttled",
        Err(MailErrorKind::Transient(_)) => "transient",
        Err(MailErrorKind::OutcomeUnknown(_)) => "outcome_unknown",
        Err(MailErrorKind::Permanent { .. }) => "permanent",
        Err(MailErrorKind::Unauthorized(_)) => "unauthorized",
        Err(MailErrorKind::Misconfigured(_)) => "misconfigured",
        Err(MailErrorKind::RateLimitExceeded { .. }) => "rate_limited",
        Err(MailErrorKind::Unconfirmed { .. }) => "unconfirmed",
        Err(MailErrorKind::TokenUnavailable { .. }) => "transient",
    }
}
