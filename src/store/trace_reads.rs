//! `trace_reads`: which replica reads a Graph tenant's message trace, when next, and why it is
//! paused (a `401`/`403` names its fix). As [`super::bounce_reads`]: [`take`] is one statement,
//! so one replica reads a tenant at a time and each tenant about once per interval.

use std::time::Duration;

use sqlx::PgPool;

use super::{StoreError, messages::interval, read_turns};

/// [`take`]'s statement (`$1` the tenant, `$2` the reader, `$3` the lease).
const TAKE: &str = "INSERT INTO trace_reads (tenant, next_read_at, reader) \
     VALUES ($1, now() + $3, $2) \
     ON CONFLICT (tenant) DO UPDATE SET next_read_at = EXCLUDED.next_read_at, \
         reader = EXCLUDED.reader \
     WHERE trace_reads.next_read_at <= now() \
     RETURNING reader";

/// Takes `tenant`'s read for `reader` for `lease` if it is due; `true` when this replica reads
/// it now.
///
/// # Errors
/// Database errors.
pub(crate) async fn take(
    pool: &PgPool,
    tenant: &str,
    reader: &str,
    lease: Duration,
) -> Result<bool, StoreError> {
    read_turns::take(pool, TAKE, tenant, reader, lease).await
}

/// `reader` is done with `tenant`: next read `every` from now, paused for `reason` (or not).
///
/// # Errors
/// Database errors.
pub(crate) async fn done(
    pool: &PgPool,
    tenant: &str,
    reader: &str,
    every: Duration,
    paused: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE trace_reads SET next_read_at = now() + $3, paused_reason = $4 \
         WHERE tenant = $1 AND reader = $2",
    )
    .bind(tenant)
    .bind(reader)
    .bind(interval(every))
    .bind(paused)
    .execute(pool)
    .await?;
    Ok(())
}

/// Why `tenant`'s trace is paused, if it is.
///
/// # Errors
/// Database errors.
pub async fn paused(pool: &PgPool, tenant: &str) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar::<_, Option<String>>(
        "SELECT paused_reason FROM trace_reads WHERE tenant = lower($1)",
    )
    .bind(tenant)
    .fetch_optional(pool)
    .await?
    .flatten())
}

/// Every Graph sender whose delivery is traced: `trace_delivery` (the senders file's
/// `traceDelivery`), else `default` (`GRAPH_TRACE_DELIVERY`).
///
/// # Errors
/// Database errors, or a row the code cannot use.
pub(crate) async fn tracers(
    pool: &PgPool,
    default: bool,
) -> Result<Vec<crate::domain::Sender>, StoreError> {
    let on: Vec<String> = sqlx::query_scalar(
        "SELECT address FROM system_mailboxes WHERE coalesce(trace_delivery, $1) \
         UNION SELECT lower(sender_address) FROM tenants WHERE coalesce(trace_delivery, $1)",
    )
    .bind(default)
    .fetch_all(pool)
    .await?;
    Ok(super::senders::all(pool)
        .await?
        .into_iter()
        .filter(|s| s.graph().is_some() && on.iter().any(|a| a == s.mailbox().as_str()))
        .collect())
}
