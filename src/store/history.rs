//! The send history the limiter rebuilds budgets from when its Redis comes back empty
//! ([`crate::rate_limit::SendHistory`]): what each mailbox sent in the last 24 h, and what
//! every mailbox of a Graph tenant sent outside the tenant's accepted domains, and the booked
//! backlog whose bookings a seed restores (the tenant's external recipients of its bookings
//! counted with what it sent, at their slots).

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::{
    domain::{MailboxAddress, sql_status},
    rate_limit::{
        BookedRow, LimitPause, PauseScope, SendHistory, SentRecord, paced::BOOKING_GRACE,
    },
};
use uuid::Uuid;

/// [`SendHistory`] over the `messages` table.
#[derive(Debug, Clone)]
pub struct PgSendHistory {
    pool: PgPool,
}

impl PgSendHistory {
    /// History read from `pool`.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

/// A `messages m` row's recipients (to + cc + bcc), as SQL.
macro_rules! row_recipients {
    () => {
        "(jsonb_array_length(m.to_recipients) \
            + jsonb_array_length(m.cc_recipients) \
            + jsonb_array_length(m.bcc_recipients))"
    };
}

/// The `messages m` rows the mailbox `$2` sent after `$1`, as SQL (`FROM … WHERE …`).
macro_rules! sent_by_mailbox {
    () => {
        concat!(
            " FROM messages m \
             WHERE m.status = ",
            sql_status!(Sent),
            " AND m.sent_at > $1 \
               AND coalesce(m.system_mailbox_id, m.tenant_id) IN ( \
                   SELECT id FROM system_mailboxes WHERE address = $2 \
                   UNION ALL SELECT id FROM tenants WHERE sender_address = $2)"
        )
    };
}

/// What the mailbox `$2` sent after `$1`: (sent at, recipients).
const SENT_BY_MAILBOX: &str = concat!(
    "SELECT m.sent_at, ",
    row_recipients!(),
    "::int4",
    sent_by_mailbox!(),
    " ORDER BY m.sent_at"
);

/// The recipients the mailbox `$2` sent to after `$1`: [`SENT_BY_MAILBOX`]'s sum, one row.
const RECIPIENTS_BY_MAILBOX: &str = concat!(
    "SELECT coalesce(sum(",
    row_recipients!(),
    "), 0)::int8",
    sent_by_mailbox!()
);

/// What the senders of the Graph tenant `$2` sent after `$1` outside its accepted domains:
/// (sent at, external recipients), only rows with some; and their booked rows (SCHEDULED, a
/// booking's wait reason) whose slot passed less than `$3` seconds (the booking grace) before
/// `$1` + 24 h (the seed's now), at their slot: the seed of each mailbox restores those
/// bookings, this one counts their external recipients.
const SENT_OUTSIDE_TENANT: &str = concat!(
    "WITH senders AS ( \
         SELECT id, accepted_domains FROM system_mailboxes \
         WHERE lower(graph_tenant_id) = lower($2) \
         UNION ALL SELECT id, accepted_domains FROM tenants \
         WHERE lower(graph_tenant_id) = lower($2)), \
     accepted AS ( \
         SELECT coalesce(array_agg(DISTINCT d), '{}') AS domains \
         FROM senders, unnest(accepted_domains) AS d), \
     sent AS ( \
         SELECT m.sent_at, ( \
             SELECT count(*) FROM jsonb_array_elements( \
                 m.to_recipients || m.cc_recipients || m.bcc_recipients) AS r \
             WHERE NOT lower(rtrim(substring(r->>'address' FROM '@([^@]*)$'), '.')) \
                 = ANY(accepted.domains))::int4 AS external \
         FROM messages m, accepted \
         WHERE m.status = ",
    sql_status!(Sent),
    " AND m.sent_at > $1 \
           AND coalesce(m.system_mailbox_id, m.tenant_id) IN (SELECT id FROM senders) \
         UNION ALL \
         SELECT m.scheduled_on, ( \
             SELECT count(*) FROM jsonb_array_elements( \
                 m.to_recipients || m.cc_recipients || m.bcc_recipients) AS r \
             WHERE NOT lower(rtrim(substring(r->>'address' FROM '@([^@]*)$'), '.')) \
                 = ANY(accepted.domains))::int4 \
         FROM messages m, accepted \
         WHERE m.status = ",
    sql_status!(Scheduled),
    " AND m.wait_reason IN ('minute', 'day', 'tenant') \
           AND m.scheduled_on > $1 + interval '24 hours' - make_interval(secs => $3) \
           AND coalesce(m.system_mailbox_id, m.tenant_id) IN (SELECT id FROM senders)) \
     SELECT sent_at, external FROM sent WHERE external > 0 ORDER BY sent_at"
);

/// The booked backlog of the mailbox `$2` (Graph tenant `$3`): its `SCHEDULED` rows a booking
/// deferred (wait reason minute, day or tenant), slot after `$1`, as (id, slot, recipients,
/// external recipients, reason, priority), in slot order. A claim clears `wait_reason`, so a
/// row being sent is not among them.
const BOOKED_BY_MAILBOX: &str = concat!(
    "WITH senders AS ( \
         SELECT accepted_domains FROM system_mailboxes WHERE lower(graph_tenant_id) = lower($3) \
         UNION ALL SELECT accepted_domains FROM tenants WHERE lower(graph_tenant_id) = lower($3)), \
     accepted AS ( \
         SELECT coalesce(array_agg(DISTINCT d), '{}') AS domains \
         FROM senders, unnest(accepted_domains) AS d) \
     SELECT m.id, m.scheduled_on, ",
    row_recipients!(),
    "::int4, ( \
         SELECT count(*) FROM jsonb_array_elements( \
             m.to_recipients || m.cc_recipients || m.bcc_recipients) AS r \
         WHERE NOT lower(rtrim(substring(r->>'address' FROM '@([^@]*)$'), '.')) \
             = ANY(accepted.domains))::int4, m.wait_reason, m.priority \
     FROM messages m, accepted \
     WHERE m.status = ",
    sql_status!(Scheduled),
    " AND m.wait_reason IN ('minute', 'day', 'tenant') AND m.scheduled_on > $1 \
       AND coalesce(m.system_mailbox_id, m.tenant_id) IN ( \
           SELECT id FROM system_mailboxes WHERE address = $2 \
           UNION ALL SELECT id FROM tenants WHERE sender_address = $2) \
     ORDER BY m.scheduled_on"
);

#[async_trait::async_trait]
impl SendHistory for PgSendHistory {
    async fn sent_since(
        &self,
        mailbox: &MailboxAddress,
        since: DateTime<Utc>,
    ) -> Result<Vec<SentRecord>, String> {
        let mailbox = mailbox.as_str();
        self.records(SENT_BY_MAILBOX, since, mailbox, mailbox).await
    }

