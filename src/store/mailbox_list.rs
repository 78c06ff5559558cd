//! The mailboxes list of `mailbox usage` and the admin UI: a page of the sending addresses,
//! busiest first (counted live or read from [`mailbox_order`]'s snapshot), and the messages of
//! a page's senders in one query (not one per mailbox).

use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{
    StoreError,
    admin::SenderMessages,
    mailbox_order::{self, unfinished_by_sender},
    messages::wait_reason::PAUSED_PREFIX,
};
use crate::domain::sql_status;

/// The most mailboxes one page lists.
pub const MAX_PER_PAGE: u32 = 500;

/// Where a page's busiest-first order comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Counted now, over every unfinished row of every sender.
    Live,
    /// The snapshot ([`mailbox_order`]) if it was taken less than `max_age` ago; else a new one
    /// taken first, or (while another process takes it) counted live.
    Snapshot {
        /// The oldest snapshot used.
        max_age: Duration,
    },
}

impl Order {
    /// The snapshot at most [`mailbox_order::MAX_AGE`] old: what the pages use.
    pub const SNAPSHOT: Self = Self::Snapshot {
        max_age: mailbox_order::MAX_AGE,
    };
}

/// One page of the sending addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPage {
    /// Every sending address (each system mailbox and each tenant's sender, once).
    pub total: u64,
    /// This page's addresses with their unfinished (`SCHEDULED` + `SENDING`) messages as the
    /// order counted them, busiest first; equal ones by address.
    pub addresses: Vec<(String, i64)>,
    /// When the order's counts were taken (now, for [`Order::Live`]).
    pub order_as_of: DateTime<Utc>,
}

/// Every sending address with its id: each system mailbox, and each tenant's sender unless a
/// system mailbox has that address (then once, by the first tenant's name).
macro_rules! senders {
    () => {
        "senders AS ( \
             SELECT address, id FROM system_mailboxes \
             UNION ALL \
             (SELECT DISTINCT ON (lower(sender_address)) lower(sender_address), id \
              FROM tenants t WHERE NOT EXISTS (SELECT 1 FROM system_mailboxes m \
                                               WHERE m.address = lower(t.sender_address)) \
              ORDER BY lower(sender_address), name))"
    };
}

/// The page of `senders` joined to `busy` (`id`, `n`), busiest first; `$1` per page, `$2` the
/// offset; the columns: address, count, total, when `busy` was counted.
macro_rules! page_of {
    ($busy:expr, $at:expr) => {
        concat!(
            "WITH ",
            senders!(),
            ", busy AS (",
            $busy,
            ") SELECT s.address, coalesce(b.n, 0), count(*) OVER (), ",
            $at,
            " FROM senders s LEFT JOIN busy b ON b.id = s.id \
             ORDER BY 2 DESC, 1 LIMIT $1 OFFSET $2"
        )
    };
}

/// Page `page` (from 1) of `per_page` (1 to [`MAX_PER_PAGE`]) sending addresses, busiest first:
/// most unfinished messages, then by address, counted as `order` says. Live, that is an
/// index-only scan of `messages_unfinished_by_sender` (only `SCHEDULED` and `SENDING` rows: a
/// long history of finished rows costs nothing, but every unfinished row is counted); from the
/// snapshot, one row joined to the senders. Either way the senders themselves are read now: a
/// mailbox added, or given work, after the snapshot is listed (by its snapshot count, 0 if it
/// had none).
///
/// # Errors
/// Database errors.
pub(crate) async fn busiest(
    pool: &PgPool,
    page: u32,
    per_page: u32,
    order: Order,
) -> Result<AddressPage, StoreError> {
    let per_page = per_page.clamp(1, MAX_PER_PAGE);
    let offset = i64::from(page.max(1) - 1) * i64::from(per_page);
    let snapshot = match order {
        Order::Live => false,
        Order::Snapshot { max_age } => match mailbox_order::taken(pool).await? {
            Some((_, age)) if age < max_age => true,
            // Missing or too old: take one (unless another process is), or count live.
            _ => match mailbox_order::refresh(pool, max_age).await {
                Ok(Some(_)) => true,
                // Another process is taking it, or took it just now.
                Ok(None) => matches!(
                    mailbox_order::taken(pool).await?,
                    Some((_, age)) if age < max_age
                ),
                Err(e) => {
                    tracing::debug!(error = %e, "the mailboxes' order snapshot could not be taken");
                    false
                }
            },
        },
    };
    let rows: Vec<(String, i64, i64, DateTime<Utc>)> = if snapshot {
        sqlx::query_as(page_of!(
            "SELECT u.id, u.n FROM mailbox_order o, unnest(o.sender_ids, o.unfinished) AS u(id, n)",
            "(SELECT taken_at FROM mailbox_order)"
        ))
        .bind(i64::from(per_page))
        .bind(offset)
        .fetch_all(pool)
        .await?
    } else {
        // Without parallel workers (as the snapshot, [`mailbox_order::refresh`]).
        let mut tx = pool.begin().await?;
        sqlx::query("SET LOCAL max_parallel_workers_per_gather = 0")
            .execute(&mut *tx)
            .await?;
        let rows = sqlx::query_as(page_of!(unfinished_by_sender!(), "now()"))
            .bind(i64::from(per_page))
            .bind(offset)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows
    };
    let (total, order_as_of) = match rows.first() {
        Some((_, _, total, at)) => (u64::try_from(*total).unwrap_or(0), *at),
        // Past the last page (or none at all): the count alone.
        None => {
            let (n, at): (i64, DateTime<Utc>) = sqlx::query_as(
                "SELECT count(*), now() FROM (SELECT address FROM system_mailboxes \
                 UNION SELECT lower(sender_address) FROM tenants) a",
            )
            .fetch_one(pool)
            .await?;
            (u64::try_from(n).unwrap_or(0), at)
        }
    };
    Ok(AddressPage {
        total,
        addresses: rows.into_iter().map(|(a, n, _, _)| (a, n)).collect(),
        order_as_of,
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
