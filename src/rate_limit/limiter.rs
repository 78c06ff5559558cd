//! [`MailRateLimiter`]: the Redis-backed [`RateLimiter`] — one Lua round trip per decision on
//! its own short-timeout connection, the algorithm chosen by configuration, budgets rebuilt
//! from the send history when Redis has forgotten them, and a bounded fail-open.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicI64, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    Algorithm, Ask, Counted, Decision, RateLimitConfig, RateLimitError, RateLimiter, RequestEnd,
    Reservation,
    connection::{RateLimitSetupError, RedisCallError, RedisConn},
    epoch_ms,
    fixed_window::FixedWindow,
    local::LocalPacer,
    log_throttle::LogThrottle,
    never_fits,
    paced::{Checked, Paced, keys::PacedKeys},
};
use crate::{domain::MailboxAddress, events};

/// At most one `mail.rateLimit.redisError` and one `mail.rateLimit.scriptError` line per this
/// interval per limiter (one limiter per process): 1 s.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// How far back the send history is read when a budget is rebuilt: the rolling 24 h.
const DAY: chrono::Duration = chrono::Duration::hours(24);

/// One message a mailbox sent: when, and to how many recipients (To + Cc + Bcc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentRecord {
    /// `messages.sent_at`.
    pub sent_at: DateTime<Utc>,
    /// Its recipients.
    pub recipients: u32,
}

