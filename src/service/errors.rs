//! What a failed send becomes: [`MailProviderService::handle_error`] turns a [`MailError`] into
//! a deferral (rate limit, throttling, a paused sender, a transient failure with backoff) or an
//! `ERROR` row, and writes it.

use std::time::{Duration, Instant};

use uuid::Uuid;

use super::{
    MailProviderService, SendOutcome,
    policy::{backoff, human, spread_ms},
};
use crate::{
    domain::MailboxAddress,
    events,
    mailer::MailError,
    ops::metrics::OutcomeLabel,
    rate_limit::DenyReason,
    store::{
        StoreError,
        messages::{self, Fence, Reschedule, StoredMessage, wait_reason},
    },
};

impl MailProviderService {
    pub(super) async fn handle_error(
        &self,
        message: &StoredMessage,
        mailbox: &MailboxAddress,
        sender_id: Uuid,
        fingerprint: &str,
        error: MailError,
        attempt: (Instant, Option<&messages::Attempted>),
    ) -> Result<(SendOutcome, OutcomeLabel), StoreError> {
        let spread_max = self.settings.defer_spread_max.as_millis() as u64;
        let spread = self.spread(message.id);
        let fence = message.fence;
        match error {
            MailError::RateLimitExceeded {
                reason,
                retry_after,
                booked,
            } => {
                // A booked slot is kept exactly: the slots already spread the messages, and a
                // spread on top would break the pacing. An unbooked short wait (in flight) is
                // spread within its own length.
                let spread = if booked {
                    Duration::ZERO
                } else if reason == DenyReason::InFlight {
                    Duration::from_millis(spread_ms(
                        message.id,
                        spread_max.min(retry_after.as_millis() as u64),
                    ))
                } else {
                    spread
                };
                let wait = (retry_after + spread, Reschedule::Deferral, reason.as_str());
                let outcome = self.reschedule(fence, wait, &error, attempt).await?;
                if let SendOutcome::Deferred { until, .. } = &outcome {
                    tracing::info!(
                        event = events::MAIL_RATE_LIMIT_DEFERRED,
                        message.id = %message.id,
                        mailbox = %mailbox,
                        reason = reason.as_str(),
                        retry_after_ms = retry_after.as_millis() as u64,
                        spread_ms = spread.as_millis() as u64,
                        scheduled_on = %until.to_rfc3339(),
                        "mail deferred by the rate limiter"
                    );
                }
                Ok((outcome, OutcomeLabel::Deferred))
            }
            MailError::Throttled { retry_after } => {
                // The backoff counts throttles only: bookings are deferrals too, and must not
                // make one 429 wait the last step.
                let backoff_ms =
                    retry_after.unwrap_or_else(|| backoff(message.throttles as u32 + 1));
                let wait = (
                    backoff_ms + spread,
                    Reschedule::Throttle,
                    wait_reason::COOLDOWN,
                );
                let outcome = self.reschedule(fence, wait, &error, attempt).await?;
                if let SendOutcome::Deferred { until, .. } = &outcome {
                    tracing::warn!(
                        event = events::MAIL_GRAPH_THROTTLED,
                        message.id = %message.id,
                        mailbox = %mailbox,
                        retry_after_ms = retry_after.map(|d| d.as_millis() as u64),
                        backoff_ms = backoff_ms.as_millis() as u64,
                        spread_ms = spread.as_millis() as u64,
                        scheduled_on = %until.to_rfc3339(),
                        "provider throttled; mail deferred"
                    );
                }
                Ok((outcome, OutcomeLabel::Throttled))
            }
            MailError::Unconfirmed {
                retry_after,
                ref why,
            } => {
                let wait = (retry_after, Reschedule::Deferral, wait_reason::UNCONFIRMED);
                let outcome = self.reschedule(fence, wait, &error, attempt).await?;
                if let SendOutcome::Deferred { until, .. } = &outcome {
                    tracing::info!(
                        event = events::MAIL_SEND_UNCONFIRMED,
                        message.id = %message.id,
                        mailbox = %mailbox,
                        retry_after_ms = retry_after.as_millis() as u64,
                        scheduled_on = %until.to_rfc3339(),
                        why = %why,
                        "an earlier send's outcome is not confirmed yet; checking again later, nothing resent"
                    );
                }
                Ok((outcome, OutcomeLabel::Deferred))
            }
            MailError::TokenUnavailable {
                retry_after,
                ref why,
            } => {
                let wait = (
                    retry_after + spread,
                    Reschedule::Deferral,
                    wait_reason::RETRY,
                );
                let outcome = self.reschedule(fence, wait, &error, attempt).await?;
                if let SendOutcome::Deferred { until, .. } = &outcome {
                    tracing::warn!(
                        event = events::MAIL_GRAPH_THROTTLED,
                        message.id = %message.id,
                        mailbox = %mailbox,
                        retry_after_ms = retry_after.as_millis() as u64,
                        spread_ms = spread.as_millis() as u64,
                        scheduled_on = %until.to_rfc3339(),
                        error = %why,
                        "Graph token unavailable; mail deferred"
                    );
                }
                Ok((outcome, OutcomeLabel::Deferred))
            }
            MailError::Transient(ref why) | MailError::OutcomeUnknown(ref why) => {
                let attempts = message.attempts.max(0) as u32;
                let age = (message.db_now() - message.first_attempt_at)
                    .to_std()
                    .unwrap_or_default();
                if attempts >= self.settings.max_attempts || age >= self.settings.retry_for {
                    let reason = if attempts >= self.settings.max_attempts {
                        format!(
                            "gave up after {attempts} attempts (MAIL_MAX_ATTEMPTS); last error: {why}"
                        )
                    } else {
                        format!(
                            "gave up after {} of transient failures ({attempts} attempts, MAIL_RETRY_FOR); last error: {why}",
                            human(age)
                        )
                    };
                    let outcome = self
                        .fail_after(fence, Some(mailbox), reason, attempt)
                        .await?;
                    return Ok((outcome, OutcomeLabel::Failed));
                }
                // Backoff capped at 15 min, and never past the give-up time (so the last try
                // happens when the budget of MAIL_RETRY_FOR runs out, not long after).
                let left = self.settings.retry_for.saturating_sub(age);
                let backoff_ms = backoff(attempts).min(left.max(Duration::from_secs(1)));
                let wait = (backoff_ms, Reschedule::Retry, wait_reason::RETRY);
                let outcome = self.reschedule(fence, wait, &error, attempt).await?;
                if let SendOutcome::Deferred { until, .. } = &outcome {
                    tracing::warn!(
                        event = events::MAIL_RETRY_SCHEDULED,
                        message.id = %message.id,
                        mailbox = %mailbox,
                        attempts,
                        backoff_ms = backoff_ms.as_millis() as u64,
                        scheduled_on = %until.to_rfc3339(),
                        error = %why,
                        "transient failure; mail will be retried"
                    );
                }
                Ok((outcome, OutcomeLabel::Retried))
            }
            MailError::Unauthorized(_) | MailError::Misconfigured(_) => {
                // Not the message's fault: pause the sender, keep the message, count no attempt.
                let reason = error.to_string();
                let now = self.clock.now();
                let paused =
                    self.pauses
                        .failed(sender_id, mailbox.as_str(), &reason, fingerprint, now);
                if paused.changed {
                    self.metrics.set_paused(mailbox.as_str(), true);
                    tracing::error!(
                        event = events::MAIL_SENDER_PAUSED,
                        mailbox = %mailbox,
                        reason = %reason,
                        next_probe = %paused.until.to_rfc3339(),
                        "sender paused: its messages wait (no attempts counted) until the configuration changes or a probe succeeds"
                    );
                }
                let wait = self.until(paused.until) + spread;
                let outcome = self.defer_paused(fence, wait, &reason, attempt.1).await?;
                Ok((outcome, OutcomeLabel::Paused))
            }
            MailError::Permanent { .. } => {
                let outcome = self
                    .fail_after(fence, Some(mailbox), error.to_string(), attempt)
                    .await?;
                Ok((outcome, OutcomeLabel::Failed))
            }
        }
    }

