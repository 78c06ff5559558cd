//! A mailbox's live budget as the limiter counts it, read from the limiter's Redis without
//! changing anything (`mail-worker mailbox usage`, the budget gauges; only the mark of a
//! budget alert is written). Reads the keys of
//! [`super::paced::keys`] or [`super::fixed_window::keys`], whichever algorithm is configured.

use std::{collections::BTreeMap, fmt, time::Duration};

use chrono::{DateTime, TimeZone, Utc};
use redis::{ParsingError, Pipeline, Value, from_redis_value_ref};
use serde::Serialize;

use super::{
    Algorithm, RateLimitConfig, connection::RedisConn, fixed_window::keys as fixed,
    paced::keys::PacedKeys,
};
use crate::domain::MailboxAddress;

/// `lua/paced/booked_recipients.lua`: the recipients a mailbox's bookings hold (read only).
const BOOKED_RECIPIENTS_LUA: &str = include_str!("../../lua/paced/booked_recipients.lua");

/// What the limiter holds for one mailbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimiterUsage {
    /// `paced` or `fixed-window`.
    pub algorithm: &'static str,
    /// `paced`: reservations in the last 60 s; `fixed-window`: in the current UTC minute.
    pub sent_last_minute: u64,
    /// `paced`: recipients sent (or being sent) in the rolling 24 h — what the day budget has
    /// used; `fixed-window`: in the current UTC day.
    pub recipients_last_day: u64,
    /// `paced`: recipients held by booked slots (messages waiting for them, not sent: the
    /// limiter counts them in its window with the sent ones, so the day's room left is
    /// D − `recipients_last_day` − this), else 0. Apart from the used ones: a backlog booked
    /// into the next day is not a budget used today (issue 46, point 7).
    pub recipients_booked: u64,
    /// Requests in flight (unexpired leases; `paced` only, else 0).
    pub in_flight: u64,
    /// Messages holding a booked slot (`paced` only, else 0).
    pub booked: u64,
    /// Until when a provider's `Retry-After` holds the mailbox, if that is still ahead.
    pub cooldown_until: Option<DateTime<Utc>>,
    /// The next free slot of the pacing (`paced` only; now or later).
    pub next_free_slot: Option<DateTime<Utc>>,
    /// The keys read.
    pub keys: Vec<String>,
}

/// `tat`, `cool` and `total` of the `paced` state hash.
type StateFields = (Option<i64>, Option<i64>, Option<u64>);

fn at_ms(ms: i64) -> Option<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms).single()
}

/// A usage read may wait this long at least, however short `MAIL_RATE_LIMIT_REDIS_TIMEOUT`
/// is (an operator is waiting, not a send): 2 s.
const READ_DEADLINE: Duration = Duration::from_secs(2);

/// Reads usage from the limiter's Redis (`config.redis_url`) through the limiter's own kind of
/// connection ([`RedisConn`]: it follows a cluster's redirections), dialled at the first read
/// and kept for every later one (a page of many mailboxes dials once).
pub struct UsageReader<'a> {
    config: &'a RateLimitConfig,
    conn: Result<RedisConn, String>,
}

impl fmt::Debug for UsageReader<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UsageReader").finish_non_exhaustive()
    }
}

impl<'a> UsageReader<'a> {
    /// A reader of `config`'s Redis; nothing is dialled yet.
    pub fn new(config: &'a RateLimitConfig) -> Self {
        let conn = RedisConn::new(&config.redis_url, config.redis_timeout.max(READ_DEADLINE))
            .map_err(|e| e.to_string());
        Self { config, conn }
    }

    /// `mailbox`'s usage (Graph tenant `tenant`) at `now`.
    ///
    /// # Errors
    /// The Redis error as text (naming nothing secret).
    pub(crate) async fn read(
        &mut self,
        tenant: &str,
        mailbox: &MailboxAddress,
        now: DateTime<Utc>,
    ) -> Result<LimiterUsage, String> {
        self.read_many(&[(tenant.to_owned(), mailbox.clone())], now)
            .await
            .pop()
            .unwrap_or_else(|| Err("not read".to_owned()))
    }

    /// The usage of each of `mailboxes` (Graph tenant in lower case, mailbox) at `now`, in
    /// their order, in one round trip (one pipeline; on a Redis Cluster one per slot, sent at
    /// once) — a page of the admin UI costs one wait for Redis, not one per mailbox.
    pub(crate) async fn read_many(
        &mut self,
        mailboxes: &[(String, MailboxAddress)],
        now: DateTime<Utc>,
    ) -> Vec<Result<LimiterUsage, String>> {
        match self.conn.as_ref() {
            Ok(conn) => read_usages(conn, self.config, mailboxes, now).await,
            Err(e) => vec![Err(e.clone()); mailboxes.len()],
        }
    }
}

