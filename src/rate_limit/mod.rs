//! The distributed per-mailbox rate limiter: one atomic Lua `check_and_reserve` per Graph send
//! against the mailbox's UTC-minute (messages) and UTC-day (recipients) counters in Redis, a
//! `release` when the send fails, and fail-open when Redis is unreachable.
//!
//! Layout: `limiter.rs` (the Redis client, fail-open), `keys.rs` (key formats and bucket
//! arithmetic), `log_throttle.rs` (one fail-open line per second); the scripts are
//! `lua/check_and_reserve.lua` and `lua/release.lua`.
//!
//! Fail-open happens in exactly one place, [`MailRateLimiter::check_and_reserve`]: a Redis
//! failure never reaches the caller as an error, only as an uncounted [`Reservation`] and a
//! bounded `mail.rateLimit.redisError` (warn) or `mail.rateLimit.scriptError` (error) line.

pub mod keys;
mod limiter;
mod log_throttle;

use std::{fmt, num::NonZeroU32, time::Duration};

use chrono::{DateTime, Utc};

pub use limiter::{
    CHECK_AND_RESERVE_LUA, MailRateLimiter, RELEASE_LUA, RateLimitSetupError, RedisCallError,
};

use crate::domain::MailboxAddress;

/// One mailbox's budget, passed with every call so an override applies on the next message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimits {
    /// Messages per mailbox per UTC minute (default 25, under Exchange's 30 per minute).
    pub per_minute: NonZeroU32,
    /// Recipients (To + Cc + Bcc) per mailbox per UTC day (default 9,000, under Exchange's
    /// 10,000 per 24 h). Source: <https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>.
    pub recipients_per_day: NonZeroU32,
}

/// Which budget refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenyReason {
    /// The UTC minute's message budget is spent.
    Minute,
    /// The UTC day's recipient budget cannot take this message.
    Day,
}

impl DenyReason {
    /// `minute` or `day`, as in the Lua reply and the `reason` log field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Day => "day",
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a reservation took, so [`RateLimiter::release`] can give exactly that back to the same
/// buckets. An *uncounted* reservation (made while failing open) releases nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The mailbox.
    pub mailbox: MailboxAddress,
    /// Recipients taken from the day bucket.
    pub recipients: u32,
    /// `(minute key, day key)` the reservation incremented; `None` when it was made fail-open.
    pub keys: Option<(String, String)>,
}

impl Reservation {
    /// A reservation that took nothing (fail-open): releasing it is a no-op.
    pub fn uncounted(mailbox: MailboxAddress, recipients: u32) -> Self {
        Self {
            mailbox,
            recipients,
            keys: None,
        }
    }

    /// Whether Redis counted it.
    pub fn is_counted(&self) -> bool {
        self.keys.is_some()
    }
}

/// The limiter's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Send now; keep the reservation if the send succeeds, release it if not.
    Allowed(Reservation),
    /// Do not send; try again after `retry_after` (ms to the next UTC minute or day).
    Denied {
        /// Which budget is spent.
        reason: DenyReason,
        /// Time until that budget resets.
        retry_after: Duration,
    },
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
    /// Atomically reserves one message and `recipients` recipients in `mailbox`'s buckets for
    /// the UTC minute and day of `now`, or says which budget is spent. Fails open (allowed,
    /// uncounted) when Redis is unreachable or slow.
    ///
    /// # Errors
    /// [`RateLimitError::RecipientsExceedDayLimit`] or [`RateLimitError::NoRecipients`],
    /// without touching Redis.
    fn check_and_reserve(
        &self,
        mailbox: &MailboxAddress,
        recipients: u32,
        limits: RateLimits,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Decision, RateLimitError>> + Send;

    /// Gives back what `reservation` took, in the buckets it took it from. Never fails: a
    /// Redis error is logged and the counters expire with their TTLs.
    fn release(&self, reservation: &Reservation) -> impl Future<Output = ()> + Send;
}
