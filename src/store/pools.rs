//! `sender_pools` and `sender_pool_members`: the senders file's pools, what a campaign line's
//! `senderPool` resolves to, and a pooled message's placement on its member
//! (docs/decisions/0046-sender-pools.md).

use std::collections::HashMap;

use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::{Entity, SenderRef, StoreError, messages::Fence};
use crate::domain::{MailboxAddress, OverflowWhen, PoolOverflow, Sender, sql_status};

/// A pool as a campaign line names it: its id and its members, in the file's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRef {
    /// `sender_pools.id`.
    pub id: Uuid,
    /// Its members.
    pub members: Vec<SenderRef>,
}

impl PoolRef {
    /// The member a new message of the pool is stored under until its first attempt places
    /// it: spread by the message's id, so the claim's fairness across senders sees the
    /// pool's backlog on every member.
    pub fn stand_in(&self, message: Uuid) -> Option<SenderRef> {
        let n = self.members.len() as u128;
        (n > 0).then(|| self.members[(message.as_u128() % n) as usize])
    }
}

/// The sender the SQL `$1` address resolves to, as `senders::by_address` does: the system
/// mailbox with that address, else the first tenant (by name) sending from it.
macro_rules! by_address {
    () => {
        "(SELECT NULL::uuid AS tenant_id, s.id AS system_mailbox_id \
         FROM system_mailboxes s WHERE s.address = $1 \
     UNION ALL SELECT * FROM (SELECT t.id, NULL::uuid FROM tenants t \
         WHERE lower(t.sender_address) = $1 \
           AND NOT EXISTS (SELECT 1 FROM system_mailboxes s WHERE s.address = $1) \
         ORDER BY t.name LIMIT 1) x)"
    };
}

/// Inserts or updates (by `name`) a pool with its members (replacing the old list) and its
/// overflow, in one transaction. The senders are the file's, written before.
///
/// # Errors
/// [`StoreError::NotFound`] naming a member or overflow sender that is not stored; database
/// errors.
pub async fn upsert(
    pool: &PgPool,
    name: &str,
    members: &[MailboxAddress],
    overflow: Option<&PoolOverflow>,
) -> Result<Uuid, StoreError> {
    let mut tx = pool.begin().await?;
    let mut over: (Option<Uuid>, Option<Uuid>) = (None, None);
    if let Some(o) = overflow {
        over = sqlx::query_as(concat!(
            "SELECT tenant_id, system_mailbox_id FROM ",
            by_address!(),
            " r"
        ))
        .bind(o.sender.as_str())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound {
            entity: Entity::Sender,
            key: format!("{} (pool {name}'s overflow sender)", o.sender),
        })?;
    }
    let id: Uuid = sqlx::query_scalar(
        "INSERT INTO sender_pools (name, overflow_tenant_id, overflow_system_mailbox_id, \
             overflow_when, overflow_external_only) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (name) DO UPDATE SET overflow_tenant_id = EXCLUDED.overflow_tenant_id, \
             overflow_system_mailbox_id = EXCLUDED.overflow_system_mailbox_id, \
             overflow_when = EXCLUDED.overflow_when, \
             overflow_external_only = EXCLUDED.overflow_external_only, updated_at = now() \
         RETURNING id",
    )
    .bind(name)
    .bind(over.0)
    .bind(over.1)
    .bind(overflow.map(|o| o.when.as_str()))
    .bind(overflow.is_some_and(|o| o.external_only))
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM sender_pool_members WHERE pool_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    for (position, member) in members.iter().enumerate() {
        let done = sqlx::query(concat!(
            "INSERT INTO sender_pool_members (pool_id, position, tenant_id, system_mailbox_id) \
             SELECT $2, $3, r.tenant_id, r.system_mailbox_id FROM ",
            by_address!(),
            " r"
        ))
        .bind(member.as_str())
        .bind(id)
        .bind(i32::try_from(position).unwrap_or(i32::MAX))
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                entity: Entity::Sender,
                key: format!("{member} (a member of pool {name})"),
            });
        }
    }
    tx.commit().await?;
    Ok(id)
}

