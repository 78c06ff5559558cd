//! [`MailRateLimiter`]: the Redis-backed [`RateLimiter`] — one Lua round trip per decision on
//! its own short-timeout connection, the algorithm chosen by configuration, budgets rebuilt
//! from the send history when Redis has forgotten them (`seeding.rs`), and a bounded fail-open
//! (`fail_open.rs`).

mod fail_open;
mod live;
mod metrics;
mod pauses;
mod reads;
mod seeding;
mod slots;
mod trace_budget;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, atomic::AtomicI64},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub(super) use self::live::LiveLease;
pub use self::metrics::AdaptiveOn;
pub(crate) use self::metrics::DecisionMetrics;
pub use self::pauses::{LimitPause, PauseScope};
pub(crate) use self::reads::ReadLease;
pub use self::seeding::{SendHistory, SentRecord};
pub use self::slots::MemberSlot;
use super::{
    Algorithm, Ask, Counted, Decision, LiveReplicas, RateLimitConfig, RateLimitError, RateLimiter,
    RequestEnd, Reservation,
    adaptive::Adaptive,
    connection::{RateLimitSetupError, RedisCallError, RedisConn},
    fixed_window::FixedWindow,
    local::LocalPacer,
    log_throttle::LogThrottle,
    never_fits,
    paced::{Paced, keys::PacedKeys},
};
use crate::{
    domain::{MailboxAddress, adaptive::RuleTable},
    log_events,
};

/// At most one `mail.rateLimit.redisError` and one `mail.rateLimit.scriptError` line per this
/// interval per limiter (one limiter per process): 1 s.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// The algorithm the limiter runs, with its scripts.
enum Engine {
    FixedWindow(FixedWindow),
    /// Boxed: seven scripts.
    Paced(Box<Paced>),
}

/// The distributed per-mailbox rate limiter (see the module docs of [`crate::rate_limit`]).
///
/// One per process, shared by every Graph mailer through an `Arc`. Every call is bounded by the
/// configured deadline; past it, or on any Redis error, `check_and_reserve` fails open with an
/// uncounted [`Reservation`] — `paced` pacing the mailbox in process at its limit ÷
/// max(live replicas, `MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS`), `fixed-window` (the design note's) without a brake.
pub struct MailRateLimiter {
    pub(super) redis: RedisConn,
    engine: Engine,
    pub(super) key_prefix: String,
    history: Option<Arc<dyn SendHistory>>,
    local: LocalPacer,
    /// Redis's clock minus this process's (ms), as the last `paced` reply showed: fail-open
    /// decisions and their records use Redis's clock too. 0 with the caller clock.
    clock_offset_ms: AtomicI64,
    /// This process's `paced` reservations whose lease is not ended yet, by (message, time):
    /// what a shutdown ends when it cut sends off ([`Self::hold_live`]).
    live: Mutex<HashMap<(Uuid, i64), LiveLease>>,
    redis_error_log: LogThrottle,
    script_error_log: LogThrottle,
    pub(super) metrics: Option<Arc<dyn DecisionMetrics>>,
    /// When it was built: how long its Redis has not answered since start-up.
    created: Instant,
    /// The adaptive rules and this process's view of the actions in force.
    pub(super) adaptive: Adaptive,
}

impl std::fmt::Debug for MailRateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client is left out: its connection info may carry a password.
        f.debug_struct("MailRateLimiter")
            .field("algorithm", &self.algorithm())
            .field("key_prefix", &self.key_prefix)
            .field("deadline", &self.redis.deadline())
            .finish_non_exhaustive()
    }
}

impl MailRateLimiter {
    /// A limiter on `config.redis_url` running `config.algorithm`, with keys under
    /// `config.key_prefix` and `config.redis_timeout` as the deadline of every call. Does not
    /// touch the network: it succeeds (and stays usable) while Redis is down.
    ///
    /// # Errors
    /// [`RateLimitSetupError::RedisUrl`] when the URL cannot be used by the Redis client.
    pub fn new(config: &RateLimitConfig) -> Result<Self, RateLimitSetupError> {
        Ok(Self {
            redis: RedisConn::new(&config.redis_url, config.redis_timeout)?,
            engine: match config.algorithm {
                Algorithm::FixedWindow => Engine::FixedWindow(FixedWindow::new()),
                Algorithm::Paced => Engine::Paced(Box::new(Paced::new(
                    config.max_in_flight.get(),
                    config.lease,
                    config.caller_clock,
                ))),
            },
            key_prefix: config.key_prefix.clone(),
            history: None,
            local: LocalPacer::new(config.fail_open_replicas),
            clock_offset_ms: AtomicI64::new(0),
            live: Mutex::new(HashMap::new()),
            redis_error_log: LogThrottle::new(LOG_INTERVAL),
            script_error_log: LogThrottle::new(LOG_INTERVAL),
            metrics: None,
            created: Instant::now(),
            adaptive: Adaptive::new(RuleTable { rules: Vec::new() }),
        })
    }

