//! The bounded fail-open: when a call fails, `paced` paces the mailbox in process
//! (`LocalPacer`) and records those sends into Redis's windows once it answers again;
//! `fixed-window` (the design note's) allows without a brake. Either way one bounded log line.

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use super::{Engine, MailRateLimiter, seeding::DAY};
use crate::{
    domain::MailboxAddress,
    log_events,
    rate_limit::{
        Ask, Decision, DenyReason, RedisCallError, Reservation, epoch_ms,
        local::DAY_RETRY,
        paced::{Paced, keys::PacedKeys},
    },
};

/// How long a fail-open decision waits for the send history (PostgreSQL): 1 s.
const LEDGER_DEADLINE: Duration = Duration::from_secs(1);

impl MailRateLimiter {
    /// The decision when `error` kept Redis from deciding: logged (bounded), then allowed
    /// uncounted — `paced` paced locally, `fixed-window` without a brake (the design note's
    /// fail-open, kept as the baseline).
    ///
    /// `paced` reads the send history first (within [`LEDGER_DEADLINE`]): Redis's last reply to
    /// this process may be stale — another replica sent since, or the call that failed was only
    /// slow and Redis, a moment later, found the day full — so the day share comes from what
    /// every replica is known to have sent. A history that cannot be read holds the message
    /// (the day budget cannot be checked).
    pub(in crate::rate_limit) async fn fail_open(
        &self,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
        error: &RedisCallError,
    ) -> Decision {
        self.log_failure("check_and_reserve", ask.mailbox, error);
        match self.engine {
            Engine::FixedWindow(_) => {
                Decision::Allowed(Reservation::uncounted(ask.mailbox.clone(), ask.recipients))
            }
            Engine::Paced(_) => {
                let ledger = match &self.history {
                    None => None,
                    Some(history) => {
                        let read = history.recipients_since(ask.mailbox, now - DAY);
                        match tokio::time::timeout(LEDGER_DEADLINE, read).await {
                            Ok(Ok(recipients)) => Some(recipients),
                            failed => {
                                let why = match failed {
                                    Ok(Err(message)) => message,
                                    _ => format!("no answer within {LEDGER_DEADLINE:?}"),
                                };
                                tracing::warn!(
                                    event = log_events::MAIL_RATE_LIMIT_REDIS_ERROR,
                                    operation = "fail_open_send_history",
                                    mailbox = %ask.mailbox,
                                    error.message = %why,
                                    "failing open: the send history cannot be read, the message waits"
                                );
                                return Decision::Denied {
                                    reason: DenyReason::Day,
                                    retry_after: DAY_RETRY,
                                    booked: false,
                                };
                            }
                        }
                    }
                };
                self.local.decide(ask, self.limiter_ms(now), ledger)
            }
        }
    }

    /// Adds what this process sent for the mailbox while failing open to Redis's windows, before
    /// its next decision. Kept for the next try when Redis fails again (a deadline after the
    /// script ran counts them twice: the safe side).
    pub(super) async fn record_fail_open(
        &self,
        paced: &Paced,
        keys: &PacedKeys,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<(), RedisCallError> {
        let pending = self.local.take_pending(ask.mailbox);
        if pending.is_empty() {
            return Ok(());
        }
        let per_minute = ask.limits.per_minute.get();
        match paced
            .record_fail_open(&self.redis, keys, per_minute, &pending, now)
            .await
        {
            Ok(seen) => {
                self.local.recorded(ask.mailbox, &pending);
                if let Some(seen) = seen {
                    self.local.saw(ask.mailbox, seen.total, None);
                }
                tracing::info!(
                    event = log_events::MAIL_RATE_LIMIT_RECONCILED,
                    mailbox = %ask.mailbox,
                    fail_open_sends = pending.len(),
                    recipients = pending.iter().map(|s| u64::from(s.recipients)).sum::<u64>(),
                    seeded_instead = seen.is_none(),
                    "sends made while failing open were added to the shared budgets"
                );
                Ok(())
            }
            Err(error) => {
                self.local.put_back(ask.mailbox, pending);
                Err(error)
            }
        }
    }

    /// `now` on the limiter's clock (Redis's as last seen), ms.
    pub(super) fn limiter_ms(&self, now: DateTime<Utc>) -> i64 {
        epoch_ms(now) + self.clock_offset_ms.load(Ordering::Relaxed)
    }

    /// Writes the bounded `redisError` (warn) or `scriptError` (error) line for a failed call.
    /// Fields: `operation`, `mailbox`, `error.kind` (see [`RedisCallError::kind`]),
    /// `error.message` (with its causes), `deadline_ms` (warn only) and `suppressed`: lines of
    /// the same event left unwritten since the previous one (at most one per second).
    pub(in crate::rate_limit) fn log_failure(
        &self,
        operation: &'static str,
        mailbox: &MailboxAddress,
        error: &RedisCallError,
    ) {
        let message = error_chain(error);
        let kind = error.kind();
        let deadline_ms = u64::try_from(self.redis.deadline().as_millis()).unwrap_or(u64::MAX);
        // The fields both events carry; the level and the rest differ.
        macro_rules! failed {
            ($level:ident, $event:expr, $($rest:tt)+) => {
                tracing::$level!(
                    event = $event,
                    operation,
                    mailbox = %mailbox,
                    error.kind = %kind,
                    error.message = %message,
                    $($rest)+
                )
            };
        }
        if error.is_connectivity() {
            if let Some(suppressed) = self.redis_error_log.admit(Instant::now()) {
                failed!(
                    warn,
                    log_events::MAIL_RATE_LIMIT_REDIS_ERROR,
                    deadline_ms,
                    suppressed,
                    "rate limiter's Redis failed; pacing locally without a shared reservation (fail-open)"
                );
            }
        } else if let Some(suppressed) = self.script_error_log.admit(Instant::now()) {
            failed!(
                error,
                log_events::MAIL_RATE_LIMIT_SCRIPT_ERROR,
                suppressed,
                "rate limiter's script failed (a bug to fix); pacing locally without a shared reservation (fail-open)"
            );
        }
    }
}

/// The error's message followed by its causes, `": "`-separated, without repeats.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