/// Every pool by name, with its members (for the campaign lines' `senderPool`).
///
/// # Errors
/// Database errors.
pub async fn directory(pool: &PgPool) -> Result<HashMap<String, PoolRef>, StoreError> {
    let rows = sqlx::query(
        "SELECT p.name, p.id, m.tenant_id, m.system_mailbox_id FROM sender_pools p \
         JOIN sender_pool_members m ON m.pool_id = p.id ORDER BY p.name, m.position",
    )
    .fetch_all(pool)
    .await?;
    let mut pools: HashMap<String, PoolRef> = HashMap::new();
    for row in &rows {
        let name: String = row.try_get("name")?;
        let member = SenderRef::of_row(row, "sender_pool_members", || format!("pool {name}"))?;
        pools
            .entry(name)
            .or_insert_with(|| PoolRef {
                id: row.try_get("id").unwrap_or_default(),
                members: Vec::new(),
            })
            .members
            .push(member);
    }
    Ok(pools)
}

/// A pool as a send needs it: its name, its members and its overflow sender with the rule.
#[derive(Debug, Clone)]
pub struct PoolSenders {
    /// `sender_pools.name`.
    pub name: String,
    /// Its members that still exist, in the file's order.
    pub members: Vec<Sender>,
    /// The overflow sender, when to use it, and whether only for external recipients.
    pub overflow: Option<(Sender, OverflowWhen, bool)>,
}

