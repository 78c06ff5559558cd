//! The claim: due `SCHEDULED` rows straight to `SENDING`, fairly across senders, loaded with
//! their attachments in the same statement ([`StoredMessage`]); and the give-back of claimed
//! rows a shutdown never started.

use std::time::Instant;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::{Fence, SenderRef};
use crate::{
    domain::{
        Attachment, BodyContentType, MailboxAddress, MessageContent, OutgoingMail, Priority,
        sql_status,
    },
    store::StoreError,
};

/// What a send needs of a message row (the `RETURNING` list of [`claim_due`], on the row
/// aliased `m`): its columns and its attachments in `position`
/// order as three parallel arrays, so one statement loads a message and its attachments.
macro_rules! sending_columns {
    () => {
        " RETURNING m.id, m.tenant_id, m.system_mailbox_id, m.to_recipients, m.cc_recipients, \
             m.bcc_recipients, m.subject, m.body_content_type, m.body, m.headers, m.attempts, \
             m.deferrals, m.throttles, m.first_attempt_at, m.graph_draft_id, \
             m.send_attempted_at, m.claim_token, m.priority, m.sender_pool_id, m.campaign_id, \
             m.pool_placed_at IS NOT NULL AS pool_placed, m.send_by, now() AS claimed_at, \
             ARRAY(SELECT a.name FROM message_attachments a WHERE a.message_id = m.id \
                   ORDER BY a.position) AS attachment_names, \
             ARRAY(SELECT a.content_type FROM message_attachments a WHERE a.message_id = m.id \
                   ORDER BY a.position) AS attachment_content_types, \
             ARRAY(SELECT a.content FROM message_attachments a WHERE a.message_id = m.id \
                   ORDER BY a.position) AS attachment_contents"
    };
}

/// The `SET` list of a claim: `SENDING` with its lease from now (`sending_at`) and a fresh
/// `claim_token`, `queued_at` = when it was claimed, one more attempt, no wait reason.
macro_rules! claim_set {
    () => {
        concat!(
            " SET status = ",
            sql_status!(Sending),
            ", queued_at = now(), sending_at = now(), attempts = m.attempts + 1, \
             claim_token = gen_random_uuid(), wait_reason = NULL, \
             first_attempt_at = coalesce(m.first_attempt_at, now()), updated_at = now()"
        )
    };
}

/// The senders (tenant or system mailbox ids) with due `SCHEDULED` rows, longest-waiting
/// first (by their oldest due row): the round that [`claim_due_from`] claims across. A replica
/// runs it once per round, not once per claim. Each known sender (the `system_mailboxes` and
/// `tenants` rows; the foreign keys keep every row's sender among them) probes
/// `messages_scheduled_by_sender` for its oldest due row, `LIMIT 1`: a few buffers a sender,
/// whatever the number of due rows and the history kept (an aggregate over the due rows read
/// every due row's page: docs/decisions/0024-claim-round-buffers.md).
///
/// # Errors
/// Database errors.
pub(crate) async fn due_senders(pool: &PgPool) -> Result<Vec<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(concat!(
        "SELECT s.id FROM (SELECT id FROM system_mailboxes UNION ALL SELECT id FROM tenants) s \
         CROSS JOIN LATERAL ( \
             SELECT m.scheduled_on FROM messages m \
             WHERE coalesce(m.system_mailbox_id, m.tenant_id) = s.id AND m.status = ",
        sql_status!(Scheduled),
        " AND m.scheduled_on <= now() ORDER BY m.scheduled_on LIMIT 1 \
         ) oldest ORDER BY oldest.scheduled_on"
    ))
    .fetch_all(pool)
    .await?)
}