    /// Reports every decision and its round trip to `metrics` (`ops::Metrics`).
    #[must_use]
    pub(crate) fn with_metrics(mut self, metrics: Arc<impl DecisionMetrics + 'static>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// While failing open, shares each mailbox's budgets among max(`live`,
    /// `MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS`) replicas: `live` is what the heartbeat counts.
    #[must_use]
    pub fn with_live_replicas(mut self, live: LiveReplicas) -> Self {
        self.local.share_with(live);
        self
    }

    /// Among how many replicas fail-open shares each mailbox's budgets now.
    pub fn fail_open_shared_by(&self) -> u32 {
        self.local.replicas()
    }

    /// How long this limiter has existed without its Redis ever answering (`None`: it
    /// answered once): past `MAIL_RATE_LIMIT_UNREACHABLE_NOT_READY_AFTER`, `/readyz` says
    /// not ready, a wrong `REDIS_URL` more likely than an outage.
    pub fn unreachable_since_start(&self) -> Option<std::time::Duration> {
        (!self.redis.ever_answered()).then(|| self.created.elapsed())
    }

    /// Rebuilds missing `paced` budgets from `history` (PostgreSQL's sent messages).
    #[must_use]
    pub fn with_history(mut self, history: Arc<dyn SendHistory>) -> Self {
        self.history = Some(history);
        self
    }

    /// The algorithm it runs.
    pub(crate) fn algorithm(&self) -> Algorithm {
        match self.engine {
            Engine::FixedWindow(_) => Algorithm::FixedWindow,
            Engine::Paced(_) => Algorithm::Paced,
        }
    }

    /// Whether the limiter's Redis is a cluster: configured with several seeds, or found out
    /// from a `MOVED` answer (after the first call that got one).
    pub async fn is_cluster(&self) -> bool {
        self.redis.is_cluster()
    }

    /// One `PING` within the deadline. For readiness checks (which time it) and to dial the
    /// connection before the first send. Logs nothing.
    ///
    /// # Errors
    /// The [`RedisCallError`] that `check_and_reserve` would have failed open on.
    pub async fn ping(&self) -> Result<(), RedisCallError> {
        self.redis.ping().await
    }
}

impl RateLimiter for MailRateLimiter {
    async fn drop_bookings(
        &self,
        tenant: &str,
        mailbox: &MailboxAddress,
        ids: &[uuid::Uuid],
        now: DateTime<Utc>,
    ) {
        self.unbook_or_log(tenant, mailbox, ids, now).await;
    }

    async fn member_slots(
        &self,
        mailboxes: &[(String, MailboxAddress)],
    ) -> Vec<Option<MemberSlot>> {
        self.read_member_slots(mailboxes).await
    }

    /// See [`RateLimiter::check_and_reserve`]. Validates before any Redis call (no
    /// recipients; more recipients than the day allows; more external recipients than the
    /// tenant allows).
    ///
    /// On a deadline the script may still have run in Redis after we stopped waiting: that
    /// reservation stays counted although the caller got an uncounted one (over-counting by one
    /// message, the safe side); its lease expires by itself.
    async fn check_and_reserve(
        &self,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<Decision, RateLimitError> {
        never_fits(ask)?;
        let started = Instant::now();
        // An adaptive action in force: a suspension denies here, a shrink lowers the limits; a
        // Redis that cannot answer its read fails open here (one deadline, not two).
        let ask = &match self.adapted(ask, now, started).await {
            Ok(ask) => ask,
            Err(decided) => return Ok(decided),
        };
        let result = match &self.engine {
            Engine::FixedWindow(fixed) => {
                fixed
                    .check_and_reserve(&self.redis, &self.key_prefix, ask, now)
                    .await
            }
            Engine::Paced(paced) => self.paced_decision(paced, ask, now).await,
        };
        if let Some(metrics) = &self.metrics {
            let label = match &result {
                Ok(Decision::Allowed(_)) => "allowed",
                Ok(Decision::Denied { reason, .. }) => reason.as_str(),
                Err(_) => "fail_open",
            };
            metrics.rate_limit_decision(label, started.elapsed());
        }
        Ok(match result {
            Ok(decision) => decision,
            Err(error) => self.fail_open(ask, now, &error).await,
        })
    }

    /// See [`RateLimiter::release`]. An uncounted reservation touches nothing; `fixed-window`
    /// gives back only for [`RequestEnd::Unsent`] (it has no lease). Counters never go below 0:
    /// release each reservation once.
    async fn release(&self, reservation: &Reservation, end: RequestEnd) {
        let unsent = end == RequestEnd::Unsent;
        let result = match (&self.engine, &reservation.counted) {
            (_, Counted::No) => return,
            (Engine::FixedWindow(fixed), Counted::FixedWindow(minute, day)) => {
                if !unsent {
                    return;
                }
                fixed
                    .release(&self.redis, (minute, day), reservation.recipients)
                    .await
            }
            (
                Engine::Paced(paced),
                Counted::Paced {
                    keys,
                    message_id,
                    at_ms,
                    external,
                },
            ) => {
                // How long the request ran (a `Done` one only: an unsent request says nothing
                // of Graph's pace).
                let took = if unsent {
                    None
                } else {
                    self.live_leases()
                        .get(&(*message_id, *at_ms))
                        .map(|lease| lease.taken.elapsed())
                };
                let released = paced
                    .release(
                        &self.redis,
                        (keys, *message_id, *at_ms, *external),
                        reservation.recipients,
                        (unsent, took),
                    )
                    .await;
                // Forgotten only once Redis has it: a release still on its way when the process
                // stops is then also done by `hold_live` (ending a lease twice is harmless).
                self.live_leases().remove(&(*message_id, *at_ms));
                released
            }
            // A reservation of the other algorithm (the setting changed under a running send):
            // nothing of ours to give back.
            _ => return,
        };
        match result {
            Ok((first, second)) => tracing::debug!(
                event = log_events::MAIL_RATE_LIMIT_RELEASED,
                mailbox = %reservation.mailbox,
                recipients = reservation.recipients,
                unsent,
                counters.first = first,
                counters.second = second,
                "rate-limit reservation ended"
            ),
            Err(error) => self.log_failure("release", &reservation.mailbox, &error),
        }
    }

    /// A third of the lease (`paced`), so two renewals may fail before a running lease lapses.
    fn renew_every(&self) -> Option<Duration> {
        match &self.engine {
            Engine::Paced(paced) => Some(paced.lease() / 3),
            Engine::FixedWindow(_) => None,
        }
    }

    async fn renew(&self, reservation: &Reservation, now: DateTime<Utc>) {
        let Some((paced, keys, message_id)) = self.paced_lease(reservation) else {
            return;
        };
        match paced.renew(&self.redis, keys, message_id, now).await {
            Ok(held) => tracing::debug!(
                mailbox = %reservation.mailbox,
                renewed = held,
                "in-flight lease renewed"
            ),
            Err(error) => self.log_failure("renew", &reservation.mailbox, &error),
        }
    }

    fn hold_until(&self, reservation: &Reservation, until: DateTime<Utc>) {
        if let Counted::Paced {
            message_id, at_ms, ..
        } = &reservation.counted
            && let Some(lease) = self.live_leases().get_mut(&(*message_id, *at_ms))
        {
            lease.hold_until = Some(until);
        }
    }

    /// See [`RateLimiter::cut_off`]. A reservation not counted in Redis holds nothing.
    async fn cut_off(&self, reservation: &Reservation, until: DateTime<Utc>) {
        self.hold_lease(reservation, until).await;
        // Forgotten only once Redis has it, as in `release`.
        if let Counted::Paced {
            message_id, at_ms, ..
        } = &reservation.counted
        {
            self.live_leases().remove(&(*message_id, *at_ms));
        }
    }

    async fn campaign_suspended_until(
        &self,
        campaign: &str,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        self.campaign_suspension(campaign, now).await
    }

    async fn signal(
        &self,
        signal: crate::domain::adaptive::Signal,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) {
        let on = super::Signalled {
            tenant: ask.tenant,
            mailbox: ask.mailbox,
        };
        self.adaptive_signal(signal, on, now).await;
    }

    async fn cooldown(&self, ask: &Ask<'_>, until: DateTime<Utc>, now: DateTime<Utc>) {
        let Engine::Paced(paced) = &self.engine else {
            return;
        };
        self.local.cooldown(ask.mailbox, self.limiter_ms(until));
        let keys = PacedKeys::new(&self.key_prefix, ask.tenant, ask.mailbox);
        match paced.cooldown(&self.redis, &keys, until, now).await {
            Ok(in_force) => tracing::info!(
                event = log_events::MAIL_RATE_LIMIT_COOLDOWN,
                mailbox = %ask.mailbox,
                until = %until.to_rfc3339(),
                in_force_ms = in_force,
                "every message of the mailbox waits for the provider's Retry-After"
            ),
            Err(error) => self.log_failure("cooldown", ask.mailbox, &error),
        }
    }
}