    async fn recipients_since(
        &self,
        mailbox: &MailboxAddress,
        since: DateTime<Utc>,
    ) -> Result<u32, String> {
        let sum: i64 = sqlx::query_scalar(RECIPIENTS_BY_MAILBOX)
            .bind(since)
            .bind(mailbox.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(|e| format!("reading the send history of {mailbox}: {e}"))?;
        Ok(u32::try_from(sum).unwrap_or(u32::MAX))
    }

    async fn booked_since(
        &self,
        mailbox: &MailboxAddress,
        graph_tenant: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<BookedRow>, String> {
        type Row = (Uuid, DateTime<Utc>, i32, i32, String, String);
        let rows: Vec<Row> = sqlx::query_as(BOOKED_BY_MAILBOX)
            .bind(since)
            .bind(mailbox.as_str())
            .bind(graph_tenant)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| format!("reading the booked backlog of {mailbox}: {e}"))?;
        Ok(rows
            .into_iter()
            .map(
                |(id, slot, recipients, external, reason, priority)| BookedRow {
                    message_id: id,
                    slot,
                    recipients: u32::try_from(recipients).unwrap_or(0),
                    external: u32::try_from(external).unwrap_or(0),
                    reason,
                    priority: priority.parse().unwrap_or_default(),
                },
            )
            .collect())
    }

    /// Every sender of the Graph tenant counts (the real limit is the tenant's, whether or not
    /// a sender has the budget configured: the safe reading), against the union of the accepted
    /// domains its senders list; a domain compares without case and trailing dot, as
    /// [`crate::domain::TenantBudget::external_count`] does.
    async fn external_sent_since(
        &self,
        graph_tenant: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<SentRecord>, String> {
        let whose = format!("Graph tenant {graph_tenant}");
        let rows: Vec<(DateTime<Utc>, i32)> = sqlx::query_as(SENT_OUTSIDE_TENANT)
            .bind(since)
            .bind(graph_tenant)
            .bind(BOOKING_GRACE.as_secs_f64())
            .fetch_all(&self.pool)
            .await
            .map_err(|e| format!("reading the send history of {whose}: {e}"))?;
        Ok(sent_records(rows))
    }

    async fn pauses(
        &self,
        scope: PauseScope,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<LimitPause>, String> {
        super::limit_pauses::of(&self.pool, scope, key, now)
            .await
            .map_err(|e| format!("reading the limit pauses of {key}: {e}"))
    }
}

impl PgSendHistory {
    /// The rows (sent at, recipients) `sql` selects for `$1` = `since` and `$2` = `who` as
    /// records, or what went wrong reading the history of `whose`.
    async fn records(
        &self,
        sql: &'static str,
        since: DateTime<Utc>,
        who: &str,
        whose: &str,
    ) -> Result<Vec<SentRecord>, String> {
        let rows: Vec<(DateTime<Utc>, i32)> = sqlx::query_as(sql)
            .bind(since)
            .bind(who)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| format!("reading the send history of {whose}: {e}"))?;
        Ok(sent_records(rows))
    }
}

/// Rows of (sent at, recipients) as records (a negative count, which no row holds, as 0).
fn sent_records(rows: Vec<(DateTime<Utc>, i32)>) -> Vec<SentRecord> {
    rows.into_iter()
        .map(|(sent_at, recipients)| SentRecord {
            sent_at,
            recipients: u32::try_from(recipients).unwrap_or(0),
        })
        .collect()
}
