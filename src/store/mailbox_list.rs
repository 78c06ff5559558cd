//! The mailboxes list of `mailbox usage` and the admin UI: a page of the sending addresses,
//! busiest first, and the messages of a page's senders in one query (not one per mailbox).

use std::collections::HashMap;

use sqlx::PgPool;
use uuid::Uuid;

use super::{StoreError, admin::SenderMessages, messages::wait_reason::PAUSED_PREFIX};
use crate::domain::sql_status;

/// The most mailboxes one page lists.
pub const MAX_PER_PAGE: u32 = 500;

/// One page of the sending addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPage {
    /// Every sending address (each system mailbox and each tenant's sender, once).
    pub total: u64,
    /// This page's addresses with their unfinished (`SCHEDULED` + `SENDING`) messages, busiest
    /// first; equal ones by address.
    pub addresses: Vec<(String, i64)>,
}

/// Page `page` (from 1) of `per_page` (1 to [`MAX_PER_PAGE`]) sending addresses, busiest first:
/// most unfinished messages (an index-only scan of `messages_unfinished_by_sender`, which holds
/// only `SCHEDULED` and `SENDING` rows: a long history of finished rows costs nothing), then by
/// address.
///
/// # Errors
/// Database errors.
pub(crate) async fn busiest(
    pool: &PgPool,
    page: u32,
    per_page: u32,
) -> Result<AddressPage, StoreError> {
    let per_page = per_page.clamp(1, MAX_PER_PAGE);
    let offset = i64::from(page.max(1) - 1) * i64::from(per_page);
    // Without parallel workers: the planner splits the index scan over them, which on a busy
    // server costs more than it saves (5,000 mailboxes, 400,000 unfinished rows, 2 cores:
    // 60 ms alone, 100–150 ms with workers).
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL max_parallel_workers_per_gather = 0")
        .execute(&mut *tx)
        .await?;
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(concat!(
        "WITH senders AS ( \
             SELECT address, id FROM system_mailboxes \
             UNION ALL \
             (SELECT DISTINCT ON (lower(sender_address)) lower(sender_address), id \
              FROM tenants t WHERE NOT EXISTS (SELECT 1 FROM system_mailboxes m \
                                               WHERE m.address = lower(t.sender_address)) \
              ORDER BY lower(sender_address), name)), \
         busy AS ( \
             SELECT coalesce(system_mailbox_id, tenant_id) AS id, count(*) AS n FROM messages \
             WHERE status IN (",
        sql_status!(Scheduled),
        ", ",
        sql_status!(Sending),
        ") GROUP BY system_mailbox_id, tenant_id) \
         SELECT s.address, coalesce(b.n, 0), count(*) OVER () \
         FROM senders s LEFT JOIN busy b ON b.id = s.id \
         ORDER BY 2 DESC, 1 LIMIT $1 OFFSET $2"
    ))
    .bind(i64::from(per_page))
    .bind(offset)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let total = match rows.first() {
        Some((_, _, total)) => u64::try_from(*total).unwrap_or(0),
        // Past the last page (or none at all): the count alone.
        None => sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM (SELECT address FROM system_mailboxes \
             UNION SELECT lower(sender_address) FROM tenants) a",
        )
        .fetch_one(pool)
        .await?
        .try_into()
        .unwrap_or(0),
    };
    Ok(AddressPage {
        total,
        addresses: rows.into_iter().map(|(a, n, _)| (a, n)).collect(),
    })
}

/// The messages of each sender of `ids` (tenants or system mailboxes), in one query through
/// the sender indexes; a sender without any has [`SenderMessages::default`]'s zeros.
///
/// # Errors
/// Database errors.
pub(crate) async fn messages_of(
    pool: &PgPool,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, SenderMessages>, StoreError> {
    // Both from the indexes alone: counts by (sender, status); the paused rows (rare) by the
    // page's SCHEDULED rows.
    // Two halves, not one `OR`: a bitmap of both indexes would read the rows themselves.
    let counts: Vec<(Uuid, String, i64)> = sqlx::query_as(
        "SELECT system_mailbox_id, status, count(*) FROM messages \
         WHERE system_mailbox_id = ANY($1) GROUP BY 1, 2 \
         UNION ALL \
         SELECT tenant_id, status, count(*) FROM messages WHERE tenant_id = ANY($1) GROUP BY 1, 2",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    let paused: Vec<(Uuid, i64, Option<String>)> = sqlx::query_as(concat!(
        "SELECT coalesce(system_mailbox_id, tenant_id), count(*), max(last_error) FROM messages \
         WHERE (system_mailbox_id = ANY($1) OR tenant_id = ANY($1)) AND status = ",
        sql_status!(Scheduled),
        " AND wait_reason = 'paused' GROUP BY system_mailbox_id, tenant_id"
    ))
    .bind(ids)
    .fetch_all(pool)
    .await?;
    let mut out: HashMap<Uuid, SenderMessages> = ids
        .iter()
        .map(|id| (*id, SenderMessages::zeros()))
        .collect();
    for (id, status, n) in counts {
        out.entry(id)
            .or_insert_with(SenderMessages::zeros)
            .by_status
            .insert(status, n);
    }
    for (id, n, reason) in paused {
        let m = out.entry(id).or_insert_with(SenderMessages::zeros);
        m.paused = n;
        m.paused_reason = reason.map(|r| r.strip_prefix(PAUSED_PREFIX).unwrap_or(&r).to_owned());
    }
    Ok(out)
}
