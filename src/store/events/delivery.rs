//! Delivering the outbox to one webhook receiver: its cursor row in `event_receivers`
//! ([`register`]), claimed by one replica at a time for a lease ([`claim`], `FOR UPDATE SKIP
//! LOCKED`, no transaction held across the POST), the next events after the cursor in commit
//! order ([`next_batch`]), and the cursor moved on after a delivery ([`delivered`]), a failure
//! ([`failed`]) or events given up as dead ([`dead`]). Every write is fenced by the lease.
//!
//! Commit order: an event is `(xid, seq)`, its transaction and its place in it. The cursor
//! passes only events whose transaction is older than every running one
//! (`pg_snapshot_xmin(pg_current_snapshot())`): no event can commit behind it later.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::super::StoreError;

/// An event as a receiver gets it (docs/events.md's fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The stable id to de-duplicate on.
    pub id: Uuid,
    /// `accepted`, `sent`, `deferred`, `failed`, `bounced`, `cancelled`, `delivered` or
    /// `filtered`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The message.
    pub message_id: Uuid,
    /// Its campaign, if any.
    pub campaign_id: Option<String>,
    /// The sending mailbox's address.
    pub sender: Option<String>,
    /// The tenant's or system mailbox's id.
    pub sender_id: Option<Uuid>,
    /// To + Cc + Bcc.
    pub recipients: i32,
    /// Why (`deferred`: the wait reason; `failed`, `cancelled`, `bounced`: the error).
    pub reason: Option<String>,
    /// `deferred`: when it is tried again.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// `delivered`, `filtered` and a trace's `bounced`: the one recipient it is about (each
    /// written once per recipient); absent for the message's own events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    /// When the change was committed (its transaction's time).
    pub occurred_at: DateTime<Utc>,
    /// Its place in the commit order (not sent).
    #[serde(skip)]
    pub xid: i64,
    /// See [`Self::xid`].
    #[serde(skip)]
    pub seq: i64,
}

/// A receiver's row: the cursor a claim read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct Claimed {
    pub cursor_xid: i64,
    pub cursor_seq: i64,
    pub failures: i32,
}

/// Adds the receiver `url_key` (shown as `display`) if it is new. A new receiver starts where
/// the least advanced existing one is (a changed URL goes on where the old one was), or at the
/// first event when there is none (so `accepted` events written before the first start are
/// delivered).
///
/// # Errors
/// Database errors.
pub(crate) async fn register(
    pool: &PgPool,
    url_key: &str,
    display: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO event_receivers (url_key, display, cursor_xid, cursor_seq) \
         SELECT $1, $2, coalesce(c.x, 0), coalesce(c.s, 0) FROM \
             (SELECT cursor_xid AS x, cursor_seq AS s FROM event_receivers \
              ORDER BY cursor_xid, cursor_seq LIMIT 1) c RIGHT JOIN (SELECT 1) one ON true \
         ON CONFLICT (url_key) DO UPDATE SET display = EXCLUDED.display",
    )
    .bind(url_key)
    .bind(display)
    .execute(pool)
    .await?;
    Ok(())
}

/// Takes (or keeps) the lease of receiver `url_key` for `lease` when it is due and nobody else
/// holds it; `None` when another replica delivers to it or its retry is not due.
///
/// # Errors
/// Database errors.
pub(crate) async fn claim(
    pool: &PgPool,
    url_key: &str,
    me: Uuid,
    lease: Duration,
) -> Result<Option<Claimed>, StoreError> {
    Ok(sqlx::query_as(
        "UPDATE event_receivers r SET leased_by = $2, leased_until = now() + make_interval(secs => $3), seen_at = now() \
         FROM (SELECT url_key FROM event_receivers WHERE url_key = $1 AND next_try_at <= now() \
               AND (leased_by IS NULL OR leased_by = $2 OR leased_until < now()) \
               FOR UPDATE SKIP LOCKED) due \
         WHERE r.url_key = due.url_key \
         RETURNING r.cursor_xid, r.cursor_seq, r.failures",
    )
    .bind(url_key)
    .bind(me)
    .bind(lease.as_secs_f64())
    .fetch_optional(pool)
    .await?)
}

/// Gives the lease of receiver `url_key` back (at shutdown), so another replica or this
/// one's successor delivers at once instead of after the lease.
///
/// # Errors
/// Database errors.
pub(crate) async fn release(pool: &PgPool, url_key: &str, me: Uuid) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE event_receivers SET leased_by = NULL, leased_until = NULL \
         WHERE url_key = $1 AND leased_by = $2",
    )
    .bind(url_key)
    .bind(me)
    .execute(pool)
    .await?;
    Ok(())
}

