//! What the limiter answers ([`Decision`], holding a [`Reservation`] when allowed) and how the
//! caller ends an allowed request ([`RequestEnd`]).

use std::{fmt, time::Duration};

use super::Reservation;

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
    /// An adaptive rule or an operator suspended the mailbox, its tenant's external mail or
    /// its campaign (docs/decisions/0048-adaptive-rules.md): deferred until it ends.
    Suspended,
}

impl DenyReason {
    /// `minute`, `day`, `tenant`, `cooldown`, `in_flight` or `suspended`, as in the Lua reply
    /// and the `reason` log field.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Day => "day",
            Self::Tenant => "tenant",
            Self::Cooldown => "cooldown",
            Self::InFlight => "in_flight",
            Self::Suspended => "suspended",
        }
    }

    pub(super) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "minute" => Self::Minute,
            "day" => Self::Day,
            "tenant" => Self::Tenant,
            "cooldown" => Self::Cooldown,
            "in_flight" => Self::InFlight,
            "suspended" => Self::Suspended,
            _ => return None,
        })
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
            DenyReason::Suspended,
        ] {
            assert_eq!(DenyReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(DenyReason::parse("hour"), None);
    }
}
