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
/// most unfinished messages (counted from the partial indexes of `SCHEDULED` and `SENDING`
/// rows, so a long history of finished rows costs nothing), then by address.
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
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(concat!(
        "WITH senders AS ( \
             SELECT address, id FROM system_mailboxes \
             UNION ALL \
             (SELECT DISTINCT ON (lower(sender_address)) lower(sender_address), id \
              FROM tenants t WHERE NOT EXISTS (SELECT 1 FROM system_mailboxes m \
                                               WHERE m.address = lower(t.sender_address)) \
              ORDER BY lower(sender_address), name)), \
         busy AS ( \
             SELECT coalesce(system_mailbox_id, tenant_id) AS id, count(*) AS n FROM ( \
                 SELECT system_mailbox_id, tenant_id FROM messages WHERE status = ",
        sql_status!(Scheduled),
        " UNION ALL SELECT system_mailbox_id, tenant_id FROM messages WHERE status = ",
        sql_status!(Sending),
        ") unfinished GROUP BY 1) \
         SELECT s.address, coalesce(b.n, 0), count(*) OVER () \
         FROM senders s LEFT JOIN busy b ON b.id = s.id \
         ORDER BY 2 DESC, 1 LIMIT $1 OFFSET $2"
    ))
    .bind(i64::from(per_page))
    .bind(offset)
    .fetch_all(pool)
    .await?;
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
    let rows: Vec<(Uuid, String, i64, i64, Option<String>)> = sqlx::query_as(concat!(
        "SELECT coalesce(system_mailbox_id, tenant_id), status, count(*), \
             count(*) FILTER (WHERE wait_reason = 'paused' AND status = ",
        sql_status!(Scheduled),
        "), max(last_error) FILTER (WHERE wait_reason = 'paused' AND status = ",
        sql_status!(Scheduled),
        ") FROM messages WHERE system_mailbox_id = ANY($1) OR tenant_id = ANY($1) \
         GROUP BY 1, 2"
    ))
    .bind(ids)
    .fetch_all(pool)
    .await?;
    let mut out: HashMap<Uuid, SenderMessages> = ids
        .iter()
        .map(|id| (*id, SenderMessages::zeros()))
        .collect();
    for (id, status, n, paused, reason) in rows {
        let m = out.entry(id).or_insert_with(SenderMessages::zeros);
        m.by_status.insert(status, n);
        m.paused += paused;
        if let Some(r) = reason {
            let r = r.strip_prefix(PAUSED_PREFIX).unwrap_or(&r).to_owned();
            m.paused_reason = Some(m.paused_reason.take().map_or(r.clone(), |p| p.max(r)));
        }
    }
    Ok(out)
}
