//! Attempts bounded by their lease: while an attempt talks to the provider, [`LeaseKeeper`]
//! renews its row's lease (`sending_at`, fenced by the claim token) every quarter of
//! `SEND_LEASE`, so lease recovery never hands a live attempt's row to another replica, and a
//! long attempt (many upload chunks, a slow Graph) is not cut while it progresses.
//!
//! The attempt stops at once when a renewal finds the row taken over ([`Cut::Lost`]), and when
//! PostgreSQL could not confirm the lease for `SEND_LEASE` − a margin ([`Cut::Deadline`]):
//! past that point lease recovery may already have rescheduled the row, and a request still
//! running could deliver the message a second time. Dropping the attempt's future cancels its
//! requests and frees its in-flight lease in Redis (the rate-limited mailer's guard).

use std::{
    future::Future,
    time::{Duration, Instant},
};

use sqlx::PgPool;

use crate::{
    log_events,
    store::messages::{self, Fence},
};

/// How an attempt was stopped before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// A renewal found the row no longer held by this attempt's claim.
    Lost,
    /// No renewal succeeded for the lease minus the margin (PostgreSQL unreachable).
    Deadline,
}

/// Renews row leases of attempts in flight (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct LeaseKeeper {
    pool: PgPool,
    lease: Duration,
}

impl LeaseKeeper {
    /// A keeper for leases of `lease` (`SEND_LEASE`).
    pub(crate) fn new(pool: PgPool, lease: Duration) -> Self {
        Self { pool, lease }
    }

    /// How long before a lease ends an attempt that could not renew it stops: a tenth of the
    /// lease, between 1 s and 30 s (room for the recovery loop's own lag and the outcome write).
    pub(crate) fn margin(lease: Duration) -> Duration {
        (lease / 10).clamp(Duration::from_secs(1), Duration::from_secs(30))
    }

    /// How often a live attempt renews: a quarter of the lease.
    fn every(&self) -> Duration {
        self.lease / 4
    }

    /// Runs `attempt`, renewing the lease of `fence` (claimed at `claimed`) while it runs.
    ///
    /// # Errors
    /// [`Cut`] when the attempt was stopped; it was dropped then.
    pub(crate) async fn keep<T>(
        &self,
        fence: Fence,
        claimed: Instant,
        attempt: impl Future<Output = T>,
    ) -> Result<T, Cut> {
        let mut attempt = std::pin::pin!(attempt);
        let deadline_after = self.lease.saturating_sub(Self::margin(self.lease));
        let mut renewed = claimed;
        let mut next = claimed + self.every();
        loop {
            let deadline = renewed + deadline_after;
            let wake = tokio::time::Instant::from_std(next.min(deadline));
            tokio::select! {
                out = &mut attempt => return Ok(out),
                () = tokio::time::sleep_until(wake) => {}
            }
            if Instant::now() >= deadline {
                return Err(Cut::Deadline);
            }
            // The attempt is polled while the renewal waits for PostgreSQL.
            let asked = Instant::now();
            let renewal = messages::renew_lease(&self.pool, fence);
            let mut renewal = std::pin::pin!(tokio::time::timeout(
                deadline.saturating_duration_since(asked),
                renewal
            ));
            let renewed_now = tokio::select! {
                out = &mut attempt => return Ok(out),
                r = &mut renewal => r,
            };
            match renewed_now {
                Ok(Ok(true)) => {
                    renewed = asked;
                    next = asked + self.every();
                }
                Ok(Ok(false)) => return Err(Cut::Lost),
                Ok(Err(e)) => {
                    tracing::warn!(
                        event = log_events::MAIL_SEND_LEASE_RENEWAL_FAILED,
                        message.id = %fence.id,
                        error = %e,
                        "renewing the send lease failed; retrying (the attempt stops at its lease deadline)"
                    );
                    next = Instant::now() + Duration::from_secs(1).min(self.every());
                }
                Err(_) => return Err(Cut::Deadline),
            }
        }
    }
}
