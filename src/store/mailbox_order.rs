//! The snapshot of the mailboxes page's busiest-first order (table `mailbox_order`, one row):
//! every sender's count of unfinished (`SCHEDULED` + `SENDING`) rows, taken by one process at
//! a time ([`LOCK_KEY`], a transaction advisory lock) every [`REFRESH_EVERY`] by the daemons,
//! or by a reader that finds it older than its bound. Counting every unfinished row costs
//! ~0.1–0.4 s with 5,000 mailboxes and 330,000 such rows; reading the snapshot costs one row.
//! Nothing on the send path writes it. docs/decisions/0017-mailbox-pages.md has the figures.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{
    StoreError,
    advisory_lock::{self, Hold},
};
use crate::domain::sql_status;

/// How often each daemon replica tries to take the snapshot; the one that gets the lock takes
/// it unless another took one in the last [`REFRESH_EVERY`] (the others skip).
pub const REFRESH_EVERY: Duration = Duration::from_secs(10);

/// The oldest snapshot a page uses: a page that finds it older (no daemon running: a `mailbox
/// usage` alone) takes a new one first, or counts live if another process is taking it.
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// The advisory lock (`pg_try_advisory_xact_lock`) taking the snapshot holds: one process
/// counts at a time. (`mailord\0` in ASCII.)
pub const LOCK_KEY: i64 = 0x6d61_696c_6f72_6400;

/// Every sender's unfinished rows, one count per (system mailbox, tenant) pair: an index-only
/// scan of `messages_unfinished_by_sender`. `$id` and `n` are its columns.
macro_rules! unfinished_by_sender {
    () => {
        concat!(
            "SELECT coalesce(system_mailbox_id, tenant_id) AS id, count(*) AS n FROM messages \
             WHERE status IN (",
            sql_status!(Scheduled),
            ", ",
            sql_status!(Sending),
            ") GROUP BY system_mailbox_id, tenant_id"
        )
    };
}
pub(super) use unfinished_by_sender;

/// When the snapshot was taken and how long ago by the server's clock (`None`: never).
///
/// # Errors
/// Database errors.
pub async fn taken(pool: &PgPool) -> Result<Option<(DateTime<Utc>, Duration)>, StoreError> {
    let row: Option<(DateTime<Utc>, f64)> = sqlx::query_as(
        "SELECT taken_at, extract(epoch FROM now() - taken_at)::float8 FROM mailbox_order",
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(at, age)| (at, Duration::from_secs_f64(age.max(0.0)))))
}

/// Takes the snapshot, unless another process is taking it or took one less than `unless_younger`
/// ago (then `None`); returns when it was taken (the count's transaction start).
///
/// # Errors
/// Database errors.
pub async fn refresh(
    pool: &PgPool,
    unless_younger: Duration,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let mut tx = pool.begin().await?;
    if !advisory_lock::try_lock(&mut tx, LOCK_KEY, Hold::Transaction).await? {
        return Ok(None);
    }
    // Read after the lock: a snapshot another process committed just before is seen.
    let fresh: Option<bool> = sqlx::query_scalar(
        "SELECT extract(epoch FROM now() - taken_at) < $1::float8 FROM mailbox_order",
    )
    .bind(unless_younger.as_secs_f64())
    .fetch_optional(&mut *tx)
    .await?;
    if fresh == Some(true) {
        return Ok(None);
    }
    // Without parallel workers: on a busy server they cost more than they save (60 ms alone,
    // 100–150 ms with workers on 2 cores).
    sqlx::query("SET LOCAL max_parallel_workers_per_gather = 0")
        .execute(&mut *tx)
        .await?;
    let at: DateTime<Utc> = sqlx::query_scalar(concat!(
        "INSERT INTO mailbox_order (only_row, taken_at, sender_ids, unfinished) \
         SELECT true, now(), coalesce(array_agg(id), '{}'), coalesce(array_agg(n), '{}') \
         FROM (",
        unfinished_by_sender!(),
        ") busy \
         ON CONFLICT (only_row) DO UPDATE SET taken_at = excluded.taken_at, \
             sender_ids = excluded.sender_ids, unfinished = excluded.unfinished \
         RETURNING taken_at"
    ))
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(at))
}