/// Claims up to `limit` due `SCHEDULED` rows of `senders`, at most `share` of each, in the
/// senders' order, in one statement: `FOR UPDATE SKIP LOCKED` (replicas never claim the same
/// row nor wait on each other), straight to `SENDING` with `sending_at = now()` — the lease
/// that lease recovery ([`super::recover_stale_sending`]) counts from — returned with their
/// attachments.
///
/// # Errors
/// Database errors; nothing is claimed then.
pub(crate) async fn claim_due_from(
    pool: &PgPool,
    senders: &[Uuid],
    share: i64,
    limit: i64,
) -> Result<Vec<StoredMessage>, StoreError> {
    // Within a sender, `high` rows first, then `normal`, then `bulk` (the rank expression is
    // the one `messages_due_by_sender` indexes, so this stays an index scan); a lower row is
    // claimed whenever no higher one is due. Within a priority, rows deferred before (a booked slot come due, a Retry-After passed) go
    // first, then the oldest: a booked row never waits behind a backlog never tried, which
    // would let its slot pass unused (measured: 10,000 unbooked rows kept the booked ones
    // waiting 5.6 min). `SKIP LOCKED` inside the per-sender subquery lets two replicas claim
    // at once without waiting on each other or taking the same row.
    let rows = sqlx::query(concat!(
        "WITH picked AS ( \
             SELECT claimed.id FROM unnest($1::uuid[]) AS d(sender) \
             CROSS JOIN LATERAL ( \
                 SELECT id FROM messages \
                 WHERE coalesce(system_mailbox_id, tenant_id) = d.sender AND status = ",
        sql_status!(Scheduled),
        " AND scheduled_on <= now() \
                 ORDER BY (CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END), \
                     (deferrals = 0), scheduled_on \
                 LIMIT $2 FOR UPDATE SKIP LOCKED \
             ) claimed \
             LIMIT $3 \
         ) \
         UPDATE messages m",
        claim_set!(),
        " FROM picked WHERE m.id = picked.id",
        sending_columns!()
    ))
    .bind(senders)
    .bind(share)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter().map(stored_message).collect()
}

/// Claims up to `limit` due rows fairly across every sender with due rows (each an equal share,
/// longest-waiting sender first): [`due_senders`], then [`claim_due_from`].
///
/// # Errors
/// Database errors.
pub async fn claim_due(pool: &PgPool, limit: i64) -> Result<Vec<StoredMessage>, StoreError> {
    let senders = due_senders(pool).await?;
    if senders.is_empty() || limit <= 0 {
        return Ok(Vec::new());
    }
    let share = (limit + senders.len() as i64 - 1) / senders.len() as i64;
    claim_due_from(pool, &senders, share, limit).await
}

/// Claimed rows that never started (a shutdown stopped them while they waited for a worker
/// slot) back to `SCHEDULED`, due as before, the claim's attempt given back. Returns how many.
///
/// # Errors
/// Database errors (lease recovery then takes them after `SEND_LEASE`).
pub(crate) async fn release_unstarted(pool: &PgPool, fences: &[Fence]) -> Result<u64, StoreError> {
    let ids: Vec<Uuid> = fences.iter().map(|f| f.id).collect();
    let tokens: Vec<Uuid> = fences.iter().map(|f| f.token).collect();
    let done = sqlx::query(concat!(
        "UPDATE messages m SET status = ",
        sql_status!(Scheduled),
        ", attempts = greatest(m.attempts - 1, 0), updated_at = now() \
         FROM unnest($1::uuid[], $2::uuid[]) AS f(id, token) \
         WHERE m.id = f.id AND m.claim_token = f.token AND m.status = ",
        sql_status!(Sending)
    ))
    .bind(&ids)
    .bind(&tokens)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// A message row as loaded for sending. Recipient and header lists stay JSON until
/// [`StoredMessage::outgoing`]: a producer's malformed list fails that one message, not the
/// worker.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    /// `id`.
    pub id: Uuid,
    /// The sender (a pooled message not placed yet: the member it waits under).
    pub sender: SenderRef,
    /// `sender_pool_id`: the pool it was given to, and whether it is placed on its member
    /// (`pool_placed_at`); `None` for a message of one sender.
    pub pool: Option<(Uuid, bool)>,
    /// `send_by`: the line's `by`, when it should have been sent by (a `forecastMisses`
    /// pool's overflow judges it).
    pub send_by: Option<DateTime<Utc>>,
    /// What it says and to whom, or a sentence naming the column that does not hold what it
    /// should (the attempt then ends the message with that error).
    pub content: Result<MessageContent, String>,
    /// `attempts`, including the one now starting.
    pub attempts: i32,
    /// `deferrals` so far.
    pub deferrals: i32,
    /// `priority`.
    pub priority: Priority,
    /// `throttles` so far: provider throttling without `Retry-After` (its backoff's exponent).
    pub throttles: i32,
    /// `campaign_id`: an operator's suspension of the campaign defers it (ADR 0048).
    pub campaign: Option<String>,
    /// `first_attempt_at`: when it was first tried (`MAIL_RETRY_FOR` counts from it).
    pub first_attempt_at: DateTime<Utc>,
    /// `graph_draft_id`: the draft created by an earlier attempt, if any.
    pub graph_draft_id: Option<String>,
    /// `send_attempted_at`: when an earlier attempt wrote a request that may have delivered it.
    pub send_attempted_at: Option<DateTime<Utc>>,
    /// The claim's hold on the row (`claim_token`).
    pub fence: Fence,
    /// PostgreSQL's `now()` at the claim, and when this process read it: PostgreSQL's clock as
    /// this attempt sees it ([`Self::db_now`]).
    pub claimed_at: (DateTime<Utc>, Instant),
}