    /// Back to `SCHEDULED` after `wait` for the sender's pause (`wait_reason` `paused`,
    /// `last_error` = the pause's prefix and `reason`).
    pub(super) async fn defer_paused(
        &self,
        fence: Fence,
        wait: Duration,
        reason: &str,
        attempted: Option<&messages::Attempted>,
    ) -> Result<SendOutcome, StoreError> {
        let to = (wait, Reschedule::Deferral, wait_reason::PAUSED);
        let last_error = format!("{}{reason}", wait_reason::PAUSED_PREFIX);
        self.reschedule_with(fence, to, last_error, (Instant::now(), attempted))
            .await
    }

    /// Writes `SCHEDULED` after `(wait, kind, wait reason)` for `error`, with what the attempt
    /// `(started, attempted)` noted, retried while PostgreSQL is unreachable.
    pub(super) async fn reschedule(
        &self,
        fence: Fence,
        to: (Duration, Reschedule, &str),
        error: &MailError,
        attempt: (Instant, Option<&messages::Attempted>),
    ) -> Result<SendOutcome, StoreError> {
        self.reschedule_with(fence, to, error.to_string(), attempt)
            .await
    }

    /// [`Self::reschedule`] with `last_error` as given.
    async fn reschedule_with(
        &self,
        fence: Fence,
        (wait, kind, why): (Duration, Reschedule, &str),
        last_error: String,
        (started, attempted): (Instant, Option<&messages::Attempted>),
    ) -> Result<SendOutcome, StoreError> {
        let to = (self.wait(wait), kind, why);
        let written = self
            .durably(fence.id, started, "rescheduled", || {
                messages::reschedule(&self.pool, fence, to, &last_error, attempted)
            })
            .await?;
        match written {
            Some(until) => Ok(SendOutcome::Deferred {
                until,
                reason: last_error,
            }),
            None => {
                self.stale(fence, why).await;
                Ok(SendOutcome::Superseded)
            }
        }
    }

    pub(super) async fn fail(
        &self,
        fence: Fence,
        mailbox: Option<&MailboxAddress>,
        reason: String,
    ) -> Result<SendOutcome, StoreError> {
        self.fail_after(fence, mailbox, reason, (Instant::now(), None))
            .await
    }

    pub(super) async fn fail_after(
        &self,
        fence: Fence,
        mailbox: Option<&MailboxAddress>,
        reason: String,
        (started, attempted): (Instant, Option<&messages::Attempted>),
    ) -> Result<SendOutcome, StoreError> {
        let written = self
            .durably(fence.id, started, "failed", || {
                messages::mark_error(&self.pool, fence, &reason, attempted)
            })
            .await?;
        if !written {
            self.stale(fence, "failed").await;
            return Ok(SendOutcome::Superseded);
        }
        tracing::error!(
            event = events::MAIL_FAILED,
            message.id = %fence.id,
            mailbox = mailbox.map(|m| m.as_str()),
            error = %reason,
            "mail failed permanently"
        );
        Ok(SendOutcome::Failed { reason })
    }
}