/// The next `limit` events after the cursor, in commit order, of transactions that ended.
///
/// # Errors
/// Database errors.
pub(crate) async fn next_batch(
    pool: &PgPool,
    after: (i64, i64),
    limit: u32,
) -> Result<Vec<Event>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT e.id, e.kind, e.message_id, e.campaign_id, coalesce(s.address, t.sender_address) AS sender, \
             e.sender_id, e.recipients, e.reason, e.next_attempt_at, e.recipient, e.occurred_at, e.xid, e.seq \
         FROM events e \
         LEFT JOIN system_mailboxes s ON s.id = e.sender_id \
         LEFT JOIN tenants t ON t.id = e.sender_id \
         WHERE (e.xid, e.seq) > ($1, $2) \
           AND e.xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint \
         ORDER BY e.xid, e.seq LIMIT $3",
    )
    .bind(after.0)
    .bind(after.1)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?)
}

/// The batch up to `to` was delivered: the cursor moves there, the failures are forgotten.
/// Returns false when the lease was lost (another replica took over).
///
/// # Errors
/// Database errors.
pub(crate) async fn delivered(
    pool: &PgPool,
    url_key: &str,
    me: Uuid,
    to: (i64, i64),
    n: u64,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE event_receivers SET cursor_xid = $3, cursor_seq = $4, failures = 0, \
             last_error = NULL, next_try_at = now(), delivered = delivered + $5 \
         WHERE url_key = $1 AND leased_by = $2",
    )
    .bind(url_key)
    .bind(me)
    .bind(to.0)
    .bind(to.1)
    .bind(i64::try_from(n).unwrap_or(i64::MAX))
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// A delivery failed: tried again after `wait`, with `error` kept for `events stats`.
///
/// # Errors
/// Database errors.
pub(crate) async fn failed(
    pool: &PgPool,
    url_key: &str,
    me: Uuid,
    wait: Duration,
    error: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE event_receivers SET failures = failures + 1, next_try_at = now() + make_interval(secs => $3), \
             last_error = $4 WHERE url_key = $1 AND leased_by = $2",
    )
    .bind(url_key)
    .bind(me)
    .bind(wait.as_secs_f64())
    .bind(error)
    .execute(pool)
    .await?;
    Ok(())
}

/// The events `dead` (a prefix of the batch, up to `to`) are given up at this receiver with
/// `reason`: noted in `event_dead`, the cursor moves past them. One transaction.
///
/// # Errors
/// Database errors.
pub(crate) async fn dead(
    pool: &PgPool,
    url_key: &str,
    me: Uuid,
    dead: &[(i64, i64)],
    reason: &str,
) -> Result<bool, StoreError> {
    let Some(&to) = dead.last() else {
        return Ok(true);
    };
    let mut tx = pool.begin().await?;
    let moved = sqlx::query(
        "UPDATE event_receivers SET cursor_xid = $3, cursor_seq = $4, dead = dead + $5, \
             last_error = $6 WHERE url_key = $1 AND leased_by = $2",
    )
    .bind(url_key)
    .bind(me)
    .bind(to.0)
    .bind(to.1)
    .bind(dead.len() as i64)
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    if moved.rows_affected() != 1 {
        return Ok(false);
    }
    let (xids, seqs): (Vec<i64>, Vec<i64>) = dead.iter().copied().unzip();
    sqlx::query(
        "INSERT INTO event_dead (url_key, xid, seq, reason) \
         SELECT $1, x, s, $4 FROM UNNEST($2::int8[], $3::int8[]) AS d(x, s) ON CONFLICT DO NOTHING",
    )
    .bind(url_key)
    .bind(xids)
    .bind(seqs)
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// How long the oldest event not yet delivered to one of `receivers` (their `url_key`s: this
/// replica's `EVENTS_WEBHOOK_URL`, so a receiver removed from it does not hold the gauge up) has
/// waited, seconds (0 when none).
///
/// # Errors
/// Database errors.
pub(crate) async fn oldest_undelivered_seconds(
    pool: &PgPool,
    receivers: &[String],
) -> Result<f64, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(max(extract(epoch FROM now() - e.occurred_at)), 0)::float8 \
         FROM event_receivers r CROSS JOIN LATERAL ( \
             SELECT occurred_at FROM events WHERE (xid, seq) > (r.cursor_xid, r.cursor_seq) \
             ORDER BY xid, seq LIMIT 1) e \
         WHERE r.url_key = ANY($1)",
    )
    .bind(receivers)
    .fetch_one(pool)
    .await?)
}