/// What PostgreSQL knows was sent, so a limiter Redis that comes back empty (a restart without
/// persistence) rebuilds a mailbox's 24 h budget before its first decision instead of handing
/// out a fresh one. Implemented by the store.
#[async_trait::async_trait]
pub trait SendHistory: Send + Sync + 'static {
    /// The messages `mailbox` sent since `since`.
    ///
    /// # Errors
    /// A description of the database trouble; the limiter then fails open for that call.
    async fn sent_since(
        &self,
        mailbox: &MailboxAddress,
        since: DateTime<Utc>,
    ) -> Result<Vec<SentRecord>, String>;

    /// The messages every mailbox of Graph tenant `graph_tenant` sent since `since`, each with
    /// its recipients outside the tenant's accepted domains (`recipients` = external ones; the
    /// messages without any left out). The default knows none (test doubles).
    ///
    /// # Errors
    /// As [`Self::sent_since`].
    async fn external_sent_since(
        &self,
        graph_tenant: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<SentRecord>, String> {
        let _ = (graph_tenant, since);
        Ok(Vec::new())
    }
}

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
/// `MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS`, `fixed-window` (the design note's) without a brake.
pub struct MailRateLimiter {
    redis: RedisConn,
    engine: Engine,
    key_prefix: String,
    history: Option<Arc<dyn SendHistory>>,
    local: LocalPacer,
    /// Redis's clock minus this process's (ms), as the last `paced` reply showed: fail-open
    /// decisions and their records use Redis's clock too. 0 with the caller clock.
    clock_offset_ms: AtomicI64,
    /// This process's `paced` reservations whose lease is not released yet, by (message, time):
    /// what a shutdown releases when it cut sends off ([`Self::release_live`]).
    live: Mutex<HashMap<(Uuid, i64), Reservation>>,
    redis_error_log: LogThrottle,
    script_error_log: LogThrottle,
    metrics: Option<Arc<crate::ops::Metrics>>,
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
            redis: RedisConn::new(config)?,
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
        })
    }

    /// Counts decisions (`mail_worker_rate_limit_decisions_total`) and round trips
    /// (`mail_worker_rate_limit_seconds`) in `metrics`.
    #[must_use]
    pub(crate) fn with_metrics(mut self, metrics: Arc<crate::ops::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
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

    /// One `PING` within the deadline; returns its round-trip time. For readiness checks and
    /// to dial the connection before the first send. Logs nothing.
    ///
    /// # Errors
    /// The [`RedisCallError`] that `check_and_reserve` would have failed open on.
    pub async fn ping(&self) -> Result<Duration, RedisCallError> {
        let started = Instant::now();
        self.redis.ping().await?;
        Ok(started.elapsed())
    }

    /// A `paced` decision, seeding first what Redis has forgotten: the mailbox's budgets, then
    /// its tenant's (at most one of each, then the decision).
    async fn paced_decision(
        &self,
        paced: &Paced,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<Decision, RedisCallError> {
        let keys = PacedKeys::new(&self.key_prefix, ask.tenant, ask.mailbox);
        self.record_fail_open(paced, &keys, ask, now).await?;
        let mut seeded = (false, false);
        loop {
            match paced
                .check_and_reserve(&self.redis, &self.key_prefix, ask, now)
                .await?
            {
                Checked::Decided(decision, seen) => {
                    self.clock_offset_ms
                        .store(seen.now_ms - epoch_ms(now), Ordering::Relaxed);
                    let allowed = matches!(decision, Decision::Allowed(_));
                    self.local
                        .saw(ask.mailbox, seen.total, allowed.then_some(seen.now_ms));
                    if let Decision::Allowed(reservation) = &decision {
                        self.live_leases()
                            .insert((ask.message_id, seen.now_ms), reservation.clone());
                    }
                    return Ok(decision);
                }
                Checked::NeedsSeed if !seeded.0 => {
                    seeded.0 = true;
                    let records = self
                        .history(|h| h.sent_since(ask.mailbox, now - DAY))
                        .await?;
                    if paced
                        .seed(
                            &self.redis,
                            &keys,
                            ask.limits.per_minute.get(),
                            &records,
                            now,
                        )
                        .await?
                    {
                        tracing::info!(
                            event = events::MAIL_RATE_LIMIT_SEEDED,
                            mailbox = %ask.mailbox,
                            sent_in_24h = records.len(),
                            recipients_in_24h = records.iter().map(|r| u64::from(r.1)).sum::<u64>(),
                            "rate-limit budgets rebuilt from the send history"
                        );
                    }
                }
                Checked::NeedsTenantSeed if !seeded.1 => {
                    seeded.1 = true;
                    let records = self
                        .history(|h| h.external_sent_since(ask.tenant, now - DAY))
                        .await?;
                    if paced.seed_tenant(&self.redis, &keys, &records, now).await? {
                        tracing::info!(
                            event = events::MAIL_RATE_LIMIT_SEEDED,
                            mailbox = %ask.mailbox,
                            graph_tenant = ask.tenant,
                            sent_in_24h = records.len(),
                            external_recipients_in_24h =
                                records.iter().map(|r| u64::from(r.1)).sum::<u64>(),
                            "tenant external-recipient budget rebuilt from the send history"
                        );
                    }
                }
                Checked::NeedsSeed | Checked::NeedsTenantSeed => {
                    return Err(RedisCallError::UnexpectedReply {
                        script: "paced/check_and_reserve.lua",
                        reply: "asked for a seed right after seeding".into(),
                    });
                }
            }
        }
    }

    /// Adds what this process sent for the mailbox while failing open to Redis's windows, before
    /// its next decision. Kept for the next try when Redis fails again (a deadline after the
    /// script ran counts them twice: the safe side).
    async fn record_fail_open(
        &self,
        paced: &Paced,
        keys: &PacedKeys,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<(), RedisCallError> {
        let pending = self.local.take_pending(ask.mailbox);
        if pending.is_empty() {
            return Ok(());
        }
        let per_minute = ask.limits.per_minute.get();
        match paced
            .record_fail_open(&self.redis, keys, per_minute, &pending, now)
            .await
        {
            Ok(seen) => {
                self.local.recorded(ask.mailbox, &pending);
                if let Some(seen) = seen {
                    self.local.saw(ask.mailbox, seen.total, None);
                }
                tracing::info!(
                    event = events::MAIL_RATE_LIMIT_RECONCILED,
                    mailbox = %ask.mailbox,
                    fail_open_sends = pending.len(),
                    recipients = pending.iter().map(|s| u64::from(s.recipients)).sum::<u64>(),
                    seeded_instead = seen.is_none(),
                    "sends made while failing open were added to the shared budgets"
                );
                Ok(())
            }
            Err(error) => {
                self.local.put_back(ask.mailbox, pending);
                Err(error)
            }
        }
    }

    /// `now` on the limiter's clock (Redis's as last seen), ms.
    fn limiter_ms(&self, now: DateTime<Utc>) -> i64 {
        epoch_ms(now) + self.clock_offset_ms.load(Ordering::Relaxed)
    }

    fn live_leases(&self) -> std::sync::MutexGuard<'_, HashMap<(Uuid, i64), Reservation>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases (as [`RequestEnd::Done`]: the requests may have gone) every lease this process
    /// still holds — the sends a shutdown cut off — so other replicas need not wait for them
    /// to expire. Returns how many. Call it once the workers have stopped.
    pub async fn release_live(&self) -> usize {
        let left: Vec<Reservation> = self.live_leases().drain().map(|(_, r)| r).collect();
        for reservation in &left {
            self.release(reservation, RequestEnd::Done).await;
        }
        if !left.is_empty() {
            tracing::info!(
                event = events::MAIL_RATE_LIMIT_RECONCILED,
                leases_released = left.len(),
                "released the in-flight leases of sends cut off by the shutdown"
            );
        }
        left.len()
    }

    /// What `read` finds in the send history, as (sent at, recipients); none without one.
    async fn history<'h, F, Fut>(
        &'h self,
        read: F,
    ) -> Result<Vec<(DateTime<Utc>, u32)>, RedisCallError>
    where
        F: FnOnce(&'h dyn SendHistory) -> Fut,
        Fut: Future<Output = Result<Vec<SentRecord>, String>>,
    {
        let Some(history) = &self.history else {
            return Ok(Vec::new());
        };
        let records =
            read(history.as_ref())
                .await
                .map_err(|e| RedisCallError::UnexpectedReply {
                    script: "paced seeding (reading the send history)",
                    reply: e,
                })?;
        Ok(records.iter().map(|r| (r.sent_at, r.recipients)).collect())
    }

    /// Writes the bounded `redisError` (warn) or `scriptError` (error) line for a failed call.
    /// Fields: `operation`, `mailbox`, `error.kind` (see [`RedisCallError::kind`]),
    /// `error.message` (with its causes), `deadline_ms` (warn only) and `suppressed`: lines of
    /// the same event left unwritten since the previous one (at most one per second).
    fn log_failure(
        &self,
        operation: &'static str,
        mailbox: &MailboxAddress,
        error: &RedisCallError,
    ) {
        let message = error_chain(error);
        let kind = error.kind();
        let deadline_ms = u64::try_from(self.redis.deadline().as_millis()).unwrap_or(u64::MAX);
        if error.is_connectivity() {
            if let Some(suppressed) = self.redis_error_log.admit(Instant::now()) {
                tracing::warn!(
                    event = events::MAIL_RATE_LIMIT_REDIS_ERROR,
                    operation,
                    mailbox = %mailbox,
                    error.kind = %kind,
                    error.message = %message,
                    deadline_ms,
                    suppressed,
                    "rate limiter's Redis failed; pacing locally without a shared reservation (fail-open)"
                );
            }
        } else if let Some(suppressed) = self.script_error_log.admit(Instant::now()) {
            tracing::error!(
                event = events::MAIL_RATE_LIMIT_SCRIPT_ERROR,
                operation,
                mailbox = %mailbox,
                error.kind = %kind,
                error.message = %message,
                suppressed,
                "rate limiter's script failed (a bug to fix); pacing locally without a shared reservation (fail-open)"
            );
        }
    }
}

impl RateLimiter for MailRateLimiter {
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
        match result {
            Ok(decision) => Ok(decision),
            Err(error) => {
                self.log_failure("check_and_reserve", ask.mailbox, &error);
                Ok(match self.engine {
                    // The design note's fail-open, kept as the baseline: no brake at all.
                    Engine::FixedWindow(_) => Decision::Allowed(Reservation::uncounted(
                        ask.mailbox.clone(),
                        ask.recipients,
                    )),
                    Engine::Paced(_) => self.local.decide(ask, self.limiter_ms(now)),
                })
            }
        }
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
                self.live_leases().remove(&(*message_id, *at_ms));
                paced
                    .release(
                        &self.redis,
                        (keys, *message_id, *at_ms, *external),
                        reservation.recipients,
                        unsent,
                    )
                    .await
            }
            // A reservation of the other algorithm (the setting changed under a running send):
            // nothing of ours to give back.
            _ => return,
        };
        match result {
            Ok((first, second)) => tracing::debug!(
                event = events::MAIL_RATE_LIMIT_RELEASED,
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
        let (
            Engine::Paced(paced),
            Counted::Paced {
                keys, message_id, ..
            },
        ) = (&self.engine, &reservation.counted)
        else {
            return;
        };
        match paced.renew(&self.redis, keys, *message_id, now).await {
            Ok(held) => tracing::debug!(
                mailbox = %reservation.mailbox,
                renewed = held,
                "in-flight lease renewed"
            ),
            Err(error) => self.log_failure("renew", &reservation.mailbox, &error),
        }
    }

    async fn cooldown(&self, ask: &Ask<'_>, until: DateTime<Utc>, now: DateTime<Utc>) {
        let Engine::Paced(paced) = &self.engine else {
            return;
        };
        self.local.cooldown(ask.mailbox, self.limiter_ms(until));
        let keys = PacedKeys::new(&self.key_prefix, ask.tenant, ask.mailbox);
        match paced.cooldown(&self.redis, &keys, until, now).await {
            Ok(in_force) => tracing::info!(
                event = events::MAIL_RATE_LIMIT_COOLDOWN,
                mailbox = %ask.mailbox,
                until = %until.to_rfc3339(),
                in_force_ms = in_force,
                "every message of the mailbox waits for the provider's Retry-After"
            ),
            Err(error) => self.log_failure("cooldown", ask.mailbox, &error),
        }
    }
}

/// The error's message followed by its causes, `": "`-separated, without repeats.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
