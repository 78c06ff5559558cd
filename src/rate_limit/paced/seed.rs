//! What the limiter's Redis is told after the fact: budgets seeded from PostgreSQL's send
//! history (`seed.lua`, `seed_tenant.lua`) and the sends made while failing open
//! (`record_fail_open.lua`).

use chrono::{DateTime, Utc};
use redis::{Script, Value};

use super::{Paced, Seen, keys::PacedKeys, spacing_ms};
use crate::{
    domain::Priority,
    rate_limit::{
        RateLimits,
        connection::{RedisCallError, RedisConn, replies},
        epoch_ms,
    },
};

/// One booked row: a `SCHEDULED` message a booking deferred (wait reason `minute`, `day` or
/// `tenant`) to its slot `scheduled_on`. A seed restores its booking, so the backlog keeps its
/// order after the limiter's Redis came back empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookedRow {
    /// `messages.id`: the booking's id.
    pub message_id: uuid::Uuid,
    /// `messages.scheduled_on`: its slot.
    pub slot: DateTime<Utc>,
    /// Its recipients (To + Cc + Bcc).
    pub recipients: u32,
    /// Of them, those outside the accepted domains of the mailbox's Graph tenant.
    pub external: u32,
    /// `messages.wait_reason`: `minute`, `day` or `tenant`.
    pub reason: String,
    /// `messages.priority`.
    pub priority: Priority,
}

/// One send made while failing open, recorded into Redis when it answers again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FailOpenSend {
    /// When (ms, the limiter's clock as last seen).
    pub at_ms: i64,
    pub recipients: u32,
    /// Recipients counted against the tenant's budget.
    pub external: u32,
}

impl Paced {
    /// Seeds the mailbox from `history` (sent at, recipients) and restores its booked rows
    /// `bookings` (paced at `limits`, priority-aware as check_and_reserve.lua books them);
    /// returns whether this call seeded it (false: another replica was first).
    pub(crate) async fn seed(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        limits: &RateLimits,
        (history, bookings): (&[(DateTime<Utc>, u32)], &[BookedRow]),
        now: DateTime<Utc>,
    ) -> Result<bool, RedisCallError> {
        let per_minute = limits.per_minute.get();
        let reserved = u32::from(limits.reserved_percent);
        let paced_share = if reserved == 0 {
            per_minute
        } else {
            (per_minute * (100 - reserved) / 100).max(1)
        };
        let high_share = per_minute.saturating_sub(paced_share).max(1);
        let mut head = vec![
            self.now_arg(now),
            spacing_ms(paced_share).to_string(),
            high_share.to_string(),
            history.len().to_string(),
        ];
        for (at, count) in history {
            head.push(epoch_ms(*at).to_string());
            head.push(count.to_string());
        }
        for row in bookings {
            let high = row.priority == Priority::High && reserved > 0;
            head.extend([
                row.message_id.to_string(),
                epoch_ms(row.slot).to_string(),
                row.recipients.to_string(),
                row.external.to_string(),
                row.reason.clone(),
                if high { "h" } else { "p" }.to_owned(),
            ]);
        }
        seed_with(redis, (&self.seed, "paced/seed.lua"), keys, &head, &[]).await
    }

    /// Seeds the tenant's external-recipient budget from `history` (sent at, external
    /// recipients); returns whether this call seeded it (false: another replica was first).
    pub(crate) async fn seed_tenant(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        history: &[(DateTime<Utc>, u32)],
        now: DateTime<Utc>,
    ) -> Result<bool, RedisCallError> {
        let script = (&self.seed_tenant, "paced/seed_tenant.lua");
        seed_with(redis, script, keys, &[self.now_arg(now)], history).await
    }

    /// Adds what this process sent while failing open to the mailbox's windows; `None` when
    /// the mailbox has no state (Redis came back empty: the seed from the send history counts
    /// those sends), else what Redis saw after recording.
    pub(crate) async fn record_fail_open(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        per_minute: u32,
        sends: &[FailOpenSend],
        now: DateTime<Utc>,
    ) -> Result<Option<Seen>, RedisCallError> {
        let mut args = vec![self.now_arg(now), spacing_ms(per_minute).to_string()];
        for send in sends {
            args.push(send.at_ms.to_string());
            args.push(send.recipients.to_string());
            args.push(send.external.to_string());
        }
        let reply = redis
            .eval(&self.record_fail_open, &keys.all(), &args)
            .await?;
        if let Value::Array(items) = &reply
            && let [Value::Int(recorded), Value::Int(now_ms), Value::Int(total)] = items.as_slice()
        {
            return Ok((*recorded >= 0).then_some(Seen {
                now_ms: *now_ms,
                total: *total,
            }));
        }
        Err(RedisCallError::unexpected(
            "paced/record_fail_open.lua",
            &reply,
        ))
    }
}

/// Runs a seed script with ARGV `head`, then `history` as (ms, count) pairs; true when it
/// seeded.
async fn seed_with(
    redis: &RedisConn,
    (script, name): (&Script, &'static str),
    keys: &PacedKeys,
    head: &[String],
    history: &[(DateTime<Utc>, u32)],
) -> Result<bool, RedisCallError> {
    let mut args: Vec<String> = head.to_vec();
    for (at, count) in history {
        args.push(epoch_ms(*at).to_string());
        args.push(count.to_string());
    }
    let reply = redis.eval(script, &keys.all(), &args).await?;
    Ok(replies::int(&reply, name)? == 1)
}
