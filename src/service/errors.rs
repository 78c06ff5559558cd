//! What a failed send becomes: [`MailProviderService::handle_error`] turns a [`MailError`] into
//! a deferral (rate limit, throttling, a paused sender, a transient failure with backoff) or an
//! `ERROR` row, and writes it.

use std::time::{Duration, Instant};

use tracing::Level;
use uuid::Uuid;

use super::{
    MailProviderService, SendOutcome,
    policy::{backoff, human},
};
use crate::{
    domain::MailboxAddress,
    log_events,
    mailer::{MailError, MailErrorKind},
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
        let spread = self.spread(message.id);
        let fence = message.fence;
        // The deferrals: where to, how long the backoff and the spread were (for the log line).
        let (wait, waited, label) = match &error.kind {
            &MailErrorKind::RateLimitExceeded {
                reason,
                retry_after,
                booked,
            } => {
                // A booked slot is kept exactly: the slots already spread the messages, and a
                // spread on top would break the pacing. An in-flight wait is the message's turn
                // in the mailbox's in-flight queue: the turns already spread the messages, one
                // about every lease that frees, and a spread would let them overtake each other.
                let spread = if booked || reason == DenyReason::InFlight {
                    Duration::ZERO
                } else {
                    spread
                };
                let wait = (retry_after + spread, Reschedule::Deferral, reason.as_str());
                (wait, (None, Some(spread)), OutcomeLabel::Deferred)
            }
            &MailErrorKind::Throttled { retry_after, .. } => {
                // The backoff counts throttles only: bookings are deferrals too, and must not
                // make one 429 wait the last step.
                let backoff_ms =
                    retry_after.unwrap_or_else(|| backoff(message.throttles as u32 + 1));
                let wait = (
                    backoff_ms + spread,
                    Reschedule::Throttle,
                    wait_reason::COOLDOWN,
                );
                (
                    wait,
                    (Some(backoff_ms), Some(spread)),
                    OutcomeLabel::Throttled,
                )
            }
            &MailErrorKind::Unconfirmed { retry_after, .. } => {
                let wait = (retry_after, Reschedule::Deferral, wait_reason::UNCONFIRMED);
                (wait, (None, None), OutcomeLabel::Deferred)
            }
            &MailErrorKind::TokenUnavailable { retry_after, .. } => {
                let wait = (
                    retry_after + spread,
                    Reschedule::Deferral,
                    wait_reason::RETRY,
                );
                (wait, (None, Some(spread)), OutcomeLabel::Deferred)
            }
            MailErrorKind::Transient(why) | MailErrorKind::OutcomeUnknown(why) => {
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
                (wait, (Some(backoff_ms), None), OutcomeLabel::Retried)
            }
            MailErrorKind::Unauthorized(_) | MailErrorKind::Misconfigured(_) => {
                // Not the message's fault: pause the sender, keep the message, count no attempt.
                let reason = error.to_string();
                let now = self.clock.now();
                let paused =
                    self.pauses
                        .failed(sender_id, mailbox.as_str(), &reason, fingerprint, now);
                if paused.changed {
                    self.metrics.set_paused(mailbox.as_str(), true);
                    tracing::error!(
                        event = log_events::MAIL_SENDER_PAUSED,
                        mailbox = %mailbox,
                        reason = %reason,
                        next_probe = %paused.until.to_rfc3339(),
                        "sender paused: its messages wait (no attempts counted) until the configuration changes or a probe succeeds"
                    );
                }
                let wait = self.until(paused.until) + spread;
                let outcome = self.defer_paused(fence, wait, &reason, attempt.1).await?;
                return Ok((outcome, OutcomeLabel::Paused));
            }
            MailErrorKind::Permanent { .. } => {
                let outcome = self
                    .fail_after(fence, Some(mailbox), error.to_string(), attempt)
                    .await?;
                return Ok((outcome, OutcomeLabel::Failed));
            }
        };
        let outcome = self
            .deferral(message, mailbox, wait, &error, attempt, waited)
            .await?;
        Ok((outcome, label))
    }

    /// [`Self::reschedule`] for `error`, then, if the deferral was written, its log line: the
    /// event, level and text for `error`'s kind, with what `error` says and the
    /// `(backoff, spread)` the wait holds (a field that is `None` is left out).
    async fn deferral(
        &self,
        message: &StoredMessage,
        mailbox: &MailboxAddress,
        to: (Duration, Reschedule, &str),
        error: &MailError,
        attempt: (Instant, Option<&messages::Attempted>),
        (backoff, spread): (Option<Duration>, Option<Duration>),
    ) -> Result<SendOutcome, StoreError> {
        let outcome = self.reschedule(message.fence, to, error, attempt).await?;
        let SendOutcome::Deferred { until, .. } = &outcome else {
            return Ok(outcome);
        };
        let ms = |d: Duration| d.as_millis() as u64;
        // Each deferral's line: its level, event and text, and what its error says.
        let (line, reason, retry_after, why, error, attempts) = match &error.kind {
            MailErrorKind::RateLimitExceeded {
                reason,
                retry_after,
                ..
            } => {
                let line = (
                    Level::INFO,
                    log_events::MAIL_RATE_LIMIT_DEFERRED,
                    "mail deferred by the rate limiter",
                );
                (
                    line,
                    Some(reason.as_str()),
                    Some(*retry_after),
                    None,
                    None,
                    None,
                )
            }
            MailErrorKind::Throttled { retry_after, .. } => {
                let line = (
                    Level::WARN,
                    log_events::MAIL_GRAPH_THROTTLED,
                    "provider throttled; mail deferred",
                );
                (line, None, *retry_after, None, None, None)
            }
            MailErrorKind::Unconfirmed { retry_after, why } => {
                let line = (
                    Level::INFO,
                    log_events::MAIL_SEND_UNCONFIRMED,
                    "an earlier send's outcome is not confirmed yet; checking again later, nothing resent",
                );
                (line, None, Some(*retry_after), Some(why), None, None)
            }
            MailErrorKind::TokenUnavailable { retry_after, why } => {
                let line = (
                    Level::WARN,
                    log_events::MAIL_GRAPH_THROTTLED,
                    "Graph token unavailable; mail deferred",
                );
                (line, None, Some(*retry_after), None, Some(why), None)
            }
            MailErrorKind::Transient(why) | MailErrorKind::OutcomeUnknown(why) => {
                let line = (
                    Level::WARN,
                    log_events::MAIL_RETRY_SCHEDULED,
                    "transient failure; mail will be retried",
                );
                let attempts = message.attempts.max(0) as u32;
                (line, None, None, None, Some(why), Some(attempts))
            }
            // Not a deferral `handle_error` writes through here.
            _ => return Ok(outcome),
        };
        let (level, event, text) = line;
        macro_rules! log {
            ($level:ident) => {
                tracing::$level!(
                    event,
                    message.id = %message.id,
                    mailbox = %mailbox,
                    reason,
                    attempts,
                    retry_after_ms = retry_after.map(ms),
                    backoff_ms = backoff.map(ms),
                    spread_ms = spread.map(ms),
                    scheduled_on = %until.to_rfc3339(),
                    why = why.map(String::as_str),
                    error = error.map(String::as_str),
                    "{text}"
                )
            };
        }
        if level == Level::INFO {
            log!(info);
        } else {
            log!(warn);
        }
        Ok(outcome)
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
                messages::reschedule(&self.pool, fence, to, &last_error, attempted, self.outbox)
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
                messages::mark_error(&self.pool, fence, &reason, attempted, self.outbox)
            })
            .await?;
        if !written {
            self.stale(fence, "failed").await;
            return Ok(SendOutcome::Superseded);
        }
        tracing::error!(
            event = log_events::MAIL_FAILED,
            message.id = %fence.id,
            mailbox = mailbox.map(|m| m.as_str()),
            error = %reason,
            "mail failed permanently"
        );
        Ok(SendOutcome::Failed { reason })
    }
}
