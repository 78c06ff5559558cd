//! The distributed per-mailbox rate limiter: one atomic Lua `check_and_reserve` per Graph send
//! in Redis, a `release` when the request ends, a shared cooldown after a provider's
//! `Retry-After`, and a bounded fail-open when Redis is unreachable.
//!
//! Two algorithms sit behind the one [`RateLimiter`] contract, chosen by
//! `MAIL_RATE_LIMIT_ALGORITHM`:
//! - [`Algorithm::Paced`] (`paced`, the default, `paced/`): rolling 60 s and 24 h windows, sends
//!   paced evenly across the minute, a booked slot for every message that does not fit now (so
//!   a backlog of B messages costs O(B) decisions), in-flight leases per mailbox, a cooldown
//!   shared by every replica, an optional tenant budget for external recipients;
//! - [`Algorithm::FixedWindow`] (`fixed-window`, `fixed_window/`): the design note's UTC-minute
//!   and UTC-day counters, byte for byte — the baseline benchmarks compare against.
//!
//! Layout: `limiter.rs` ([`MailRateLimiter`]: dispatch, fail-open, seeding), `connection.rs` (the
//! limiter's own connection, standalone or Redis Cluster, with deadlines), `local.rs` (the
//! in-process pacer used while failing open), `log_throttle.rs`, and one folder per algorithm
//! with its keys; the scripts live in `lua/<algorithm>/`.
//!
//! Fail-open happens in exactly one place, [`MailRateLimiter::check_and_reserve`]: a Redis
//! failure never reaches the caller as an error, only as a locally paced, uncounted
//! [`Reservation`] (kept by the process and added to Redis's windows when it answers again)
//! and a bounded `mail.rateLimit.redisError` (warn) or `mail.rateLimit.scriptError` (error)
//! line.
//!
//! `paced` decides on one clock, Redis's (`TIME` in the scripts); the caller's `now` is used
//! only with the test-only [`RateLimitConfig::caller_clock`] (and by `fixed-window`, the
//! design note's script).

mod connection;
pub(crate) mod fixed_window;
mod limiter;
mod local;
mod log_throttle;
pub mod paced;
pub(crate) mod usage;

use std::{fmt, num::NonZeroU32, str::FromStr, time::Duration};

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use connection::{RateLimitSetupError, RedisCallError, RedisUrls};
pub use fixed_window::keys;
pub use limiter::{MailRateLimiter, SendHistory, SentRecord};

/// `lua/fixed_window/check_and_reserve.lua` (the design note's script, unchanged).
pub const CHECK_AND_RESERVE_LUA: &str = fixed_window::CHECK_AND_RESERVE_LUA;
use crate::domain::MailboxAddress;
pub(crate) use crate::domain::TenantBudget;

/// Which algorithm the limiter runs (`MAIL_RATE_LIMIT_ALGORITHM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// `paced` (default): rolling windows, booked slots, in-flight leases, cooldown.
    #[default]
    Paced,
    /// `fixed-window`: the design note's UTC-minute and UTC-day counters.
    FixedWindow,
}

