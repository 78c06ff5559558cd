//! What the limiter answers ([`Decision`], holding a [`Reservation`] when allowed) and how the
//! caller ends an allowed request ([`RequestEnd`]).

use std::{fmt, time::Duration};

use uuid::Uuid;

use super::paced;
use crate::domain::MailboxAddress;

/// Which budget refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenyReason {
    /// The minute's message budget is spent (`paced`: the next slot of the pacing).
    Minute,
    /// The day's recipient budget cannot take this message now.
    Day,
    /// The tenant's external-recipient budget cannot take this message now.
    Tenant,
    /// The provider asked this mailbox to wait (`Retry-After`), seen by any replica.
    Cooldown,
    /// The mailbox already has its maximum of requests in flight.
    InFlight,
}

impl DenyReason {
    /// `minute`, `day`, `tenant`, `cooldown` or `in_flight`, as in the Lua reply and the
    /// `reason` log field.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Day => "day",
            Self::Tenant => "tenant",
            Self::Cooldown => "cooldown",
            Self::InFlight => "in_flight",
        }
    }

    pub(super) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "minute" => Self::Minute,
            "day" => Self::Day,
            "tenant" => Self::Tenant,
            "cooldown" => Self::Cooldown,
            "in_flight" => Self::InFlight,
            _ => return None,
        })
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a reservation took, so [`RateLimiter::release`](super::RateLimiter::release) gives exactly that back. An
/// *uncounted* reservation (made while failing open) releases nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The mailbox.
    pub mailbox: MailboxAddress,
    /// Recipients taken from the day budget.
    pub recipients: u32,
    /// Where it was counted.
    pub counted: Counted,
}

/// Where a [`Reservation`] was counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Counted {
    /// Nowhere: made while failing open.
    No,
    /// `fixed-window`: the `(minute key, day key)` it incremented.
    FixedWindow(String, String),
    /// `paced`: the mailbox's keys, the message, the reservation's time (ms) and the external
    /// recipients counted against the tenant.
    Paced {
        /// The mailbox's keys.
        keys: Box<paced::keys::PacedKeys>,
        /// The message holding the in-flight lease.
        message_id: Uuid,
        /// When it was counted (ms since the epoch).
        at_ms: i64,
        /// External recipients counted against the tenant.
        external: u32,
    },
}

impl Reservation {
    /// A reservation that took nothing (fail-open): releasing it is a no-op.
    pub(crate) fn uncounted(mailbox: MailboxAddress, recipients: u32) -> Self {
        Self {
            mailbox,
            recipients,
            counted: Counted::No,
        }
    }

    /// Whether Redis counted it.
    pub fn is_counted(&self) -> bool {
        self.counted != Counted::No
    }
}

/// The limiter's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Send now; then [`RateLimiter::release`](super::RateLimiter::release) it with the request's outcome.
    Allowed(Reservation),
    /// Do not send now; come back after `retry_after`.
    Denied {
        /// Which budget refused.
        reason: DenyReason,
        /// How long to wait.
        retry_after: Duration,
        /// Whether a slot at `now + retry_after` is now booked for this message (`paced`): it
        /// must come back then, not later by a spread (the slot already spreads the messages).
        booked: bool,
    },
}

/// How the request of an allowed reservation ended, for [`RateLimiter::release`](super::RateLimiter::release): whether the
/// budget it took stays used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestEnd {
    /// The provider accepted it, or may have (timeout, reset, 5xx after the request was
    /// written, throttled): the budget stays used; only the in-flight lease is freed.
    Done,
    /// The request surely never reached the provider (connect error, local refusal, 4xx
    /// refusal): the budget is given back too.
    Unsent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_reasons_round_trip_through_their_lua_names() {
        for reason in [
            DenyReason::Minute,
            DenyReason::Day,
            DenyReason::Tenant,
            DenyReason::Cooldown,
            DenyReason::InFlight,
        ] {
            assert_eq!(DenyReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(DenyReason::parse("hour"), None);
    }
}
