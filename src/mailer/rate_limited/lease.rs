//! [`LeaseGuard`]: an allowed reservation's in-flight lease, ended even when the attempt's
//! future is dropped — released when no request had started, kept until the request could
//! time out when one may still be in flight at the provider.

use std::sync::Arc;

use crate::{
    mailer::request_start::RequestStarts,
    rate_limit::{RateLimiter, RequestEnd, Reservation},
};

/// Holds an allowed reservation while its attempt runs. Dropped with the reservation still in
/// it — the attempt's future was dropped: a shutdown's grace cut, a deadline, a panic — it ends
/// the lease on the current Tokio runtime, if there is one, instead of leaving the mailbox's
/// slot held until the lease expires (as tower's `ConcurrencyLimit` keeps its permit in the
/// response future):
/// - a send that made a provider request ([`RequestStarts`]) keeps its lease until that request
///   can no longer be in flight at Graph, its start + `HTTP_TIMEOUT`
///   ([`RateLimiter::hold_until`] at once, then [`RateLimiter::cut_off`]): Graph may still be
///   serving it, and a 5th request on the mailbox meanwhile is a 429 (issue 46, point 4);
/// - a send that made none releases it as [`RequestEnd::Done`].
pub(super) struct LeaseGuard<L: RateLimiter> {
    limiter: Arc<L>,
    reservation: Option<Reservation>,
    starts: Option<Arc<RequestStarts>>,
}

impl<L: RateLimiter> LeaseGuard<L> {
    /// Holds `reservation` until [`Self::disarm`]; `starts` records the attempt's requests
    /// (`None`: the request timeout is not known, a drop releases).
    pub(super) fn new(
        limiter: Arc<L>,
        reservation: Reservation,
        starts: Option<Arc<RequestStarts>>,
    ) -> Self {
        Self {
            limiter,
            reservation: Some(reservation),
            starts,
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
        let until = self.starts.as_ref().and_then(|s| s.in_flight_until());
        if let Some(until) = until {
            // At once, so a shutdown that ends before the spawned task runs keeps it too.
            self.limiter.hold_until(&reservation, until);
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let limiter = Arc::clone(&self.limiter);
            runtime.spawn(async move {
                match until {
                    Some(until) => limiter.cut_off(&reservation, until).await,
                    None => limiter.release(&reservation, RequestEnd::Done).await,
                }
            });
        }
    }
}
