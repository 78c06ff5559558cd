//! The `paced` limiter's budgets against the real Redis (and a private Redis, and a real
//! 3-master Redis Cluster), with a virtual clock: rolling 60 s and 24 h windows, booked slots
//! (every message denied at most once), in-flight leases, the shared cooldown, booking expiry,
//! outcome-unknown keeping the budget, the tenant budget, bounded fail-open and seeding from the
//! send history. The same drains on `fixed-window` show what the seed's algorithm does instead
//! (2 × L in 60 s, 2 × D across midnight, re-tries): proof that each check can fail.
//!
//! Here the helpers the subjects share; one file a subject.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap},
    num::NonZeroU32,
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, TimeZone, Utc};
use mail_worker::{
    config::RateLimitConfig,
    domain::{MailboxAddress, Priority},
    rate_limit::{
        Algorithm, Ask, Decision, DenyReason, MailRateLimiter, RateLimitError, RateLimiter,
        RateLimits, RedisUrls, RequestEnd, SendHistory, SentRecord, paced::keys::PacedKeys,
    },
    service::spread_ms,
};
use redis::AsyncCommands;
use url::Url;
use uuid::Uuid;

use crate::support::{
    TestKeys,
    private_redis::{PrivateRedis, free_port, owner, start_cluster},
    redis_conn, redis_url,
};

mod bookings;
mod in_flight;
mod leases;
mod outage;
mod private_redis;
mod tenant;
mod through_the_daemon;
mod windows;

#[allow(unused_imports)]
pub(crate) use self::{
    bookings::*, in_flight::*, leases::*, outage::*, private_redis::*, tenant::*,
    through_the_daemon::*, windows::*,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

pub(crate) const TENANT: &str = "contoso.example";

pub(crate) fn limits(per_minute: u32, recipients_per_day: u32) -> RateLimits {
    RateLimits {
        per_minute: NonZeroU32::new(per_minute).unwrap(),
        recipients_per_day: NonZeroU32::new(recipients_per_day).unwrap(),
        reserved_percent: 0,
    }
}

pub(crate) fn config(
    url: &Url,
    prefix: &str,
    algorithm: Algorithm,
    replicas: u32,
) -> RateLimitConfig {
    RateLimitConfig {
        algorithm,
        redis_url: url.clone().into(),
        defaults: limits(25, 9_000),
        redis_timeout: Duration::from_secs(2),
        key_prefix: prefix.to_owned(),
        max_in_flight: NonZeroU32::new(3).unwrap(),
        lease: Duration::from_secs(40),
        fail_open_replicas: NonZeroU32::new(replicas).unwrap(),
        unreachable_not_ready_after: Duration::from_secs(60),
        // Virtual time: the scripts decide by the `now` the test passes.
        caller_clock: true,
    }
}

pub(crate) fn limiter(prefix: &str, algorithm: Algorithm) -> Arc<MailRateLimiter> {
    Arc::new(MailRateLimiter::new(&config(&redis_url(), prefix, algorithm, 1)).unwrap())
}

/// One `paced` limiter on fresh keys (deleted when the first item is dropped), the `events`
/// mailbox, its keys and a connection to the tests' Redis.
async fn paced_events() -> (
    TestKeys,
    Arc<MailRateLimiter>,
    MailboxAddress,
    PacedKeys,
    redis::aio::MultiplexedConnection,
) {
    let test_keys = TestKeys::new();
    let prefix = test_keys.sub("rl");
    let events = mailbox("events");
    let keys = PacedKeys::new(&prefix, TENANT, &events);
    (
        test_keys,
        limiter(&prefix, Algorithm::Paced),
        events,
        keys,
        redis_conn().await,
    )
}

pub(crate) fn mailbox(local: &str) -> MailboxAddress {
    MailboxAddress::parse(&format!("{local}@contoso.example")).unwrap()
}

/// 2031-01-01 at the given UTC time (virtual: the limiter decides by the `now` it is given).
pub(crate) fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 1, 1, h, m, s).unwrap()
}

