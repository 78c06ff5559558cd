//! The outbox for operators: `mail-worker events stats|dead|replay` ([`stats`], [`dead_list`],
//! [`replay`]) and its clean-up with the messages' retention ([`purge_batch`]).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, postgres::PgConnection};
use uuid::Uuid;

use super::super::StoreError;

/// One receiver's delivery state (`events stats`).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ReceiverStats {
    /// Its URL, password and query hidden.
    pub receiver: String,
    /// Events delivered.
    pub delivered: i64,
    /// Events given up (dead), a running total: a replay does not lower it.
    pub dead: i64,
    /// Dead events not replayed yet: what `events dead` lists for it.
    pub dead_to_replay: i64,
    /// Events after its cursor (not delivered yet).
    pub pending: i64,
    /// Age of the oldest of them, seconds.
    pub oldest_pending_seconds: f64,
    /// Failed deliveries in a row.
    pub failures: i32,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it is tried next.
    pub next_try_at: DateTime<Utc>,
    /// When a replica last claimed it.
    pub seen_at: DateTime<Utc>,
}

/// Every receiver's state, and the events kept by kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// By receiver.
    pub receivers: Vec<ReceiverStats>,
    /// Events kept, by kind.
    pub events: std::collections::BTreeMap<String, i64>,
}

/// `events stats`.
///
/// # Errors
/// Database errors.
pub async fn stats(pool: &PgPool) -> Result<Stats, StoreError> {
    let receivers = sqlx::query_as(
        "SELECT r.display AS receiver, r.delivered, r.dead, \
             (SELECT count(*) FROM event_dead d WHERE d.url_key = r.url_key) AS dead_to_replay, \
             (SELECT count(*) FROM events e WHERE (e.xid, e.seq) > (r.cursor_xid, r.cursor_seq)) AS pending, \
             coalesce((SELECT extract(epoch FROM now() - e.occurred_at)::float8 FROM events e \
                       WHERE (e.xid, e.seq) > (r.cursor_xid, r.cursor_seq) \
                       ORDER BY e.xid, e.seq LIMIT 1), 0) AS oldest_pending_seconds, \
             r.failures, r.last_error, r.next_try_at, r.seen_at \
         FROM event_receivers r ORDER BY r.display",
    )
    .fetch_all(pool)
    .await?;
    let events: Vec<(String, i64)> =
        sqlx::query_as("SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind")
            .fetch_all(pool)
            .await?;
    Ok(Stats {
        receivers,
        events: events.into_iter().collect(),
    })
}

/// One dead event at one receiver (`events dead`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct DeadEvent {
    /// The receiver, redacted.
    pub receiver: String,
    /// The event's id.
    pub id: Uuid,
    /// Its kind.
    pub kind: String,
    /// Its message.
    pub message_id: Uuid,
    /// When it happened.
    pub occurred_at: DateTime<Utc>,
    /// When it was given up.
    pub dead_at: DateTime<Utc>,
    /// Why.
    pub reason: String,
}

/// The events given up since `since` (by when they happened), oldest first, at most `limit`.
///
/// # Errors
/// Database errors.
pub async fn dead_list(
    pool: &PgPool,
    since: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<DeadEvent>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT r.display AS receiver, e.id, e.kind, e.message_id, e.occurred_at, d.dead_at, d.reason \
         FROM event_dead d JOIN events e ON (e.xid, e.seq) = (d.xid, d.seq) \
         JOIN event_receivers r ON r.url_key = d.url_key \
         WHERE e.occurred_at >= $1 ORDER BY e.xid, e.seq LIMIT $2",
    )
    .bind(since)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// What [`replay`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Replayed {
    /// Receivers whose cursor moved back.
    pub receivers: u64,
    /// Events (kept, since the time) each of them gets again.
    pub events: u64,
    /// Dead notes removed (those events are delivered again).
    pub dead_cleared: u64,
}

/// Moves every receiver's cursor back to the first event that happened at or after `since`
/// (never forward), so the events since are delivered again with their ids; their dead notes
/// go. One transaction. A receiver no replica claimed in the last day (taken out of
/// `EVENTS_WEBHOOK_URL`; the purge no longer keeps events for it either) is left alone.
///
/// # Errors
/// Database errors.
pub async fn replay(pool: &PgPool, since: DateTime<Utc>) -> Result<Replayed, StoreError> {
    let mut tx = pool.begin().await?;
    let first: Option<(i64, i64)> = sqlx::query_as(
        "SELECT xid, seq FROM events WHERE occurred_at >= $1 ORDER BY xid, seq LIMIT 1",
    )
    .bind(since)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((xid, seq)) = first else {
        return Ok(Replayed {
            receivers: 0,
            events: 0,
            dead_cleared: 0,
        });
    };
    let moved = sqlx::query(
        "UPDATE event_receivers SET cursor_xid = $1, cursor_seq = $2 - 1, failures = 0, next_try_at = now() \
         WHERE (cursor_xid, cursor_seq) >= ($1, $2) AND seen_at > now() - interval '1 day'",
    )
    .bind(xid)
    .bind(seq)
    .execute(&mut *tx)
    .await?;
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM events WHERE (xid, seq) >= ($1, $2)")
            .bind(xid)
            .bind(seq)
            .fetch_one(&mut *tx)
            .await?;
    let cleared = sqlx::query("DELETE FROM event_dead WHERE (xid, seq) >= ($1, $2)")
        .bind(xid)
        .bind(seq)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Replayed {
        receivers: moved.rows_affected(),
        events: events.unsigned_abs(),
        dead_cleared: cleared.rows_affected(),
    })
}

/// Deletes up to `limit` events that happened before `before` and that every receiver seen in
/// the last day has passed (delivered or dead), with their dead notes. Returns how many.
///
/// # Errors
/// Database errors.
pub(crate) async fn purge_batch(
    conn: &mut PgConnection,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(
        "WITH doomed AS ( \
             SELECT xid, seq FROM events e WHERE occurred_at < $1 \
               AND NOT EXISTS (SELECT 1 FROM event_receivers r \
                               WHERE r.seen_at > now() - interval '1 day' \
                                 AND (r.cursor_xid, r.cursor_seq) < (e.xid, e.seq)) \
             ORDER BY xid, seq LIMIT $2), \
         notes AS (DELETE FROM event_dead d USING doomed WHERE (d.xid, d.seq) = (doomed.xid, doomed.seq)), \
         gone AS (DELETE FROM events e USING doomed WHERE (e.xid, e.seq) = (doomed.xid, doomed.seq) RETURNING 1) \
         SELECT count(*) FROM gone",
    )
    .bind(before)
    .bind(limit)
    .fetch_one(conn)
    .await?;
    Ok(n.unsigned_abs())
}