impl UsageReader<'_> {
    /// The adaptive actions in force on `mailbox` and on its Graph tenant `tenant` (in that
    /// order; docs/adaptive-rules.md), one `MGET`.
    ///
    /// # Errors
    /// The Redis error as text.
    pub(crate) async fn adaptive(
        &mut self,
        tenant: &str,
        mailbox: &MailboxAddress,
    ) -> Result<[Option<crate::domain::adaptive::ActionInForce>; 2], String> {
        use super::adaptive::{decode, mailbox_key, tenant_key};
        let conn = self.conn.as_ref().map_err(String::clone)?;
        let (raw,): (Vec<Option<String>>,) = conn
            .query(
                redis::pipe()
                    .cmd("MGET")
                    .arg(mailbox_key(&self.config.key_prefix, tenant, mailbox))
                    .arg(tenant_key(&self.config.key_prefix, tenant)),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(std::array::from_fn(|i| {
            decode(raw.get(i).and_then(Option::as_deref))
        }))
    }

    /// The external recipients the Graph tenant `tenant`'s budget counts in its rolling 24 h
    /// (`paced`; `fixed-window` keeps no tenant budget: 0).
    ///
    /// # Errors
    /// The Redis error as text.
    pub(crate) async fn tenant_external(&mut self, tenant: &str) -> Result<u64, String> {
        if self.config.algorithm != Algorithm::Paced {
            return Ok(0);
        }
        let conn = self.conn.as_ref().map_err(String::clone)?;
        let key = PacedKeys::tenant_state(&self.config.key_prefix, tenant);
        let (total,): (Option<u64>,) = conn
            .query(redis::pipe().cmd("HGET").arg(key).arg("total"))
            .await
            .map_err(|e| e.to_string())?;
        Ok(total.unwrap_or(0))
    }

    /// Whether this is the first `mail.budget.nearlyUsed` of `mailbox` (Graph tenant `tenant`)
    /// in 24 h: sets `<prefix>:{<tenant>}:<mailbox>:alerted` for 24 h unless it is set (every
    /// replica asks; one is told yes). One of the two writes of this module.
    ///
    /// # Errors
    /// The Redis error as text.
    pub(crate) async fn first_alert(
        &mut self,
        tenant: &str,
        mailbox: &MailboxAddress,
    ) -> Result<bool, String> {
        let key = PacedKeys::new(&self.config.key_prefix, tenant, mailbox)
            .state()
            .to_owned();
        self.mark_alerted(key).await
    }

    /// Whether this is the first `mail.budget.nearlyUsed` of Graph tenant `tenant`'s external
    /// budget in 24 h: `<prefix>:{<tenant>}:tenant:alerted`, as [`Self::first_alert`].
    ///
    /// # Errors
    /// The Redis error as text.
    pub(crate) async fn first_tenant_alert(&mut self, tenant: &str) -> Result<bool, String> {
        self.mark_alerted(PacedKeys::tenant_state(&self.config.key_prefix, tenant))
            .await
    }

    /// `SET <state>:alerted 1 NX PX 24h`: whether it was not set.
    async fn mark_alerted(&mut self, state: String) -> Result<bool, String> {
        let conn = self.conn.as_ref().map_err(String::clone)?;
        let (set,): (Option<String>,) = conn
            .query(
                redis::pipe()
                    .cmd("SET")
                    .arg(format!("{state}:alerted"))
                    .arg(1)
                    .arg("NX")
                    .arg("PX")
                    .arg(86_400_000),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(set.is_some())
    }
}

/// The commands that read one mailbox's usage, appended to `pipe`; [`parse_usage`] reads
/// their answers (as many as [`commands_per_mailbox`]).
fn usage_commands(
    pipe: &mut Pipeline,
    config: &RateLimitConfig,
    tenant: &str,
    mailbox: &MailboxAddress,
    now: DateTime<Utc>,
) -> Vec<String> {
    let now_ms = now.timestamp_millis();
    match config.algorithm {
        Algorithm::FixedWindow => {
            let minute = fixed::minute_key(&config.key_prefix, mailbox, now);
            let day = fixed::day_key(&config.key_prefix, mailbox, now);
            pipe.get(&minute).get(&day);
            vec![minute, day]
        }
        Algorithm::Paced => {
            let keys = PacedKeys::new(&config.key_prefix, tenant, mailbox);
            pipe.cmd("HMGET")
                .arg(keys.state())
                .arg("tat")
                .arg("cool")
                .arg("total")
                .cmd("ZCOUNT")
                .arg(keys.sent())
                .arg(format!("({}", now_ms - 60_000))
                .arg("+inf")
                .cmd("ZCOUNT")
                .arg(keys.in_flight())
                .arg(format!("({now_ms}"))
                .arg("+inf")
                .cmd("ZCARD")
                .arg(keys.booked())
                .cmd("EVAL")
                .arg(BOOKED_RECIPIENTS_LUA)
                .arg(2)
                .arg(keys.state())
                .arg(keys.booked());
            [keys.state(), keys.sent(), keys.in_flight(), keys.booked()]
                .map(str::to_owned)
                .to_vec()
        }
    }
}

/// How many answers [`usage_commands`] adds per mailbox.
fn commands_per_mailbox(algorithm: Algorithm) -> usize {
    match algorithm {
        Algorithm::FixedWindow => 2,
        Algorithm::Paced => 5,
    }
}

/// One mailbox's usage from the answers of its [`usage_commands`].
fn parse_usage(
    algorithm: Algorithm,
    answers: &[Value],
    keys: Vec<String>,
    now: DateTime<Utc>,
) -> Result<LimiterUsage, ParsingError> {
    let now_ms = now.timestamp_millis();
    let count = |i: usize| from_redis_value_ref::<Option<u64>>(&answers[i]);
    Ok(match algorithm {
        Algorithm::FixedWindow => LimiterUsage {
            algorithm: Algorithm::FixedWindow.as_str(),
            sent_last_minute: count(0)?.unwrap_or(0),
            recipients_last_day: count(1)?.unwrap_or(0),
            recipients_booked: 0,
            in_flight: 0,
            booked: 0,
            cooldown_until: None,
            next_free_slot: None,
            keys,
        },
        Algorithm::Paced => {
            let (tat, cool, total): StateFields = from_redis_value_ref(&answers[0])?;
            let booked_recipients = count(4)?.unwrap_or(0);
            LimiterUsage {
                algorithm: Algorithm::Paced.as_str(),
                sent_last_minute: count(1)?.unwrap_or(0),
                recipients_last_day: total.unwrap_or(0).saturating_sub(booked_recipients),
                recipients_booked: booked_recipients,
                in_flight: count(2)?.unwrap_or(0),
                booked: count(3)?.unwrap_or(0),
                cooldown_until: cool.filter(|c| *c > now_ms).and_then(at_ms),
                next_free_slot: Some(tat.map_or(now_ms, |t| t.max(now_ms))).and_then(at_ms),
                keys,
            }
        }
    })
}

/// The hash tag of `key` (`{…}`), or the whole key: keys with the same one share a cluster
/// slot, so one pipeline may read them.
fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key)
}

