//! Taking a read's turn in a reads table (`bounce_reads`, `trace_reads`): one statement that
//! gives a key's read to one replica until its lease ends, and only when nobody holds it and its
//! next read is due. So two replicas never read one key at once (a crashed reader's hold ends
//! with its lease), and each key is read about once per interval however many replicas run.

use std::time::Duration;

use sqlx::PgPool;

use super::{StoreError, messages::interval};

/// Runs `upsert`, a reads table's take: `$1` the key, `$2` the reader, `$3` the lease, returning
/// the `reader` when the row was written. `true` when `reader` reads `key` now.
///
/// # Errors
/// Database errors.
pub(super) async fn take(
    pool: &PgPool,
    upsert: &'static str,
    key: &str,
    reader: &str,
    lease: Duration,
) -> Result<bool, StoreError> {
    let taken: Option<String> = sqlx::query_scalar(upsert)
        .bind(key)
        .bind(reader)
        .bind(interval(lease))
        .fetch_optional(pool)
        .await?;
    Ok(taken.is_some())
}