impl Algorithm {
    /// `paced` or `fixed-window`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Paced => "paced",
            Self::FixedWindow => "fixed-window",
        }
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "paced" => Ok(Self::Paced),
            "fixed-window" => Ok(Self::FixedWindow),
            _ => Err("must be `paced` or `fixed-window`".into()),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The limiter's settings (the `MAIL_RATE_LIMIT_*` and `MAIL_MAILBOX_*` variables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// `MAIL_RATE_LIMIT_ALGORITHM`, default `paced`.
    pub algorithm: Algorithm,
    /// `MAIL_RATE_LIMIT_REDIS_URL`; unset means `REDIS_URL`. One URL: a standalone Redis or any
    /// node of a Redis Cluster (detected from its first `MOVED` answer); several
    /// (comma-separated): seed nodes of a Redis Cluster.
    pub redis_url: RedisUrls,
    /// `MAIL_RATE_LIMIT_PER_MINUTE` (default 25 messages per mailbox per minute) and
    /// `MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY` (default 9,000 recipients per mailbox per day).
    /// Both sit a little under Exchange Online's 30 messages a minute and 10,000 recipients per
    /// rolling 24 h (<https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>,
    /// <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>).
    pub defaults: RateLimits,
    /// `MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS`, default 250 ms: the deadline of one limiter call
    /// before it fails open.
    pub redis_timeout: Duration,
    /// `MAIL_RATE_LIMIT_KEY_PREFIX`, default `mail:rl`.
    pub key_prefix: String,
    /// `MAIL_MAILBOX_MAX_IN_FLIGHT`, default 3 (`paced` only): requests in flight per mailbox
    /// across every replica. Graph allows 4 concurrent requests per app and mailbox
    /// (<https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>).
    pub max_in_flight: NonZeroU32,
    /// How long an in-flight lease lives unless renewed: [`IN_FLIGHT_LEASE`] (15 s). A running
    /// attempt renews it every third of that, so a killed worker's leases free within it.
    pub lease: Duration,
    /// `MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS`, default 1: while the limiter's Redis is unreachable
    /// each process paces each mailbox at its limit divided by this (set it to the replica
    /// count).
    pub fail_open_replicas: NonZeroU32,
    /// Tests only (the environment never sets it): `paced` decides by the `now` each caller
    /// passes instead of Redis's `TIME`, so a test can drive virtual time. Production uses one
    /// clock, Redis's, for every replica. `fixed-window` always uses the caller's (the design
    /// note's script).
    pub caller_clock: bool,
}

/// The in-flight lease: 15 s, renewed every 5 s while the attempt runs (see
/// `docs/decisions/in-flight-leases.md`).
pub const IN_FLIGHT_LEASE: Duration = Duration::from_secs(15);

/// One mailbox's budget, passed with every call so an override applies on the next message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimits {
    /// Messages per mailbox per minute (`paced`: any 60 s; `fixed-window`: per UTC minute).
    /// Default 25, under Exchange's 30 per minute.
    pub per_minute: NonZeroU32,
    /// Recipients (To + Cc + Bcc) per mailbox per day (`paced`: any 24 h; `fixed-window`: per
    /// UTC day). Default 9,000, under Exchange's 10,000 per rolling 24 h.
    /// Source: <https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>.
    pub recipients_per_day: NonZeroU32,
}

/// What one send asks of the limiter.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// `messages.id`: a booked slot belongs to it.
    pub message_id: Uuid,
    /// The sending mailbox.
    pub mailbox: &'a MailboxAddress,
    /// The Graph tenant the mailbox belongs to (`paced` keys share it as their hash tag, so
    /// the tenant budget is decided in the same atomic call).
    pub tenant: &'a str,
    /// To + Cc + Bcc.
    pub recipients: u32,
    /// The mailbox's budget.
    pub limits: RateLimits,
    /// The tenant's external budget and how many of the recipients count against it.
    pub tenant_budget: Option<(u32, NonZeroU32)>,
}

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

    fn parse(text: &str) -> Option<Self> {
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

/// What a reservation took, so [`RateLimiter::release`] gives exactly that back. An
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
    /// Send now; then [`RateLimiter::release`] it with the request's outcome.
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

/// How the request of an allowed reservation ended, for [`RateLimiter::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The provider accepted it, or may have (timeout, reset, 5xx after the request was
    /// written, throttled): the budget stays used; only the in-flight lease is freed.
    Done,
    /// The request surely never reached the provider (connect error, local refusal, 4xx
    /// refusal): the budget is given back too.
    Unsent,
}

