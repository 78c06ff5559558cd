//! The limiter's settings: which algorithm, which Redis, and the default budgets.

use std::{num::NonZeroU32, time::Duration};

use super::RedisUrls;

/// Which algorithm the limiter runs (`MAIL_RATE_LIMIT_ALGORITHM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// `paced` (default): rolling windows, booked slots, in-flight leases, cooldown.
    #[default]
    Paced,
    /// `fixed-window`: the design note's UTC-minute and UTC-day counters.
    FixedWindow,
}

crate::domain::keyword::keywords!(Algorithm {
    Paced => "paced",
    FixedWindow => "fixed-window",
});

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
    /// `MAIL_RATE_LIMIT_REDIS_TIMEOUT`, default 250 ms: the deadline of one limiter call
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
    /// each process paces each mailbox at its limit divided by max(this, the live replicas the
    /// heartbeat counts): a lower bound on the replicas sharing the budgets.
    pub fail_open_replicas: NonZeroU32,
    /// `MAIL_RATE_LIMIT_UNREACHABLE_NOT_READY_AFTER`, default 60000: a limiter whose Redis
    /// has not answered once since start-up for this long makes `/readyz` not ready
    /// (`down: ["rate_limit_redis"]`), so a rollout with a wrong `REDIS_URL` stops at its first
    /// pod; one that answered once and was lost later stays degraded.
    pub unreachable_not_ready_after: Duration,
    /// Tests only (the environment never sets it): `paced` decides by the `now` each caller
    /// passes instead of Redis's `TIME`, so a test can drive virtual time. Production uses one
    /// clock, Redis's, for every replica. `fixed-window` always uses the caller's (the design
    /// note's script).
    pub caller_clock: bool,
}

/// The in-flight lease: 15 s, renewed every 5 s while the attempt runs (see
/// `docs/decisions/0002-in-flight-leases.md`).
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
    /// The share (percent, 0 to [`MAX_RESERVED_PERCENT`]) of the minute, day and tenant budgets
    /// that only `high` messages may use (`paced` only; 0: off, priority ignored by the
    /// limiter). Default 20 (`MAIL_RATE_LIMIT_RESERVED_PERCENT`).
    pub reserved_percent: u8,
}

impl RateLimits {
    /// The budget of `sender` when these are the defaults: a system mailbox's own
    /// `rate_limit_per_minute`, `rate_limit_recipients_per_day` and
    /// `rate_limit_reserved_percent` where set (a tenant's sender has none), the day budget
    /// capped by its warm-up's current step where it has one (ADR 0047) — the one place the
    /// limits in force are decided (the mailer factory, `mailbox usage`, the forecast).
    pub fn for_sender(self, sender: &crate::domain::Sender) -> Self {
        match sender {
            crate::domain::Sender::SystemMailbox(m) => self.for_system_mailbox(m),
            crate::domain::Sender::Tenant(t) => self.for_tenant(t),
        }
    }

    /// [`Self::for_sender`] of a tenant's sender: the defaults, its warm-up's cap applied.
    pub fn for_tenant(self, t: &crate::domain::Tenant) -> Self {
        self.warmed_up(t.warm_up)
    }

    /// [`Self::for_sender`] of a system mailbox.
    pub fn for_system_mailbox(self, m: &crate::domain::SystemMailbox) -> Self {
        Self {
            per_minute: m.rate_limit_per_minute.unwrap_or(self.per_minute),
            recipients_per_day: m
                .rate_limit_recipients_per_day
                .unwrap_or(self.recipients_per_day),
            reserved_percent: m
                .rate_limit_reserved_percent
                .unwrap_or(self.reserved_percent),
        }
        .warmed_up(m.warm_up)
    }

    /// The recipients-per-day budget in force: min(configured, the warm-up step's budget).
    fn warmed_up(self, warm_up: Option<crate::domain::WarmUpStep>) -> Self {
        Self {
            recipients_per_day: warm_up.map_or(self.recipients_per_day, |w| {
                w.day_budget().min(self.recipients_per_day)
            }),
            ..self
        }
    }
}

/// The largest reserved share: `normal` and `bulk` keep at least a tenth of every budget.
pub const MAX_RESERVED_PERCENT: u8 = 90;

/// Reads a reserved share: a whole number from 0 to [`MAX_RESERVED_PERCENT`].
///
/// # Errors
/// The sentence to show when it is not.
pub fn parse_reserved_percent(raw: &str) -> Result<u8, &'static str> {
    raw.trim()
        .parse::<u8>()
        .ok()
        .filter(|p| *p <= MAX_RESERVED_PERCENT)
        .ok_or("must be a whole number from 0 to 90")
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
}
