//! Campaigns (`messages.campaign_id`): their rows by sender and status, and what waits per
//! sender (`mail-worker campaign forecast|status`, the admin UI's campaigns page).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::{SenderRef, StoreError, admin::CANCELLED_PREFIX};
use crate::domain::sql_status;

/// A row's recipients in SQL (To + Cc + Bcc of `messages m`).
macro_rules! recipients_sql {
    () => {
        "(jsonb_array_length(m.to_recipients) + jsonb_array_length(m.cc_recipients) \
          + jsonb_array_length(m.bcc_recipients))"
    };
}

/// Whether a waiting row of `messages m` holds a limiter booking (`paced`: denied for the
/// minute, day or tenant budget and booked at its `scheduled_on`, not yet past the booking's
/// 15 min grace): `$1` is whether the limiter books at all.
macro_rules! booked_sql {
    () => {
        "($1 AND coalesce(m.wait_reason IN ('minute', 'day', 'tenant'), false) \
          AND m.scheduled_on > now() - interval '15 minutes')"
    };
}

/// What waits for one sender in PostgreSQL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Waiting {
    /// `SCHEDULED` rows without a booking: each still needs a slot.
    pub unbooked: u64,
    /// Their recipients.
    pub unbooked_recipients: u64,
    /// `SCHEDULED` rows holding a booked slot.
    pub booked: u64,
    /// The latest `scheduled_on` of the `SCHEDULED` rows (a booked slot or a producer's future
    /// `scheduledOn`): nothing waiting goes before it.
    #[serde(skip)]
    pub latest: Option<DateTime<Utc>>,
}

/// What waits, per sender id (system mailbox or tenant); `booking` = the limiter books
/// (`paced`).
///
/// # Errors
/// Database errors.
pub(crate) async fn waiting_by_sender(
    pool: &PgPool,
    booking: bool,
) -> Result<HashMap<Uuid, Waiting>, StoreError> {
    waiting(pool, booking, None).await
}

/// What waits for one sender (its rows only, through the sender indexes).
///
/// # Errors
/// Database errors.
pub(crate) async fn waiting_of(
    pool: &PgPool,
    booking: bool,
    sender: SenderRef,
) -> Result<Waiting, StoreError> {
    Ok(waiting(pool, booking, Some(sender))
        .await?
        .remove(&sender.id())
        .unwrap_or_default())
}

async fn waiting(
    pool: &PgPool,
    booking: bool,
    only: Option<SenderRef>,
) -> Result<HashMap<Uuid, Waiting>, StoreError> {
    let filter = match only {
        None => "",
        Some(SenderRef::SystemMailbox(_)) => " AND m.system_mailbox_id = $2",
        Some(SenderRef::Tenant(_)) => " AND m.system_mailbox_id IS NULL AND m.tenant_id = $2",
    };
    let sql = format!(
        concat!(
            "SELECT coalesce(m.system_mailbox_id, m.tenant_id), \
                    count(*) FILTER (WHERE NOT ",
            booked_sql!(),
            "), coalesce(sum(",
            recipients_sql!(),
            ") FILTER (WHERE NOT ",
            booked_sql!(),
            "), 0)::bigint, count(*) FILTER (WHERE ",
            booked_sql!(),
            "), max(m.scheduled_on) FROM messages m WHERE m.status = ",
            sql_status!(Scheduled),
            "{} GROUP BY 1"
        ),
        filter
    );
    // `filter` is one of the fixed fragments above: no input reaches the text.
    let mut query =
        sqlx::query_as::<_, (Uuid, i64, i64, i64, Option<DateTime<Utc>>)>(sqlx::AssertSqlSafe(sql))
            .bind(booking);
    if let Some(sender) = only {
        query = query.bind(sender.id());
    }
    let rows = query.fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .map(|(id, unbooked, recipients, booked, latest)| {
            (
                id,
                Waiting {
                    unbooked: unbooked as u64,
                    unbooked_recipients: recipients as u64,
                    booked: booked as u64,
                    latest,
                },
            )
        })
        .collect())
}

/// One campaign's rows of one sender (or, in [`list`], of all its senders).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct CampaignCounts {
    /// `SENT`.
    pub sent: i64,
    /// `DELIVERED`: the message trace says every recipient received it.
    pub delivered: i64,
    /// `BOUNCED`: sent, then a non-delivery report or the message trace told a failure.
    pub bounced: i64,
    /// `SCHEDULED` or `SENDING`.
    pub waiting: i64,
    /// `ERROR`, not cancelled.
    pub failed: i64,
    /// `ERROR` by an operator's cancel.
    pub cancelled: i64,
    /// Waiting rows holding a booked slot.
    pub booked: i64,
    /// `SCHEDULED` rows without a booking (each still needs a slot).
    pub unbooked: i64,
    /// Their recipients.
    pub unbooked_recipients: i64,
    /// The latest booked slot of its waiting rows.
    pub last_booked_slot: Option<DateTime<Utc>>,
    /// The first `sent_at`.
    pub first_sent: Option<DateTime<Utc>>,
    /// The last `sent_at`.
    pub last_sent: Option<DateTime<Utc>>,
    /// Recipients (To + Cc + Bcc) of its sent rows by fate (`recipient_outcomes`: the message
    /// trace, or an NDR naming them): delivered.
    pub recipients_delivered: i64,
    /// … failed (bounced).
    pub recipients_failed: i64,
    /// … filtered (`FilteredAsSpam`, `Quarantined`).
    pub recipients_filtered: i64,
    /// … no fate known yet: of `SENT` rows, not final (a sender whose trace is off keeps its
    /// recipients here).
    pub recipients_pending: i64,
}

