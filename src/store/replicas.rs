//! The replicas' heartbeat rows (`replicas`): each daemon beats its own, and counts the rows
//! beaten recently as the live replicas (`crate::daemon::heartbeat`).

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::StoreError;

/// A row not beaten for this long is deleted by the next beat of any replica.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(3600);

/// Beats `id`'s row (PostgreSQL's clock) and returns how many rows were beaten within `live`
/// (this one included); deletes the rows of replicas gone for an hour.
///
/// # Errors
/// Database errors.
pub async fn beat(pool: &PgPool, id: Uuid, live: Duration) -> Result<u32, StoreError> {
    sqlx::query(
        "INSERT INTO replicas (id) VALUES ($1) \
         ON CONFLICT (id) DO UPDATE SET beat_at = now()",
    )
    .bind(id)
    .execute(pool)
    .await?;
    sqlx::query("DELETE FROM replicas WHERE beat_at < now() - make_interval(secs => $1)")
        .bind(FORGOTTEN_AFTER.as_secs_f64())
        .execute(pool)
        .await?;
    let count: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM replicas WHERE beat_at > now() - make_interval(secs => $1)",
    )
    .bind(live.as_secs_f64())
    .fetch_one(pool)
    .await?;
    Ok(u32::try_from(count).unwrap_or(u32::MAX))
}

/// Deletes `id`'s row: it stopped (the others count one fewer at their next beat).
///
/// # Errors
/// Database errors.
pub async fn leave(pool: &PgPool, id: Uuid) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM replicas WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await?;
    Ok(())
}