/// The pool `id` with its senders loaded; `None` when it no longer exists.
///
/// # Errors
/// Database errors.
pub async fn senders_of(pool: &PgPool, id: Uuid) -> Result<Option<PoolSenders>, StoreError> {
    let Some(row) = sqlx::query(
        "SELECT name, overflow_tenant_id AS tenant_id, overflow_system_mailbox_id AS system_mailbox_id, \
             overflow_when, overflow_external_only FROM sender_pools WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?
    else {
        return Ok(None);
    };
    let name: String = row.try_get("name")?;
    let overflow = match row.try_get::<Option<String>, _>("overflow_when")? {
        Some(when) => {
            let when: OverflowWhen = when.parse().map_err(|problem| StoreError::BadRow {
                table: "sender_pools",
                problem: format!("pool {name}: overflow_when {problem}"),
            })?;
            let sender = match SenderRef::of_row(&row, "sender_pools", || format!("pool {name}")) {
                Ok(r) => sender(pool, r).await?,
                Err(_) => None,
            };
            sender.map(|s| {
                (
                    s,
                    when,
                    row.try_get("overflow_external_only").unwrap_or(false),
                )
            })
        }
        None => None,
    };
    let refs = sqlx::query(
        "SELECT tenant_id, system_mailbox_id FROM sender_pool_members WHERE pool_id = $1 \
         ORDER BY position",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    let mut members = Vec::new();
    for r in &refs {
        let r = SenderRef::of_row(r, "sender_pool_members", || format!("pool {name}"))?;
        members.extend(sender(pool, r).await?);
    }
    Ok(Some(PoolSenders {
        name,
        members,
        overflow,
    }))
}

/// The sender `r` names, if it still exists.
async fn sender(pool: &PgPool, r: SenderRef) -> Result<Option<Sender>, StoreError> {
    Ok(match r {
        SenderRef::Tenant(id) => super::senders::tenant_by_id(pool, id)
            .await?
            .map(Sender::Tenant),
        SenderRef::SystemMailbox(id) => super::senders::system_mailbox_by_id(pool, id)
            .await?
            .map(Sender::SystemMailbox),
    })
}

/// Places the claimed pooled message of `fence` on `member` before any Graph request for it:
/// its sender columns and `pool_placed_at`, with `overflow_reason` when `member` is the
/// pool's overflow sender. Returns whether the attempt still held the row (else nothing was
/// written: another claim took it over).
///
/// # Errors
/// Database errors.
pub(crate) async fn place<'e, E>(
    executor: E,
    fence: Fence,
    member: SenderRef,
    overflow_reason: Option<OverflowWhen>,
) -> Result<bool, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Postgres>,
{
    let (tenant, mailbox) = match member {
        SenderRef::Tenant(id) => (Some(id), None),
        SenderRef::SystemMailbox(id) => (None, Some(id)),
    };
    let done = sqlx::query(concat!(
        "UPDATE messages SET tenant_id = $3, system_mailbox_id = $4, pool_placed_at = now(), \
             overflow_reason = $5, updated_at = now() \
         WHERE id = $1 AND claim_token = $2 AND status = ",
        sql_status!(Sending),
        " AND pool_placed_at IS NULL AND graph_draft_id IS NULL AND send_attempted_at IS NULL"
    ))
    .bind(fence.id)
    .bind(fence.token)
    .bind(tenant)
    .bind(mailbox)
    .bind(overflow_reason.map(OverflowWhen::as_str))
    .execute(executor)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Takes the placement back from the claimed pooled message of `fence`, placed on a member
/// that then refused it (another placement took the room it had read) before any Graph
/// request: due now, `SCHEDULED`, its attempt given back (as a deferral), so its next claim
/// places it again. Returns when it is due, or `None` when the attempt no longer held the
/// row or a Graph request may have been made.
///
/// # Errors
/// Database errors.
pub(crate) async fn unplace_now<'e, E>(
    executor: E,
    fence: Fence,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Postgres>,
{
    Ok(sqlx::query_scalar(concat!(
        "UPDATE messages SET pool_placed_at = NULL, status = ",
        sql_status!(Scheduled),
        ", scheduled_on = now(), attempts = greatest(attempts - 1, 0), \
             deferrals = deferrals + 1, updated_at = now() \
         WHERE id = $1 AND claim_token = $2 AND status = ",
        sql_status!(Sending),
        " AND overflow_reason IS NULL AND graph_draft_id IS NULL AND send_attempted_at IS NULL \
         RETURNING scheduled_on"
    ))
    .bind(fence.id)
    .bind(fence.token)
    .fetch_optional(executor)
    .await?)
}

/// Gives the claimed pooled message of `fence`, placed on a member that then refused it for
/// its day budget before any Graph request, to the overflow sender `to` for `reason`: due
/// now, `SCHEDULED`, its attempt given back (as a deferral). Returns when it is due, or
/// `None` when the attempt no longer held the row or a Graph request may have been made.
///
/// # Errors
/// Database errors.
pub(crate) async fn overflow_now<'e, E>(
    executor: E,
    fence: Fence,
    to: SenderRef,
    reason: OverflowWhen,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Postgres>,
{
    let (tenant, mailbox) = match to {
        SenderRef::Tenant(id) => (Some(id), None),
        SenderRef::SystemMailbox(id) => (None, Some(id)),
    };
    Ok(sqlx::query_scalar(concat!(
        "UPDATE messages SET tenant_id = $3, system_mailbox_id = $4, overflow_reason = $5, \
             pool_placed_at = now(), status = ",
        sql_status!(Scheduled),
        ", scheduled_on = now(), attempts = greatest(attempts - 1, 0), \
             deferrals = deferrals + 1, updated_at = now() \
         WHERE id = $1 AND claim_token = $2 AND status = ",
        sql_status!(Sending),
        " AND graph_draft_id IS NULL AND send_attempted_at IS NULL RETURNING scheduled_on"
    ))
    .bind(fence.id)
    .bind(fence.token)
    .bind(tenant)
    .bind(mailbox)
    .bind(reason.as_str())
    .fetch_optional(executor)
    .await?)
}
