//! [`LiveLease`]: a `paced` lease this process holds, until its request ends; the in-flight
//! leases a shutdown ends ([`MailRateLimiter::hold_live`]).

use std::{collections::HashMap, sync::PoisonError, time::Instant};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Engine, MailRateLimiter};
use crate::{
    log_events,
    rate_limit::{
        Counted, RateLimiter, RequestEnd, Reservation,
        paced::{Paced, keys::PacedKeys},
    },
};

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

impl MailRateLimiter {
    pub(super) fn live_leases(&self) -> std::sync::MutexGuard<'_, HashMap<(Uuid, i64), LiveLease>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends every lease this process still holds — the sends a shutdown cut off — before it
    /// exits: a send whose request may still be in flight at Graph
    /// ([`RateLimiter::hold_until`]) keeps its lease until that request's start +
    /// `HTTP_TIMEOUT` (so a restarted replica does not put a 5th request on the mailbox
    /// while Graph still serves it: issue 46, point 4); a send that made no request is
    /// released (as [`RequestEnd::Done`]), so other replicas need not wait for it to expire.
    /// Returns (held, released). Call it once the workers have stopped.
    pub async fn hold_live(&self) -> (usize, usize) {
        let left: Vec<LiveLease> = self.live_leases().drain().map(|(_, l)| l).collect();
        let (mut held, mut released) = (0, 0);
        for lease in &left {
            match lease.hold_until {
                Some(until) => {
                    self.hold_lease(&lease.reservation, until).await;
                    held += 1;
                }
                None => {
                    self.release(&lease.reservation, RequestEnd::Done).await;
                    released += 1;
                }
            }
        }
        if !left.is_empty() {
            tracing::info!(
                event = log_events::MAIL_RATE_LIMIT_RECONCILED,
                leases_held = held,
                leases_released = released,
                "ended the in-flight leases of sends cut off by the shutdown: those whose request may still be in flight at Graph are kept until it times out"
            );
        }
        (held, released)
    }

    /// Sets the lease of `reservation` to expire at `until` (the limiter's clock).
    pub(super) async fn hold_lease(&self, reservation: &Reservation, until: DateTime<Utc>) {
        let Some((paced, keys, message_id)) = self.paced_lease(reservation) else {
            return;
        };
        let until_ms = self.limiter_ms(until);
        match paced.hold(&self.redis, keys, message_id, until_ms).await {
            Ok(held) => tracing::debug!(
                mailbox = %reservation.mailbox,
                held,
                until_ms,
                "in-flight lease of a cut-off send kept until its request times out"
            ),
            Err(error) => self.log_failure("hold", &reservation.mailbox, &error),
        }
    }
    /// The `paced` engine, keys and message of `reservation`'s in-flight lease; `None` when it
    /// holds none (`fixed-window`, or made while failing open).
    pub(super) fn paced_lease<'a>(
        &'a self,
        reservation: &'a Reservation,
    ) -> Option<(&'a Paced, &'a PacedKeys, Uuid)> {
        match (&self.engine, &reservation.counted) {
            (
                Engine::Paced(paced),
                Counted::Paced {
                    keys, message_id, ..
                },
            ) => Some((paced, keys, *message_id)),
            _ => None,
        }
    }
}
