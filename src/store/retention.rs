//! Retention (`MAIL_RETENTION`, `mail-worker messages purge`): finished messages (`SENT`,
//! `BOUNCED`, and `ERROR`, which a cancelled one ends as) older than a cut-off are deleted with their
//! attachments, in batches of [`BATCH`] rows, one short statement each, by one process at a time
//! ([`LOCK_KEY`], a session advisory lock), never a row a claim could take (only finished rows
//! are locked, `SKIP LOCKED`), never one finished, created or sent in the last
//! [`MIN_RETENTION`] (the limiter's seeding reads that much send history, [`super::history`]).
//! docs/decisions/0014-retention.md says why batches, not partitions.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, postgres::PgConnection};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    StoreError,
    advisory_lock::{self, Hold},
    messages::interval,
};
use crate::domain::sql_finished;

/// The shortest retention: whatever is asked, a row finished, created or sent in the last 24 h
/// stays (the limiter rebuilds a mailbox's rolling 24 h budget from it).
pub const MIN_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Why a retention under [`MIN_RETENTION`] is refused (`MAIL_RETENTION`, `messages purge`).
pub const TOO_SHORT: &str = "must be at least 24h (the limiter rebuilds a mailbox's rolling 24 h budget from the last 24 h of sent messages)";

/// Rows one statement deletes at most (with their attachments): a short transaction, a few
/// milliseconds of locks on rows nobody else wants.
pub const BATCH: i64 = 1_000;

/// The pause between two delete statements of a round: autovacuum, replication and the claims
/// get the table between batches.
pub const PAUSE: Duration = Duration::from_millis(50);

/// The advisory lock (`pg_try_advisory_lock`) a retention round holds: one process deletes at a
/// time; another that does not get it skips the round. (`mailret\0` in ASCII.)
pub const LOCK_KEY: i64 = 0x6d61_696c_7265_7400;

/// The rows a round may delete: finished, and created, last written and sent before `$1`.
macro_rules! expired {
    () => {
        concat!(
            "status IN (",
            sql_finished!(),
            ") AND created_at < $1 AND updated_at < $1 AND (sent_at IS NULL OR sent_at < $1)"
        )
    };
}

/// One batch: the next [`BATCH`] expired rows after the key `($2, $3)` in the index
/// `messages_finished_by_age_v3` (created_at, id), locked without waiting, deleted with their
/// attachments (explicitly, to count them; the cascade then finds none); returns how many of
/// each went and the last key it saw (the next batch starts after it). `= ANY(ARRAY(…))`, not a
/// join: with a join on the CTE the planner hashed the whole attachments table each batch; an
/// array is an index scan on both tables (docs/decisions/0014-retention.md has the plan).
const DELETE_BATCH: &str = concat!(
    "WITH doomed AS ( \
         SELECT id, created_at FROM messages \
         WHERE ",
    expired!(),
    " AND (created_at, id) > ($2, $3) \
         ORDER BY created_at, id LIMIT $4 \
         FOR UPDATE SKIP LOCKED), \
     files AS ( \
         DELETE FROM message_attachments \
         WHERE message_id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING id), \
     gone AS ( \
         DELETE FROM messages WHERE id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING id), \
     last AS (SELECT created_at, id FROM doomed ORDER BY created_at DESC, id DESC LIMIT 1) \
     SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM files), \
            (SELECT created_at FROM last), (SELECT id FROM last)"
);

/// What a purge found: rows deleted (or, on a dry run, that would be).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Purged {
    /// Messages deleted (or that match, on a dry run).
    pub messages: u64,
    /// Their attachments.
    pub attachments: u64,
    /// Delete statements run (0 on a dry run).
    pub batches: u64,
    /// Outbox events deleted: older than the cut-off and passed by every receiver
    /// ([`super::events::admin::purge_batch`]; 0 on a dry run).
    pub events: u64,
}