impl StoredMessage {
    /// PostgreSQL's clock now, as far as this attempt knows it: the claim's `now()` plus the
    /// time since this process read it. Row timestamps are compared with this, never with the
    /// replica's wall clock.
    pub fn db_now(&self) -> DateTime<Utc> {
        let (at, read) = self.claimed_at;
        at + chrono::Duration::from_std(read.elapsed()).unwrap_or_default()
    }

    /// Builds the mail to send from `from`.
    ///
    /// # Errors
    /// A sentence naming the column that does not hold what it should.
    pub fn outgoing(&self, from: MailboxAddress) -> Result<OutgoingMail, String> {
        Ok(OutgoingMail {
            id: self.id,
            from,
            content: self.content.clone()?,
            priority: self.priority,
        })
    }
}

/// The content columns of a row returned with [`sending_columns`], parsed: a sentence naming
/// the column that does not hold what it should, if one does not.
fn content(
    row: &sqlx::postgres::PgRow,
    attachments: Vec<Attachment>,
) -> Result<Result<MessageContent, String>, StoreError> {
    fn list<T: serde::de::DeserializeOwned>(column: &str, v: Value) -> Result<Vec<T>, String> {
        serde_json::from_value(v).map_err(|e| format!("messages.{column} is not a valid list: {e}"))
    }
    let column = |name| row.try_get::<Value, _>(name);
    let (to, cc, bcc, headers) = (
        column("to_recipients")?,
        column("cc_recipients")?,
        column("bcc_recipients")?,
        column("headers")?,
    );
    let raw_type: String = row.try_get("body_content_type")?;
    let (subject, body) = (row.try_get("subject")?, row.try_get("body")?);
    let parse = || {
        Ok(MessageContent {
            to: list("to_recipients", to)?,
            cc: list("cc_recipients", cc)?,
            bcc: list("bcc_recipients", bcc)?,
            subject,
            body_content_type: BodyContentType::parse(&raw_type).ok_or_else(|| {
                format!("messages.body_content_type {raw_type:?} is not text or html")
            })?,
            body,
            headers: list("headers", headers)?,
            attachments,
        })
    };
    Ok(parse())
}

/// A row returned with [`sending_columns`] as a [`StoredMessage`].
fn stored_message(row: &sqlx::postgres::PgRow) -> Result<StoredMessage, StoreError> {
    let id: Uuid = row.try_get("id")?;
    let sender = SenderRef::of_row(row, "messages", || format!("message {id}"))?;
    let names: Vec<String> = row.try_get("attachment_names")?;
    let content_types: Vec<String> = row.try_get("attachment_content_types")?;
    let contents: Vec<Vec<u8>> = row.try_get("attachment_contents")?;
    let attachments = names
        .into_iter()
        .zip(content_types)
        .zip(contents)
        .map(|((name, content_type), content)| Attachment {
            name,
            content_type,
            content,
        })
        .collect();
    Ok(StoredMessage {
        id,
        sender,
        pool: row
            .try_get::<Option<Uuid>, _>("sender_pool_id")?
            .map(|id| row.try_get("pool_placed").map(|placed| (id, placed)))
            .transpose()?,
        send_by: row.try_get("send_by")?,
        content: content(row, attachments)?,
        attempts: row.try_get("attempts")?,
        deferrals: row.try_get("deferrals")?,
        priority: row
            .try_get::<String, _>("priority")?
            .parse()
            .map_err(|problem: String| StoreError::BadRow {
                table: "messages",
                problem: format!("message {id}: priority {problem}"),
            })?,
        throttles: row.try_get("throttles")?,
        campaign: row.try_get("campaign_id")?,
        first_attempt_at: row.try_get("first_attempt_at")?,
        graph_draft_id: row.try_get("graph_draft_id")?,
        send_attempted_at: row.try_get("send_attempted_at")?,
        fence: Fence {
            id,
            token: row.try_get("claim_token")?,
        },
        claimed_at: (row.try_get("claimed_at")?, Instant::now()),
    })
}