/// Failures a caller must act on. Redis trouble is *not* here: the limiter fails open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitError {
    /// The message alone has more recipients than the mailbox may send in a whole day: it can
    /// never fit and must fail permanently instead of being deferred day after day.
    #[error(
        "message has {recipients} recipients but mailbox {mailbox} may send to at most {recipients_per_day} recipients per day"
    )]
    RecipientsExceedDayLimit {
        /// The mailbox.
        mailbox: MailboxAddress,
        /// To + Cc + Bcc of the message.
        recipients: u32,
        /// The mailbox's day limit.
        recipients_per_day: u32,
    },
    /// The message alone has more external recipients than its tenant may send in a day.
    #[error(
        "message has {external} external recipients but its tenant may send to at most {per_day} external recipients per day"
    )]
    ExternalRecipientsExceedTenantLimit {
        /// External recipients of the message.
        external: u32,
        /// The tenant's day limit.
        per_day: u32,
    },
    /// The message has no recipients at all (To + Cc + Bcc = 0). Graph refuses such a message
    /// and there is nothing to count, so it fails permanently, without touching Redis.
    #[error("message from mailbox {mailbox} has no recipients (To + Cc + Bcc is 0)")]
    NoRecipients {
        /// The mailbox.
        mailbox: MailboxAddress,
    },
}

/// What the rate-limited decorator needs from a limiter; [`MailRateLimiter`] is the real one,
/// tests use fakes.
pub trait RateLimiter: Send + Sync + 'static {
    /// Atomically reserves one message and its recipients in the mailbox's budgets, or says
    /// which budget refused and when to come back. `now` is the caller's time: [`MailRateLimiter`]
    /// decides `paced` by Redis's clock (unless built with the test-only
    /// [`RateLimitConfig::caller_clock`]) and uses `now` only to pace locally. Fails open
    /// (allowed, locally paced, counted in Redis later) when Redis is unreachable or slow.
    ///
    /// # Errors
    /// [`RateLimitError`] for a message that can never fit, without touching Redis.
    fn check_and_reserve(
        &self,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Decision, RateLimitError>> + Send;

    /// Ends the request of `reservation`: frees its in-flight lease and, for
    /// [`Outcome::Unsent`], gives its budget back. Never fails: a Redis error is logged and the
    /// lease expires by itself.
    fn release(
        &self,
        reservation: &Reservation,
        outcome: Outcome,
    ) -> impl Future<Output = ()> + Send;

    /// How often a running attempt renews its in-flight lease ([`Self::renew`]); `None` when
    /// leases need no renewal (the default: fakes, `fixed-window`).
    fn renew_every(&self) -> Option<Duration> {
        None
    }

    /// Extends the in-flight lease of a running attempt by a full lease from now. Never fails:
    /// a lease that cannot be renewed expires by itself.
    fn renew(
        &self,
        reservation: &Reservation,
        now: DateTime<Utc>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (reservation, now);
        async {}
    }

    /// Holds every message of `ask.mailbox` until `until` (a provider's `Retry-After`), for
    /// every replica. A no-op for `fixed-window`.
    fn cooldown(
        &self,
        ask: &Ask<'_>,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = ()> + Send;
}

/// Validates what no budget can ever hold; shared by every algorithm.
pub(crate) fn never_fits(ask: &Ask<'_>) -> Result<(), RateLimitError> {
    if ask.recipients == 0 {
        return Err(RateLimitError::NoRecipients {
            mailbox: ask.mailbox.clone(),
        });
    }
    if ask.recipients > ask.limits.recipients_per_day.get() {
        return Err(RateLimitError::RecipientsExceedDayLimit {
            mailbox: ask.mailbox.clone(),
            recipients: ask.recipients,
            recipients_per_day: ask.limits.recipients_per_day.get(),
        });
    }
    if let Some((external, per_day)) = ask.tenant_budget
        && external > per_day.get()
    {
        return Err(RateLimitError::ExternalRecipientsExceedTenantLimit {
            external,
            per_day: per_day.get(),
        });
    }
    Ok(())
}

pub(crate) fn epoch_ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

/// A script's status text.
pub(crate) fn text(value: &::redis::Value) -> Option<&str> {
    match value {
        ::redis::Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        ::redis::Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithms_parse_by_their_env_names() {
        assert_eq!("paced".parse(), Ok(Algorithm::Paced));
        assert_eq!("fixed-window".parse(), Ok(Algorithm::FixedWindow));
        assert!("gcra".parse::<Algorithm>().is_err());
        assert_eq!(Algorithm::default().as_str(), "paced");
    }

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
