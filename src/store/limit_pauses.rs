//! `limit_pauses`: the pauses a non-delivery report started (docs/decisions/0032-quota-ndrs-pause.md),
//! kept so that a limiter Redis that comes back empty re-applies them when it re-seeds
//! ([`crate::rate_limit::SendHistory::pauses`], implemented in `history.rs`), and read by the
//! `mail_worker_limit_paused` gauge.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::StoreError;
use crate::rate_limit::{LimitPause, PauseScope};

/// How long an ended pause is kept before [`record`] deletes it: 7 days (for `limit_pauses`
/// read by hand after the fact).
const KEPT_AFTER_END: chrono::Duration = chrono::Duration::days(7);

/// One pause to keep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewPause<'a> {
    pub scope: PauseScope,
    /// The mailbox address or the Graph tenant, lower case.
    pub key: &'a str,
    pub code: &'a str,
    pub pause: LimitPause,
    /// The NDR's text, scrubbed.
    pub reason: &'a str,
}

/// Keeps `new`: it replaces the row of its budget unless that one ends later. Deletes the
/// pauses that ended more than [`KEPT_AFTER_END`] before `new`'s start.
///
/// # Errors
/// Database errors.
pub(crate) async fn record(pool: &PgPool, new: &NewPause<'_>) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO limit_pauses (scope, key, code, whole_day, paused_at, paused_until, reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (scope, key) DO UPDATE SET code = EXCLUDED.code, \
             whole_day = EXCLUDED.whole_day, paused_at = EXCLUDED.paused_at, \
             paused_until = EXCLUDED.paused_until, reason = EXCLUDED.reason \
         WHERE limit_pauses.paused_until <= EXCLUDED.paused_until",
    )
    .bind(new.scope.as_str())
    .bind(new.key.to_lowercase())
    .bind(new.code)
    .bind(new.pause.whole_day)
    .bind(new.pause.at)
    .bind(new.pause.until)
    .bind(new.reason)
    .execute(pool)
    .await?;
    sqlx::query("DELETE FROM limit_pauses WHERE paused_until < $1")
        .bind(new.pause.at - KEPT_AFTER_END)
        .execute(pool)
        .await?;
    Ok(())
}

/// The pauses of `key` (by `scope`) in force at `now`.
///
/// # Errors
/// Database errors.
pub(crate) async fn of(
    pool: &PgPool,
    scope: PauseScope,
    key: &str,
    now: DateTime<Utc>,
) -> Result<Vec<LimitPause>, StoreError> {
    let rows: Vec<(DateTime<Utc>, DateTime<Utc>, bool)> = sqlx::query_as(
        "SELECT paused_at, paused_until, whole_day FROM limit_pauses \
         WHERE scope = $1 AND key = $2 AND paused_until > $3",
    )
    .bind(scope.as_str())
    .bind(key.to_lowercase())
    .bind(now)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(at, until, whole_day)| LimitPause {
            at,
            until,
            whole_day,
        })
        .collect())
}

/// Every pause in force by PostgreSQL's clock: (scope, key, code).
///
/// # Errors
/// Database errors.
pub(crate) async fn in_force(pool: &PgPool) -> Result<Vec<(String, String, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT scope, key, code FROM limit_pauses WHERE paused_until > now() ORDER BY scope, key",
    )
    .fetch_all(pool)
    .await?)
}
