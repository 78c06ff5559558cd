//! [`LeaseGuard`]: an allowed reservation's in-flight lease, released even when the attempt's
//! future is dropped.

use std::sync::Arc;

use crate::rate_limit::{RateLimiter, RequestEnd, Reservation};

/// Holds an allowed reservation while its attempt runs. Dropped with the reservation still in
/// it — the attempt's future was dropped: a shutdown's grace cut, a deadline, a panic — it
/// releases the lease as [`RequestEnd::Done`] (the request may have gone) on the current Tokio
/// runtime, if there is one, instead of leaving the mailbox's slot held until the lease
/// expires. As tower's `ConcurrencyLimit` keeps its permit in the response future.
pub(super) struct LeaseGuard<L: RateLimiter> {
    limiter: Arc<L>,
    reservation: Option<Reservation>,
}

impl<L: RateLimiter> LeaseGuard<L> {
    /// Holds `reservation` until [`Self::disarm`].
    pub(super) fn new(limiter: Arc<L>, reservation: Reservation) -> Self {
        Self {
            limiter,
            reservation: Some(reservation),
        }
    }

    pub(super) fn reservation(&self) -> &Reservation {
        self.reservation.as_ref().expect("held until disarmed")
    }

    /// The attempt ended: the caller releases with its outcome.
    pub(super) fn disarm(mut self) -> Reservation {
        self.reservation.take().expect("held until disarmed")
    }
}

impl<L: RateLimiter> Drop for LeaseGuard<L> {
    fn drop(&mut self) {
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let limiter = Arc::clone(&self.limiter);
            runtime.spawn(async move { limiter.release(&reservation, RequestEnd::Done).await });
        }
    }
}
