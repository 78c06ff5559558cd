//! The status report (`mail-worker status`, the demo's table): counts by status per sender.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use super::StoreError;
use crate::domain::{sql_finished, sql_status};

/// One sender's line of the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct SenderStatus {
    /// The sending mailbox (lower-case).
    pub mailbox: String,
    /// `tenant <name>` or `system mailbox`.
    pub kind: String,
    /// Rows `SCHEDULED`.
    pub scheduled: i64,
    /// Of those, never tried and not due yet (a producer's future `scheduledOn`).
    pub scheduled_later: i64,
    /// Of the `SCHEDULED` rows, those waiting because their sender is paused (credentials
    /// missing or refused; `wait_reason = 'paused'`, cleared when it resumes).
    pub paused: i64,
    /// Rows `SENDING`.
    pub sending: i64,
    /// Rows `SENT`.
    pub sent: i64,
    /// Rows `ERROR`.
    pub error: i64,
    /// `BOUNCED` rows (an NDR came back after the send).
    pub bounced: i64,
    /// Sum of `deferrals` over all its rows.
    pub deferrals: i64,
    /// The oldest `scheduled_on` of a due `SCHEDULED` row (a backlog's age).
    pub oldest_due: Option<DateTime<Utc>>,
    /// The earliest future `scheduled_on`.
    pub next_scheduled: Option<DateTime<Utc>>,
}

/// One line per sender that has messages, ordered by mailbox.
///
/// # Errors
/// Database errors.
pub async fn by_sender(pool: &PgPool) -> Result<Vec<SenderStatus>, StoreError> {
    sqlx::query_as::<_, SenderStatus>(
        concat!("SELECT coalesce(t.sender_address, s.address) AS mailbox, \
             CASE WHEN t.id IS NOT NULL THEN 'tenant ' || t.name ELSE 'system mailbox' END AS kind, \
             count(*) FILTER (WHERE m.status = ", sql_status!(Scheduled), ") AS scheduled, \
             count(*) FILTER (WHERE m.status = ", sql_status!(Scheduled), " AND m.scheduled_on > now() \
                 AND m.attempts = 0 AND m.deferrals = 0) AS scheduled_later, \
             count(*) FILTER (WHERE m.status = ", sql_status!(Scheduled), " \
                 AND m.wait_reason = 'paused') AS paused, \
             count(*) FILTER (WHERE m.status = ", sql_status!(Sending), ") AS sending, \
             count(*) FILTER (WHERE m.status = ", sql_status!(Sent), ") AS sent, \
             count(*) FILTER (WHERE m.status = ", sql_status!(Error), ") AS error, \
             count(*) FILTER (WHERE m.status = ", sql_status!(Bounced), ") AS bounced, \
             coalesce(sum(m.deferrals), 0)::bigint AS deferrals, \
             min(m.scheduled_on) FILTER (WHERE m.status = ", sql_status!(Scheduled), " AND m.scheduled_on <= now()) AS oldest_due, \
             min(m.scheduled_on) FILTER (WHERE m.status = ", sql_status!(Scheduled), " AND m.scheduled_on > now()) AS next_scheduled \
         FROM messages m \
         LEFT JOIN tenants t ON t.id = m.tenant_id \
         LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
         GROUP BY 1, 2 ORDER BY 1, 2"),
    )
    .fetch_all(pool)
    .await
    .map_err(StoreError::from)
}

/// How many rows are still in progress: `SENDING`, or `SCHEDULED` and either due by
/// `horizon` or already tried (deferred or retried). Rows never tried and scheduled after
/// `horizon` (a producer's future `scheduledOn`) do not count.
///
/// # Errors
/// Database errors.
pub async fn unfinished(pool: &PgPool, horizon: DateTime<Utc>) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(concat!(
        "SELECT count(*) FROM messages WHERE status = ",
        sql_status!(Sending),
        " \
             OR (status = ",
        sql_status!(Scheduled),
        " \
                 AND (scheduled_on <= $1 OR deferrals > 0 OR attempts > 0))"
    ))
    .bind(horizon)
    .fetch_one(pool)
    .await?)
}

/// `ERROR` rows grouped by `last_error`'s first 120 characters: `(mailbox, reason, count)`.
///
/// # Errors
/// Database errors.
pub async fn errors_by_reason(pool: &PgPool) -> Result<Vec<(String, String, i64)>, StoreError> {
    Ok(sqlx::query_as(
        concat!("SELECT coalesce(t.sender_address, s.address), left(coalesce(m.last_error, ''), 120), count(*) \
         FROM messages m \
         LEFT JOIN tenants t ON t.id = m.tenant_id \
         LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
         WHERE m.status = ", sql_status!(Error), " GROUP BY 1, 2 ORDER BY 1, 3 DESC"),
    )
    .fetch_all(pool)
    .await?)
}

/// `SCHEDULED` and `SENDING` rows, across every sender (the `mail_worker_messages` gauge's
/// unfinished statuses, every refresh): two counts over their partial indexes (`messages_due_v2`,
/// `messages_sending_at`), so the cost follows the backlog, never the finished history.
///
/// # Errors
/// Database errors.
pub(crate) async fn count_unfinished(pool: &PgPool) -> Result<Vec<(String, i64)>, StoreError> {
    /// One status's row: (status, count), over the partial index that status has.
    macro_rules! count_of {
        ($status:ident) => {
            concat!(
                "SELECT ",
                sql_status!($status),
                ", count(*) FROM messages WHERE status = ",
                sql_status!($status)
            )
        };
    }
    Ok(sqlx::query_as(concat!(
        count_of!(Scheduled),
        " UNION ALL ",
        count_of!(Sending)
    ))
    .fetch_all(pool)
    .await?)
}

/// `SENT`, `ERROR`, `BOUNCED` and `DELIVERED` rows, across every sender: one `GROUP BY` over the finished
/// rows, whose cost grows with the history kept (`MAIL_RETENTION`), so the gauge runs it
/// rarely (`daemon::gauges`).
///
/// # Errors
/// Database errors.
pub(crate) async fn count_finished(pool: &PgPool) -> Result<Vec<(String, i64)>, StoreError> {
    Ok(sqlx::query_as(concat!(
        "SELECT status, count(*) FROM messages WHERE status IN (",
        sql_finished!(),
        ") GROUP BY status"
    ))
    .fetch_all(pool)
    .await?)
}
