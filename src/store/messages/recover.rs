//! Lease recovery's statement: `SENDING` rows past their lease back to `SCHEDULED`.

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::interval;
use crate::{domain::sql_status, store::StoreError};

/// Rows `SENDING` for longer than `lease` (the sending replica died; the outcome is unknown)
/// back to `SCHEDULED`, due now, marked as possibly sent: `send_attempted_at` = now, the latest
/// a request of the lost attempt could have been written (its notes died with it). Their next
/// attempt sees that and checks Graph before it sends again (docs/delivery.md).
/// Returns their ids.
///
/// # Errors
/// Database errors.
pub async fn recover_stale_sending(
    pool: &PgPool,
    lease: Duration,
) -> Result<Vec<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(concat!(
        "UPDATE messages SET status = ",
        sql_status!(Scheduled),
        ", scheduled_on = now(), updated_at = now(), send_attempted_at = now(), \
         last_error = 'send lease expired: outcome unknown, rescheduled' \
         WHERE status = ",
        sql_status!(Sending),
        " AND sending_at < now() - $1 RETURNING id"
    ))
    .bind(interval(lease))
    .fetch_all(pool)
    .await?)
}