/// The cut-off of a purge of rows older than `older_than`, clamped to [`MIN_RETENTION`], by
/// PostgreSQL's clock.
async fn cutoff(
    conn: &mut PgConnection,
    older_than: Duration,
) -> Result<DateTime<Utc>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT now() - greatest($1::interval, $2::interval)")
            .bind(interval(older_than))
            .bind(interval(MIN_RETENTION))
            .fetch_one(conn)
            .await?,
    )
}

/// How many finished messages (and attachments) older than `older_than` (at least
/// [`MIN_RETENTION`]) a purge would delete now.
///
/// # Errors
/// Database errors.
pub async fn count(pool: &PgPool, older_than: Duration) -> Result<Purged, StoreError> {
    let mut conn = pool.acquire().await?;
    let before = cutoff(&mut conn, older_than).await?;
    let (messages, attachments): (i64, i64) = sqlx::query_as(concat!(
        "SELECT count(*), coalesce(sum((SELECT count(*) FROM message_attachments a \
                                        WHERE a.message_id = messages.id)), 0)::int8 \
         FROM messages WHERE ",
        expired!()
    ))
    .bind(before)
    .fetch_one(&mut *conn)
    .await?;
    Ok(Purged {
        messages: messages.unsigned_abs(),
        attachments: attachments.unsigned_abs(),
        batches: 0,
        events: 0,
    })
}

/// Deletes the finished messages older than `older_than` (at least [`MIN_RETENTION`]) and
/// their attachments, [`BATCH`] rows per statement with `pause` between statements, holding
/// [`LOCK_KEY`], until none is left or `stop` is cancelled (checked between statements). Returns
/// `None` when another process holds the lock (this round is skipped).
///
/// # Errors
/// Database errors; what earlier batches deleted stays deleted.
pub async fn purge(
    pool: &PgPool,
    older_than: Duration,
    pause: Duration,
    stop: CancellationToken,
) -> Result<Option<Purged>, StoreError> {
    let mut conn = pool.acquire().await?;
    if !advisory_lock::try_lock(&mut conn, LOCK_KEY, Hold::Session).await? {
        return Ok(None);
    }
    let result = batches(&mut conn, older_than, pause, stop).await;
    let unlocked = sqlx::query_scalar::<_, bool>("SELECT pg_advisory_unlock($1)")
        .bind(LOCK_KEY)
        .fetch_one(&mut *conn)
        .await;
    if !matches!(unlocked, Ok(true)) {
        // The session ends with the connection, and the lock with it.
        drop(conn.detach());
    }
    result.map(Some)
}

/// The batches of [`purge`], on the connection holding the lock.
async fn batches(
    conn: &mut PgConnection,
    older_than: Duration,
    pause: Duration,
    stop: CancellationToken,
) -> Result<Purged, StoreError> {
    let before = cutoff(conn, older_than).await?;
    let mut purged = Purged {
        messages: 0,
        attachments: 0,
        batches: 0,
        events: 0,
    };
    // Before any row: 0001-01-01 (PostgreSQL cannot take chrono's minimum).
    let start = DateTime::<Utc>::from_timestamp(-62_135_596_800, 0).expect("in range");
    let mut after = (start, Uuid::nil());
    loop {
        let (deleted, files, last_at, last_id): (i64, i64, Option<DateTime<Utc>>, Option<Uuid>) =
            sqlx::query_as(DELETE_BATCH)
                .bind(before)
                .bind(after.0)
                .bind(after.1)
                .bind(BATCH)
                .fetch_one(&mut *conn)
                .await?;
        purged.batches += 1;
        purged.messages += deleted.unsigned_abs();
        purged.attachments += files.unsigned_abs();
        let (Some(at), Some(id)) = (last_at, last_id) else {
            break;
        };
        if deleted < BATCH {
            break;
        }
        after = (at, id);
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => break,
        }
    }
    // The outbox's events older than the cut-off, once every receiver passed them.
    while !stop.is_cancelled() {
        let n = super::events::admin::purge_batch(conn, before, BATCH).await?;
        purged.events += n;
        if n < BATCH.unsigned_abs() {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    Ok(purged)
}