fn ms(d: chrono::Duration) -> i64 {
    d.num_milliseconds()
}

/// One message of a drain.
#[derive(Debug, Clone)]
pub(crate) struct Msg {
    pub(crate) id: Uuid,
    pub(crate) mailbox: MailboxAddress,
    pub(crate) recipients: u32,
    /// External recipients counted against a tenant budget (with `tenant_budget`).
    pub(crate) external: u32,
    /// Its priority (`normal` unless a test says otherwise).
    pub(crate) priority: Priority,
    /// Due this long after the drain's start (0 unless a test says otherwise).
    pub(crate) due_ms: i64,
}

pub(crate) fn messages(mailbox: &MailboxAddress, n: usize, recipients: u32) -> Vec<Msg> {
    (0..n)
        .map(|_| Msg {
            id: Uuid::new_v4(),
            mailbox: mailbox.clone(),
            recipients,
            external: 0,
            priority: Priority::Normal,
            due_ms: 0,
        })
        .collect()
}

/// What a drain saw.
#[derive(Debug, Default)]
pub(crate) struct Drained {
    /// Allowed sends: (virtual ms, mailbox, recipients, external).
    pub(crate) sends: Vec<(i64, MailboxAddress, u32, u32)>,
    /// Denials per message.
    pub(crate) denials: HashMap<Uuid, u32>,
    /// Limiter calls made.
    pub(crate) calls: u64,
    /// Deny reasons seen.
    pub(crate) reasons: HashMap<DenyReason, u64>,
    /// When each message was allowed (virtual ms).
    pub(crate) sent_at: HashMap<Uuid, i64>,
}

impl Drained {
    /// The most sends of `mailbox` in any rolling window of `window_ms` (`[t, t + window)`).
    pub(crate) fn max_in_window(
        &self,
        mailbox: &MailboxAddress,
        window_ms: i64,
        weight: fn(u32, u32) -> u64,
    ) -> u64 {
        let mut sends: Vec<(i64, u64)> = self
            .sends
            .iter()
            .filter(|s| &s.1 == mailbox)
            .map(|s| (s.0, weight(s.2, s.3)))
            .collect();
        sends.sort_unstable();
        let mut max = 0;
        let mut sum = 0;
        let mut start = 0;
        for end in 0..sends.len() {
            sum += sends[end].1;
            while sends[end].0 - sends[start].0 >= window_ms {
                sum -= sends[start].1;
                start += 1;
            }
            max = max.max(sum);
        }
        max
    }

    pub(crate) fn sent(&self, mailbox: &MailboxAddress) -> usize {
        self.sends.iter().filter(|s| &s.1 == mailbox).count()
    }

    /// The virtual ms of every send of `mailbox`.
    fn send_times<'a>(&'a self, mailbox: &'a MailboxAddress) -> impl Iterator<Item = i64> + 'a {
        self.sends
            .iter()
            .filter(move |s| &s.1 == mailbox)
            .map(|s| s.0)
    }

    fn first_send(&self, mailbox: &MailboxAddress) -> Option<i64> {
        self.send_times(mailbox).min()
    }

    fn last_send(&self, mailbox: &MailboxAddress) -> Option<i64> {
        self.send_times(mailbox).max()
    }

    /// Booked slots: no message was denied more than once.
    fn assert_denied_at_most_once(&self) {
        assert_eq!(self.denials.values().max(), Some(&1), "denied at most once");
    }
}

/// Per algorithm: `mailbox`'s sends, and the most `weight` of them in any `window_ms`.
fn sent_and_most_in_window(
    runs: &HashMap<Algorithm, Drained>,
    mailbox: &MailboxAddress,
    window_ms: i64,
    weight: fn(u32, u32) -> u64,
) -> HashMap<Algorithm, (usize, u64)> {
    runs.iter()
        .map(|(a, d)| {
            (
                *a,
                (d.sent(mailbox), d.max_in_window(mailbox, window_ms, weight)),
            )
        })
        .collect()
}

