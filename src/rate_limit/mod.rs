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
//! Layout, along the data path: `settings.rs` (what is configured), `ask.rs` (what a send asks),
//! `decision.rs` (what the limiter answers), `limiter/` ([`MailRateLimiter`]: dispatch,
//! fail-open, seeding), `connection/` (the limiter's own Redis connection, standalone or
//! Cluster, with deadlines), one folder per algorithm with its keys (scripts in
//! `lua/<algorithm>/`), `local.rs` (the in-process pacer used while failing open), `usage.rs`
//! (read-only usage for operators) and `log_throttle.rs`. [`Reservation`] stays here: it names
//! each algorithm's state, and the algorithms build it. A new algorithm is one more folder and
//! one more [`Algorithm`] variant dispatched in `limiter/`.
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

pub(crate) mod adaptive;
mod ask;
mod connection;
mod decision;
pub mod fixed_window;
mod limiter;
mod local;
mod log_throttle;
pub mod paced;
mod replicas;
mod settings;
pub(crate) mod usage;

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use adaptive::{KeptSuspension, ScopeKey, Signalled};
pub(crate) use ask::never_fits;
pub use ask::{Ask, RateLimitError};
pub(crate) use connection::Link as RedisLink;
pub use connection::{RateLimitSetupError, RedisCallError, RedisUrls};
pub use decision::{Decision, DenyReason, RequestEnd};
pub use limiter::AdaptiveOn;
pub(crate) use limiter::DecisionMetrics;
pub(crate) use limiter::ReadLease;
pub use limiter::{LimitPause, MailRateLimiter, MemberSlot, PauseScope, SendHistory, SentRecord};
pub use paced::BookedRow;
pub use replicas::LiveReplicas;
pub use settings::{
    Algorithm, IN_FLIGHT_LEASE, MAX_RESERVED_PERCENT, RateLimitConfig, RateLimits,
    parse_reserved_percent,
};

use crate::domain::MailboxAddress;
pub(crate) use crate::domain::TenantBudget;

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
    /// [`RequestEnd::Unsent`], gives its budget back. Never fails: a Redis error is logged and the
    /// lease expires by itself.
    fn release(
        &self,
        reservation: &Reservation,
        end: RequestEnd,
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

    /// Notes, at once and without waiting, that the send of `reservation` was cut off (its
    /// future dropped: a shutdown's grace, a deadline, a panic) while its latest provider
    /// request may be in flight until `until` (that request's start + `HTTP_TIMEOUT`): its
    /// lease is to be kept until then, not ended now, also by a shutdown that ends before
    /// [`Self::cut_off`] ran ([`MailRateLimiter::hold_live`]). Default: nothing to note.
    fn hold_until(&self, reservation: &Reservation, until: DateTime<Utc>) {
        let _ = (reservation, until);
    }

    /// Ends the request of a send cut off mid-request: its in-flight lease now expires at
    /// `until` (set, not extended: it may shorten a renewed lease), when the request can no
    /// longer be in flight at the provider, so no replica puts one more request on the
    /// mailbox while Graph still serves it. The budget stays counted (the request may have
    /// gone). Call [`Self::hold_until`] first. Default: [`Self::release`] as
    /// [`RequestEnd::Done`].
    fn cut_off(
        &self,
        reservation: &Reservation,
        until: DateTime<Utc>,
    ) -> impl Future<Output = ()> + Send {
        let _ = until;
        self.release(reservation, RequestEnd::Done)
    }

    /// Each member's next free slot and day count, for a sender pool's placement (see
    /// [`MemberSlot`]); `None` each where the limiter holds no slots (the default: fakes).
    fn member_slots(
        &self,
        mailboxes: &[(String, MailboxAddress)],
    ) -> impl Future<Output = Vec<Option<MemberSlot>>> + Send {
        let n = mailboxes.len();
        async move { vec![None; n] }
    }

    /// Drops the bookings of `ids` on `mailbox` (Graph tenant `tenant`, lower case): their
    /// messages went elsewhere before their slot (a pooled message placed again or
    /// overflowed), so the slots free for the mailbox's next messages. Never fails: a booking
    /// not dropped expires after the booking grace. Default: nothing (fakes, `fixed-window`).
    fn drop_bookings(
        &self,
        tenant: &str,
        mailbox: &MailboxAddress,
        ids: &[uuid::Uuid],
        now: DateTime<Utc>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (tenant, mailbox, ids, now);
        async {}
    }

    /// When `campaign`'s messages may go again, if it is suspended at `now`
    /// ([`MailRateLimiter::campaign_suspension`]). Default: never (fakes).
    fn campaign_suspended_until(
        &self,
        campaign: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Option<DateTime<Utc>>> + Send {
        let _ = (campaign, now);
        async { None }
    }

    /// Counts a provider's `signal` for `ask`'s mailbox and tenant by the adaptive rules
    /// ([`MailRateLimiter::adaptive_signal`]). Default: nothing (fakes).
    fn signal(
        &self,
        signal: crate::domain::adaptive::Signal,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (signal, ask, now);
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

/// `at` in ms since the Unix epoch, as the scripts count time.
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
