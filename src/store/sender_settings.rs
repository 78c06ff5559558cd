//! A sender's settings beside its row: what `senders import` writes after its upsert (its
//! default priority and its reserved headroom, `rateLimitReservedPercent`), and every sender's
//! default priority, read back.

use sqlx::PgPool;
use uuid::Uuid;

use super::{SenderRef, StoreError};
use crate::domain::Priority;

/// Sets a system mailbox's override of `MAIL_RATE_LIMIT_RESERVED_PERCENT`
/// (`system_mailboxes.rate_limit_reserved_percent`); `None` removes it (back to the default).
///
/// # Errors
/// Database errors (a value over 90 breaks the column's CHECK).
pub(crate) async fn set_reserved_percent(
    pool: &PgPool,
    mailbox: Uuid,
    percent: Option<u8>,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE system_mailboxes SET rate_limit_reserved_percent = $2 WHERE id = $1")
        .bind(mailbox)
        .bind(percent.map(i32::from))
        .execute(pool)
        .await?;
    Ok(())
}

/// Sets a sender's default priority (`tenants.priority` / `system_mailboxes.priority`: what a
/// message of it without its own priority is stored with) and whether its Inbox is read for
/// bounces (`read_bounces`, the senders file's `readBounces`; read only while
/// `GRAPH_READ_BOUNCES=on`) and whether its delivery is traced (`trace_delivery`, the senders
/// file's `traceDelivery`; `None` follows `GRAPH_TRACE_DELIVERY`).
///
/// # Errors
/// Database errors.
pub(crate) async fn set_priority_and_bounces(
    pool: &PgPool,
    sender: SenderRef,
    priority: Priority,
    (read_bounces, trace_delivery): (bool, Option<bool>),
) -> Result<(), StoreError> {
    let (sql, id) = match sender {
        SenderRef::Tenant(id) => (
            "UPDATE tenants SET read_bounces = $2, priority = $3, trace_delivery = $4 WHERE id = $1",
            id,
        ),
        SenderRef::SystemMailbox(id) => (
            "UPDATE system_mailboxes SET read_bounces = $2, priority = $3, trace_delivery = $4 \
             WHERE id = $1",
            id,
        ),
    };
    sqlx::query(sql)
        .bind(id)
        .bind(read_bounces)
        .bind(priority.as_str())
        .bind(trace_delivery)
        .execute(pool)
        .await?;
    Ok(())
}

/// Every sender's default priority by id (system mailbox or tenant); an unknown keyword (a
/// newer replica's) reads as `normal`.
///
/// # Errors
/// Database errors.
pub(crate) async fn priorities(
    pool: &PgPool,
) -> Result<std::collections::HashMap<Uuid, crate::domain::Priority>, StoreError> {
    let rows: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT id, priority FROM system_mailboxes UNION ALL SELECT id, priority FROM tenants",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, p)| (id, p.parse().unwrap_or_default()))
        .collect())
}