/// The columns of [`CampaignCounts`] over `messages m` (`$1`: the limiter books; `$2`: the
/// cancel's `last_error` prefix).
macro_rules! counts_sql {
    () => {
        concat!(
            "count(*) FILTER (WHERE m.status = ",
            sql_status!(Sent),
            ") AS sent, count(*) FILTER (WHERE m.status = ",
            sql_status!(Delivered),
            ") AS delivered, count(*) FILTER (WHERE m.status = ",
            sql_status!(Bounced),
            ") AS bounced, count(*) FILTER (WHERE m.status IN (",
            sql_status!(Scheduled),
            ", ",
            sql_status!(Sending),
            ")) AS waiting, count(*) FILTER (WHERE m.status = ",
            sql_status!(Error),
            " AND NOT coalesce(starts_with(m.last_error, $2), false)) AS failed, \
             count(*) FILTER (WHERE m.status = ",
            sql_status!(Error),
            " AND coalesce(starts_with(m.last_error, $2), false)) AS cancelled, \
             count(*) FILTER (WHERE m.status = ",
            sql_status!(Scheduled),
            " AND ",
            booked_sql!(),
            ") AS booked, count(*) FILTER (WHERE m.status = ",
            sql_status!(Scheduled),
            " AND NOT ",
            booked_sql!(),
            ") AS unbooked, coalesce(sum(",
            recipients_sql!(),
            ") FILTER (WHERE m.status = ",
            sql_status!(Scheduled),
            " AND NOT ",
            booked_sql!(),
            "), 0)::bigint AS unbooked_recipients, max(m.scheduled_on) FILTER (WHERE m.status = ",
            sql_status!(Scheduled),
            " AND ",
            booked_sql!(),
            ") AS last_booked_slot, min(m.sent_at) AS first_sent, max(m.sent_at) AS last_sent, \
             coalesce(sum(o.delivered), 0)::bigint AS recipients_delivered, \
             coalesce(sum(o.failed), 0)::bigint AS recipients_failed, \
             coalesce(sum(o.filtered), 0)::bigint AS recipients_filtered, \
             coalesce(sum(",
            recipients_sql!(),
            " - o.delivered - o.failed - o.filtered) FILTER (WHERE m.status = ",
            sql_status!(Sent),
            "), 0)::bigint AS recipients_pending"
        )
    };
}

/// The recipients' fates of each `messages m` as `o` (for [`counts_sql`]).
macro_rules! outcomes_join {
    () => {
        " LEFT JOIN LATERAL (SELECT count(*) FILTER (WHERE r.outcome = 'delivered') AS delivered, \
              count(*) FILTER (WHERE r.outcome = 'failed') AS failed, \
              count(*) FILTER (WHERE r.outcome = 'filtered') AS filtered \
              FROM recipient_outcomes r WHERE r.message_id = m.id) o ON true"
    };
}

/// One sender's part of a campaign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct CampaignSender {
    /// The sender's id (system mailbox or tenant).
    pub sender_id: Uuid,
    /// Its mailbox.
    pub mailbox: String,
    /// Its rows.
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub counts: CampaignCounts,
}

/// Campaign `campaign` by sender, by mailbox (empty: no such campaign).
///
/// # Errors
/// Database errors.
pub(crate) async fn by_sender(
    pool: &PgPool,
    campaign: &str,
    booking: bool,
) -> Result<Vec<CampaignSender>, StoreError> {
    Ok(sqlx::query_as(concat!(
        "SELECT coalesce(m.system_mailbox_id, m.tenant_id) AS sender_id, \
                lower(coalesce(s.address, t.sender_address)) AS mailbox, ",
        counts_sql!(),
        " FROM messages m \
          LEFT JOIN tenants t ON t.id = m.tenant_id \
          LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id",
        outcomes_join!(),
        " WHERE m.campaign_id = $3 GROUP BY 1, 2 ORDER BY 2"
    ))
    .bind(booking)
    .bind(CANCELLED_PREFIX)
    .bind(campaign)
    .fetch_all(pool)
    .await?)
}

/// One campaign, all its senders together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct CampaignLine {
    /// `campaignId`.
    pub campaign: String,
    /// How many senders send it.
    pub senders: i64,
    /// When its first row was stored.
    pub created: DateTime<Utc>,
    /// Its rows.
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub counts: CampaignCounts,
}

/// The campaigns, most recently stored first, at most `limit`.
///
/// # Errors
/// Database errors.
pub(crate) async fn list(
    pool: &PgPool,
    booking: bool,
    limit: u32,
) -> Result<Vec<CampaignLine>, StoreError> {
    Ok(sqlx::query_as(concat!(
        "SELECT m.campaign_id AS campaign, \
                count(DISTINCT coalesce(m.system_mailbox_id, m.tenant_id)) AS senders, \
                min(m.created_at) AS created, ",
        counts_sql!(),
        " FROM messages m",
        outcomes_join!(),
        " WHERE m.campaign_id IS NOT NULL \
          GROUP BY 1 ORDER BY 3 DESC, 1 LIMIT $3"
    ))
    .bind(booking)
    .bind(CANCELLED_PREFIX)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?)
}