pub(crate) fn count(_: u32, _: u32) -> u64 {
    1
}

pub(crate) fn recipients(r: u32, _: u32) -> u64 {
    u64::from(r)
}

/// How one drain runs.
pub(crate) struct Drain {
    /// The "processes": calls are spread over them round-robin.
    limiters: Vec<Arc<MailRateLimiter>>,
    limits: RateLimits,
    /// Calls made at once at one virtual instant (the processes × their tasks).
    tasks: usize,
    /// `MAIL_DEFER_SPREAD_MAX` for denials that are not booked (as the service adds it).
    spread_max_ms: u64,
    /// Stop at this virtual time.
    until: DateTime<Utc>,
    /// The tenant budget (external recipients per day), if any.
    pub(crate) tenant_budget: Option<NonZeroU32>,
}

impl Drain {
    /// Every message is due at `start`; each call runs at its virtual due time; an allowed
    /// send is recorded and its lease released at once (`Done`); a denied one comes back after
    /// `retry_after` (+ the FNV spread when not booked), as the service schedules it.
    pub(crate) async fn run(&self, messages: Vec<Msg>, start: DateTime<Utc>) -> Drained {
        let mut due: BinaryHeap<Reverse<(i64, usize)>> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| Reverse((start.timestamp_millis() + m.due_ms, i)))
            .collect();
        let mut drained = Drained::default();
        let mut next_limiter = 0;
        while let Some(Reverse((t, _))) = due.peek().copied() {
            if t > self.until.timestamp_millis() {
                break;
            }
            let mut batch = Vec::new();
            while batch.len() < self.tasks
                && due.peek().is_some_and(|Reverse((when, _))| *when == t)
            {
                batch.push(due.pop().unwrap().0.1);
            }
            let now = Utc.timestamp_millis_opt(t).unwrap();
            let calls = batch.iter().map(|&i| {
                let limiter = Arc::clone(&self.limiters[next_limiter % self.limiters.len()]);
                next_limiter += 1;
                let m = messages[i].clone();
                let limits = self.limits;
                let budget = self.tenant_budget;
                async move {
                    let ask = Ask {
                        message_id: m.id,
                        mailbox: &m.mailbox,
                        tenant: TENANT,
                        recipients: m.recipients,
                        limits,
                        tenant_budget: budget.map(|per_day| (m.external, per_day)),
                        priority: m.priority,
                    };
                    let decision = limiter.check_and_reserve(&ask, now).await;
                    if let Ok(Decision::Allowed(reservation)) = &decision {
                        limiter.release(reservation, RequestEnd::Done).await;
                    }
                    (i, decision)
                }
            });
            for (i, decision) in futures::future::join_all(calls).await {
                drained.calls += 1;
                let m = &messages[i];
                match decision.unwrap() {
                    Decision::Allowed(_) => {
                        drained
                            .sends
                            .push((t, m.mailbox.clone(), m.recipients, m.external));
                        drained.sent_at.insert(m.id, t);
                    }
                    Decision::Denied {
                        reason,
                        retry_after,
                        booked,
                    } => {
                        *drained.denials.entry(m.id).or_default() += 1;
                        *drained.reasons.entry(reason).or_default() += 1;
                        let spread = if booked {
                            0
                        } else {
                            spread_ms(m.id, self.spread_max_ms)
                        };
                        let back = t + retry_after.as_millis() as i64 + spread as i64;
                        due.push(Reverse((back.max(t + 1), i)));
                    }
                }
            }
        }
        drained
    }
}

pub(crate) fn drain(
    limiters: Vec<Arc<MailRateLimiter>>,
    limits: RateLimits,
    until: DateTime<Utc>,
) -> Drain {
    Drain {
        limiters,
        limits,
        tasks: 32,
        spread_max_ms: 30_000,
        until,
        tenant_budget: None,
    }
}
