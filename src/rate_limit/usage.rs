//! A mailbox's live budget as the limiter counts it, read from the limiter's Redis without
//! changing anything (`mail-worker mailbox usage`, the budget gauges; only the mark of a
//! budget alert is written). Reads the keys of
//! [`super::paced::keys`] or [`super::fixed_window::keys`], whichever algorithm is configured.

use std::{fmt, time::Duration};

use chrono::{DateTime, TimeZone, Utc};
use serde::Serialize;

use super::{
    Algorithm, RateLimitConfig, RedisCallError, connection::RedisConn, fixed_window::keys as fixed,
    paced::keys::PacedKeys,
};
use crate::domain::MailboxAddress;

/// What the limiter holds for one mailbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimiterUsage {
    /// `paced` or `fixed-window`.
    pub algorithm: &'static str,
    /// `paced`: reservations in the last 60 s; `fixed-window`: in the current UTC minute.
    pub sent_last_minute: u64,
    /// `paced`: recipients in the rolling 24 h, booked slots included (a booking holds its
    /// recipients); `fixed-window`: in the current UTC day.
    pub recipients_last_day: u64,
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

/// A usage read may wait this long at least, however short `MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS`
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
        let conn = self.conn.as_ref().map_err(String::clone)?;
        read_usage(conn, self.config, tenant, mailbox, now)
            .await
            .map_err(|e| e.to_string())
    }
}

impl UsageReader<'_> {
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

/// Reads `mailbox`'s usage (Graph tenant `tenant`) at `now` over `conn`.
async fn read_usage(
    conn: &RedisConn,
    config: &RateLimitConfig,
    tenant: &str,
    mailbox: &MailboxAddress,
    now: DateTime<Utc>,
) -> Result<LimiterUsage, RedisCallError> {
    let now_ms = now.timestamp_millis();
    match config.algorithm {
        Algorithm::FixedWindow => {
            let minute = fixed::minute_key(&config.key_prefix, mailbox, now);
            let day = fixed::day_key(&config.key_prefix, mailbox, now);
            let (m, d): (Option<u64>, Option<u64>) =
                conn.query(redis::pipe().get(&minute).get(&day)).await?;
            Ok(LimiterUsage {
                algorithm: Algorithm::FixedWindow.as_str(),
                sent_last_minute: m.unwrap_or(0),
                recipients_last_day: d.unwrap_or(0),
                in_flight: 0,
                booked: 0,
                cooldown_until: None,
                next_free_slot: None,
                keys: vec![minute, day],
            })
        }
        Algorithm::Paced => {
            let keys = PacedKeys::new(&config.key_prefix, tenant, mailbox);
            let ((tat, cool, total), sent, in_flight, booked): (StateFields, u64, u64, u64) = conn
                .query(
                    redis::pipe()
                        .cmd("HMGET")
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
                        .arg(keys.booked()),
                )
                .await?;
            Ok(LimiterUsage {
                algorithm: Algorithm::Paced.as_str(),
                sent_last_minute: sent,
                recipients_last_day: total.unwrap_or(0),
                in_flight,
                booked,
                cooldown_until: cool.filter(|c| *c > now_ms).and_then(at_ms),
                next_free_slot: Some(tat.map_or(now_ms, |t| t.max(now_ms))).and_then(at_ms),
                keys: [keys.state(), keys.sent(), keys.in_flight(), keys.booked()]
                    .map(str::to_owned)
                    .to_vec(),
            })
        }
    }
}
