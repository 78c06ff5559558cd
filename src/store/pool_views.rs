//! What the reports read about sender pools (docs/decisions/0046-sender-pools.md): a
//! campaign's pooled rows by pool, member and overflow reason (`campaign status`, the admin
//! UI's campaign page), the pools each sender is a member of (`mailbox usage`), the members of
//! every pool (the forecast).

use std::collections::HashMap;

use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::StoreError;
use crate::domain::sql_status;

/// A campaign's pooled rows of one pool, one placement (member, or none yet) and one overflow
/// reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct PooledRows {
    /// `sender_pools.name`.
    pub pool: String,
    /// The member (or overflow sender) the rows are placed on, lower case; `None`: not placed
    /// yet (waiting for their first attempt, stored under a stand-in member).
    pub mailbox: Option<String>,
    /// `budgetsSpent` | `forecastMisses` for rows given to the overflow sender, else `None`.
    pub overflow_reason: Option<String>,
    /// Sent (`SENT`, `DELIVERED` or `BOUNCED`: Graph accepted them).
    pub sent: i64,
    /// Waiting (`SCHEDULED` or `SENDING`).
    pub waiting: i64,
    /// Ended in `ERROR` (failed or cancelled).
    pub failed: i64,
}

/// Campaign `campaign`'s pooled rows by pool, placement and overflow reason, ordered by pool
/// then mailbox (unplaced first).
///
/// # Errors
/// Database errors.
pub(crate) async fn campaign_rows(
    pool: &PgPool,
    campaign: &str,
) -> Result<Vec<PooledRows>, StoreError> {
    Ok(sqlx::query_as(concat!(
        "SELECT p.name AS pool, \
                CASE WHEN m.pool_placed_at IS NULL THEN NULL \
                     ELSE lower(coalesce(s.address, t.sender_address)) END AS mailbox, \
                m.overflow_reason, \
                count(*) FILTER (WHERE m.status IN (",
        sql_status!(Sent),
        ", ",
        sql_status!(Delivered),
        ", ",
        sql_status!(Bounced),
        "))::bigint AS sent, count(*) FILTER (WHERE m.status IN (",
        sql_status!(Scheduled),
        ", ",
        sql_status!(Sending),
        "))::bigint AS waiting, count(*) FILTER (WHERE m.status = ",
        sql_status!(Error),
        ")::bigint AS failed \
         FROM messages m JOIN sender_pools p ON p.id = m.sender_pool_id \
         LEFT JOIN tenants t ON t.id = m.tenant_id \
         LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
         WHERE m.campaign_id = $1 AND m.sender_pool_id IS NOT NULL \
         GROUP BY 1, 2, 3 ORDER BY 1, 2 NULLS FIRST, 3 NULLS FIRST"
    ))
    .bind(campaign)
    .fetch_all(pool)
    .await?)
}

/// One member of a pool.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PoolMember {
    /// `sender_pools.name`.
    pub pool: String,
    /// `sender_pools.id`.
    pub pool_id: Uuid,
    /// The member's id (`system_mailboxes.id` or `tenants.id`).
    pub sender_id: Uuid,
    /// Its address, lower case.
    pub mailbox: String,
}

/// Every pool's members, by pool name and then the file's order.
///
/// # Errors
/// Database errors.
pub(crate) async fn members(pool: &PgPool) -> Result<Vec<PoolMember>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT p.name AS pool, p.id AS pool_id, \
                coalesce(m.system_mailbox_id, m.tenant_id) AS sender_id, \
                lower(coalesce(s.address, t.sender_address)) AS mailbox \
         FROM sender_pool_members m JOIN sender_pools p ON p.id = m.pool_id \
         LEFT JOIN tenants t ON t.id = m.tenant_id \
         LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
         ORDER BY p.name, m.position",
    )
    .fetch_all(pool)
    .await?)
}

/// The pools each of `senders` (ids of system mailboxes or tenants) is a member of, by name.
///
/// # Errors
/// Database errors.
pub(crate) async fn pools_of(
    pool: &PgPool,
    senders: &[Uuid],
) -> Result<HashMap<Uuid, Vec<String>>, StoreError> {
    let rows: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT coalesce(m.system_mailbox_id, m.tenant_id), p.name \
         FROM sender_pool_members m JOIN sender_pools p ON p.id = m.pool_id \
         WHERE coalesce(m.system_mailbox_id, m.tenant_id) = ANY($1) ORDER BY p.name",
    )
    .bind(senders)
    .fetch_all(pool)
    .await?;
    let mut out: HashMap<Uuid, Vec<String>> = HashMap::new();
    for (id, name) in rows {
        out.entry(id).or_default().push(name);
    }
    Ok(out)
}

/// Every pool's overflow, by pool id: its sender's id (`system_mailboxes.id` or
/// `tenants.id`), its rule and whether only for external recipients. Pools without one (or
/// whose overflow sender is gone) are not in it.
///
/// # Errors
/// Database errors; a stored rule that is not one of the words, as a bad row.
pub(crate) async fn overflows(
    pool: &PgPool,
) -> Result<HashMap<Uuid, (Uuid, crate::domain::OverflowWhen, bool)>, StoreError> {
    let rows: Vec<(Uuid, Uuid, String, bool)> = sqlx::query_as(
        "SELECT id, coalesce(overflow_system_mailbox_id, overflow_tenant_id), overflow_when, \
                overflow_external_only \
         FROM sender_pools WHERE overflow_when IS NOT NULL \
           AND coalesce(overflow_system_mailbox_id, overflow_tenant_id) IS NOT NULL",
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(id, sender, when, external_only)| {
            let when = when.parse().map_err(|problem| StoreError::BadRow {
                table: "sender_pools",
                problem: format!("pool {id}: overflow_when {problem}"),
            })?;
            Ok((id, (sender, when, external_only)))
        })
        .collect()
}
