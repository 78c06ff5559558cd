//! [`LiveLease`]: a `paced` lease this process holds, until its request ends.

use std::time::Instant;

use chrono::{DateTime, Utc};

#[cfg(doc)]
use crate::rate_limit::RateLimiter;
use crate::rate_limit::Reservation;

/// A `paced` lease this process holds.
#[derive(Debug)]
pub(in crate::rate_limit) struct LiveLease {
    pub(super) reservation: Reservation,
    /// When it was taken (its request's duration, measured at the release).
    pub(super) taken: Instant,
    /// Set when its send was cut off mid-request ([`RateLimiter::hold_until`]): kept until
    /// then, when that request can no longer be in flight.
    pub(super) hold_until: Option<DateTime<Utc>>,
}

impl LiveLease {
    /// A lease just taken.
    pub(in crate::rate_limit) fn new(reservation: Reservation) -> Self {
        Self {
            reservation,
            taken: Instant::now(),
            hold_until: None,
        }
    }
}