/// The usage of each of `mailboxes` (Graph tenant, mailbox) at `now` over `conn`, in their
/// order: one pipeline on a standalone Redis; on a cluster one per hash tag (a pipeline's keys
/// must share a slot), all sent at once.
async fn read_usages(
    conn: &RedisConn,
    config: &RateLimitConfig,
    mailboxes: &[(String, MailboxAddress)],
    now: DateTime<Utc>,
) -> Vec<Result<LimiterUsage, String>> {
    let keys: Vec<Vec<String>> = mailboxes
        .iter()
        .map(|(tenant, mailbox)| usage_commands(&mut redis::pipe(), config, tenant, mailbox, now))
        .collect();
    let groups = |cluster: bool| -> Vec<Vec<usize>> {
        if !cluster {
            return vec![(0..mailboxes.len()).collect()];
        }
        let mut by_tag: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            by_tag.entry(hash_tag(&k[0])).or_default().push(i);
        }
        by_tag.into_values().collect()
    };
    let read_group = |group: Vec<usize>| async move {
        let mut pipe = redis::pipe();
        for &i in &group {
            let (tenant, mailbox) = &mailboxes[i];
            usage_commands(&mut pipe, config, tenant, mailbox, now);
        }
        (group, conn.query::<Vec<Value>>(&pipe).await)
    };
    let mut answers =
        futures::future::join_all(groups(conn.is_cluster()).into_iter().map(read_group)).await;
    // A single seed that turned out to be a cluster node: the one pipeline crossed slots.
    if answers.len() == 1 && answers[0].1.is_err() && conn.is_cluster() && mailboxes.len() > 1 {
        answers = futures::future::join_all(groups(true).into_iter().map(read_group)).await;
    }
    let per = commands_per_mailbox(config.algorithm);
    let mut out: Vec<Result<LimiterUsage, String>> =
        vec![Err("not read".to_owned()); mailboxes.len()];
    let mut keys: Vec<Option<Vec<String>>> = keys.into_iter().map(Some).collect();
    for (group, answer) in answers {
        match answer {
            Ok(values) => {
                for (n, &i) in group.iter().enumerate() {
                    let own = values.get(n * per..(n + 1) * per).unwrap_or_default();
                    out[i] = if own.len() < per {
                        Err(format!(
                            "{} answers for {} commands",
                            values.len(),
                            group.len() * per
                        ))
                    } else {
                        parse_usage(
                            config.algorithm,
                            own,
                            keys[i].take().unwrap_or_default(),
                            now,
                        )
                        .map_err(|e| e.to_string())
                    };
                }
            }
            Err(e) => {
                for &i in &group {
                    out[i] = Err(e.to_string());
                }
            }
        }
    }
    out
}
