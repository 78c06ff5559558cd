//! The PostgreSQL advisory locks that let one process of many run a periodic job (the retention
//! round, the mailbox order's snapshot) while the others skip it.

use sqlx::postgres::PgConnection;

use super::StoreError;

/// How long a lock is held once taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// Until released or the session (connection) ends: `pg_try_advisory_lock`.
    Session,
    /// Until the transaction ends: `pg_try_advisory_xact_lock`.
    Transaction,
}

/// Tries the advisory lock `key` without waiting; whether it was taken.
///
/// # Errors
/// Database errors.
pub(super) async fn try_lock(
    conn: &mut PgConnection,
    key: i64,
    hold: Hold,
) -> Result<bool, StoreError> {
    let sql = match hold {
        Hold::Session => "SELECT pg_try_advisory_lock($1)",
        Hold::Transaction => "SELECT pg_try_advisory_xact_lock($1)",
    };
    Ok(sqlx::query_scalar(sql).bind(key).fetch_one(conn).await?)
}
