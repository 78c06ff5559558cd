//! `messages` and `message_attachments`: inserting a campaign, claiming due rows, the
//! status transitions of one send, lease recovery and the status report.
//!
//! Transitions: `SCHEDULED → SENDING` ([`claim_due`], one statement that also loads the rows
//! and their attachments), `SENDING → SENT | ERROR | SCHEDULED` ([`mark_sent_many`],
//! [`mark_error`], [`reschedule`], [`release_unstarted`]), and back to `SCHEDULED` from stale
//! `SENDING` rows ([`recover_stale_sending`]).
//!
//! Row writes of a sent message: the claim and the outcome, two. What the Graph mailer notes
//! before a request that may deliver ([`Attempted`]: when, and the draft's id) is written with
//! the outcome; a row a crash left `SENDING` is marked as possibly sent by lease recovery.
//!
//! Fenced: every claim gives the row a fresh `claim_token`, and every write of that attempt (its
//! outcome, [`renew_lease`], [`release_unstarted`]) matches it ([`Fence`]). An attempt whose
//! lease another claim took over writes nothing. Times are PostgreSQL's: `scheduled_on` is
//! `now()` plus a wait, `send_attempted_at` is `now()` minus how long ago the attempt noted it.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::StoreError;
use crate::domain::{
    Attachment, BodyContentType, Header, MailboxAddress, MessageStatus, OutgoingMail, Recipient,
    sql_status,
};

/// Who sends a message: exactly one of `tenant_id` / `system_mailbox_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SenderRef {
    /// `messages.tenant_id`.
    Tenant(Uuid),
    /// `messages.system_mailbox_id`.
    SystemMailbox(Uuid),
}

impl SenderRef {
    /// The tenant's or system mailbox's id.
    pub(crate) fn id(self) -> Uuid {
        match self {
            Self::Tenant(id) | Self::SystemMailbox(id) => id,
        }
    }
}

/// A message to insert (what `mail-worker enqueue` or a producer writes).
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// `messages.id`; re-inserting the same id is a no-op.
    pub id: Uuid,
    /// Its sender.
    pub sender: SenderRef,
    /// `To`.
    pub to: Vec<Recipient>,
    /// `Cc`.
    pub cc: Vec<Recipient>,
    /// `Bcc`.
    pub bcc: Vec<Recipient>,
    /// Subject.
    pub subject: String,
    /// Body format.
    pub body_content_type: BodyContentType,
    /// Body.
    pub body: String,
    /// Custom headers.
    pub headers: Vec<Header>,
    /// Attachments.
    pub attachments: Vec<Attachment>,
    /// When to send; `None` = now.
    pub scheduled_on: Option<DateTime<Utc>>,
}

/// Inserts `messages` in one transaction, skipping ids that already exist. Returns how many
/// were new.
///
/// # Errors
/// Database errors; nothing is inserted then.
pub(crate) async fn insert(pool: &PgPool, messages: &[NewMessage]) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    let mut inserted = 0;
    for m in messages {
        let (tenant, mailbox) = match m.sender {
            SenderRef::Tenant(id) => (Some(id), None),
            SenderRef::SystemMailbox(id) => (None, Some(id)),
        };
        let done = sqlx::query(
            "INSERT INTO messages (id, tenant_id, system_mailbox_id, to_recipients, cc_recipients, \
                 bcc_recipients, subject, body_content_type, body, headers, scheduled_on) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, coalesce($11, now())) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(m.id)
        .bind(tenant)
        .bind(mailbox)
        .bind(sqlx::types::Json(&m.to))
        .bind(sqlx::types::Json(&m.cc))
        .bind(sqlx::types::Json(&m.bcc))
        .bind(&m.subject)
        .bind(m.body_content_type.as_str())
        .bind(&m.body)
        .bind(sqlx::types::Json(&m.headers))
        .bind(m.scheduled_on)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            continue;
        }
        inserted += 1;
        for (position, a) in m.attachments.iter().enumerate() {
            sqlx::query(
                "INSERT INTO message_attachments (message_id, position, name, content_type, content) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(m.id)
            .bind(position as i32)
            .bind(&a.name)
            .bind(&a.content_type)
            .bind(&a.content)
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(inserted)
}

/// What a send needs of a message row (the `RETURNING` list of [`claim_due`], on the row
/// aliased `m`): its columns and its attachments in `position`
/// order as three parallel arrays, so one statement loads a message and its attachments.
macro_rules! sending_columns {
    () => {
        " RETURNING m.id, m.tenant_id, m.system_mailbox_id, m.to_recipients, m.cc_recipients, \
             m.bcc_recipients, m.subject, m.body_content_type, m.body, m.headers, m.attempts, \
             m.deferrals, m.throttles, m.first_attempt_at, m.graph_draft_id, \
             m.send_attempted_at, m.claim_token, now() AS claimed_at, \
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

/// One attempt's hold on its row: the message and the `claim_token` its claim set. Every write
/// of the attempt matches both, so it changes nothing once lease recovery and a new claim took
/// the row over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// `messages.id`.
    pub id: Uuid,
    /// `messages.claim_token` as the claim set it.
    pub token: Uuid,
}

/// The senders (tenant or system mailbox ids) with due `SCHEDULED` rows, longest-waiting
/// first: the round that [`claim_due_from`] claims across. One aggregate over the due rows, so
/// a replica runs it once per round, not once per claim.
///
/// # Errors
/// Database errors.
pub(crate) async fn due_senders(pool: &PgPool) -> Result<Vec<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(concat!(
        "SELECT coalesce(system_mailbox_id, tenant_id) FROM messages WHERE status = ",
        sql_status!(Scheduled),
        " AND scheduled_on <= now() GROUP BY 1 ORDER BY min(scheduled_on)"
    ))
    .fetch_all(pool)
    .await?)
}

/// Claims up to `limit` due `SCHEDULED` rows of `senders`, at most `share` of each, in the
/// senders' order, in one statement: `FOR UPDATE SKIP LOCKED` (replicas never claim the same
/// row nor wait on each other), straight to `SENDING` with `sending_at = now()` — the lease
/// that lease recovery ([`recover_stale_sending`]) counts from — returned with their
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
    // Within a sender, rows deferred before (a booked slot come due, a Retry-After passed) go
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
                 ORDER BY (deferrals = 0), scheduled_on \
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
/// Database errors (lease recovery then takes them after `SEND_LEASE_MS`).
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
    /// The sender.
    pub sender: SenderRef,
    /// `to_recipients`.
    pub to: Value,
    /// `cc_recipients`.
    pub cc: Value,
    /// `bcc_recipients`.
    pub bcc: Value,
    /// `subject`.
    pub subject: String,
    /// `body_content_type`.
    pub body_content_type: String,
    /// `body`.
    pub body: String,
    /// `headers`.
    pub headers: Value,
    /// Attachments in `position` order.
    pub attachments: Vec<Attachment>,
    /// `attempts`, including the one now starting.
    pub attempts: i32,
    /// `deferrals` so far.
    pub deferrals: i32,
    /// `throttles` so far: provider throttling without `Retry-After` (its backoff's exponent).
    pub throttles: i32,
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
        fn list<T: serde::de::DeserializeOwned>(column: &str, v: &Value) -> Result<Vec<T>, String> {
            serde_json::from_value(v.clone())
                .map_err(|e| format!("messages.{column} is not a valid list: {e}"))
        }
        Ok(OutgoingMail {
            id: self.id,
            from,
            to: list("to_recipients", &self.to)?,
            cc: list("cc_recipients", &self.cc)?,
            bcc: list("bcc_recipients", &self.bcc)?,
            subject: self.subject.clone(),
            body_content_type: BodyContentType::parse(&self.body_content_type).ok_or_else(
                || {
                    format!(
                        "messages.body_content_type {:?} is not text or html",
                        self.body_content_type
                    )
                },
            )?,
            body: self.body.clone(),
            headers: list("headers", &self.headers)?,
            attachments: self.attachments.clone(),
        })
    }
}

/// A row returned with [`sending_columns`] as a [`StoredMessage`].
fn stored_message(row: &sqlx::postgres::PgRow) -> Result<StoredMessage, StoreError> {
    let id: Uuid = row.try_get("id")?;
    let sender = match (
        row.try_get::<Option<Uuid>, _>("tenant_id")?,
        row.try_get::<Option<Uuid>, _>("system_mailbox_id")?,
    ) {
        (Some(t), None) => SenderRef::Tenant(t),
        (None, Some(m)) => SenderRef::SystemMailbox(m),
        _ => {
            return Err(StoreError::BadRow {
                table: "messages",
                problem: format!("message {id} has not exactly one sender"),
            });
        }
    };
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
        to: row.try_get("to_recipients")?,
        cc: row.try_get("cc_recipients")?,
        bcc: row.try_get("bcc_recipients")?,
        subject: row.try_get("subject")?,
        body_content_type: row.try_get("body_content_type")?,
        body: row.try_get("body")?,
        headers: row.try_get("headers")?,
        attachments,
        attempts: row.try_get("attempts")?,
        deferrals: row.try_get("deferrals")?,
        throttles: row.try_get("throttles")?,
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

/// `SENDING → SENT` of many messages in one statement, each with `last_error = note` (what a
/// person should know although it went, e.g. `outcome unknown; resent`), `NULL` without one.
/// Returns the ids written: those still held by their [`Fence`] (the others were taken over by
/// lease recovery and a new claim meanwhile).
///
/// # Errors
/// Database errors; nothing is written then.
pub(crate) async fn mark_sent_many(
    pool: &PgPool,
    sent: &[(Fence, Option<String>)],
) -> Result<Vec<Uuid>, StoreError> {
    let ids: Vec<Uuid> = sent.iter().map(|(f, _)| f.id).collect();
    let tokens: Vec<Uuid> = sent.iter().map(|(f, _)| f.token).collect();
    let notes: Vec<Option<&str>> = sent.iter().map(|(_, note)| note.as_deref()).collect();
    Ok(sqlx::query_scalar(concat!(
        "UPDATE messages m SET status = ",
        sql_status!(Sent),
        ", sent_at = now(), last_error = s.note, updated_at = now() \
         FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS s(id, token, note) \
         WHERE m.id = s.id AND m.claim_token = s.token AND m.status = ",
        sql_status!(Sending),
        " RETURNING m.id"
    ))
    .bind(&ids)
    .bind(&tokens)
    .bind(&notes)
    .fetch_all(pool)
    .await?)
}

/// Renews the lease of the attempt holding `fence`: `sending_at = now()`, so lease recovery
/// leaves a long attempt alone while it progresses. Returns false when the row is no longer
/// this attempt's (recovered, or claimed again): the attempt must stop.
///
/// # Errors
/// Database errors.
pub(crate) async fn renew_lease(pool: &PgPool, fence: Fence) -> Result<bool, StoreError> {
    let done = sqlx::query(concat!(
        "UPDATE messages SET sending_at = now() \
         WHERE id = $1 AND claim_token = $2 AND status = ",
        sql_status!(Sending)
    ))
    .bind(fence.id)
    .bind(fence.token)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The row's status and `claim_token` now (for the log line of a stale attempt).
///
/// # Errors
/// Database errors.
pub(crate) async fn holder(
    pool: &PgPool,
    id: Uuid,
) -> Result<Option<(String, Option<Uuid>)>, StoreError> {
    Ok(
        sqlx::query_as("SELECT status, claim_token FROM messages WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?,
    )
}

/// What an attempt noted before a request that may deliver (the mailer's journal), written with
/// its outcome: when (as `now()` minus the time since), and the Graph draft that request sends
/// (`GRAPH_SEND_MODE=draft`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attempted {
    /// When it was noted; `send_attempted_at` becomes PostgreSQL's `now()` minus the time since.
    pub at: Instant,
    /// `graph_draft_id`, when the attempt made or found a draft the row does not hold yet.
    pub draft_id: Option<String>,
}

/// `SENDING → ERROR` with `last_error` and what the attempt noted. Returns whether the row was
/// still the attempt's (`fence`).
///
/// # Errors
/// Database errors.
pub(crate) async fn mark_error(
    pool: &PgPool,
    fence: Fence,
    error: &str,
    attempted: Option<&Attempted>,
) -> Result<bool, StoreError> {
    let left = leave_sending(pool, fence, Leave::Error, error, attempted).await?;
    Ok(left.is_some())
}

/// Why a message goes back to `SCHEDULED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reschedule {
    /// A rate-limit deferral, a pause or an unconfirmed send: `deferrals + 1`, the attempt is
    /// given back (`attempts - 1`).
    Deferral,
    /// Provider throttling: a deferral that also counts `throttles + 1` (the exponent of the
    /// backoff when no `Retry-After` came).
    Throttle,
    /// A transient failure: the attempt stays charged.
    Retry,
}

/// Why a `SCHEDULED` row waits (`messages.wait_reason`).
pub(crate) mod wait_reason {
    /// The sender is paused (credentials missing or refused).
    pub(crate) const PAUSED: &str = "paused";
    /// A transient failure's backoff.
    pub(crate) const RETRY: &str = "retry";
    /// An earlier send's outcome is not confirmed yet.
    pub(crate) const UNCONFIRMED: &str = "unconfirmed";
    /// The provider's `Retry-After` (or backoff) for the mailbox.
    pub(crate) const COOLDOWN: &str = "cooldown";
}

/// `SENDING → SCHEDULED` at PostgreSQL's `now()` + `wait` (or at `wait`'s end on a test's
/// virtual clock, [`Wait::virtual_at`]), recording why (`reason`, a [`wait_reason`] or a
/// limiter's deny reason), `last_error` and what the attempt noted. Returns the new
/// `scheduled_on`, or `None` when the row is no longer the attempt's.
///
/// # Errors
/// Database errors.
pub(crate) async fn reschedule(
    pool: &PgPool,
    fence: Fence,
    (wait, kind, reason): (Wait, Reschedule, &str),
    last_error: &str,
    attempted: Option<&Attempted>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let to = Leave::Scheduled { wait, kind, reason };
    leave_sending(pool, fence, to, last_error, attempted).await
}

/// How long a rescheduled row waits: from PostgreSQL's `now()`, or until `virtual_at` (a
/// test's virtual clock, [`crate::clock::Clock::is_virtual`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    /// From PostgreSQL's `now()`.
    pub wait: Duration,
    /// The end of the wait on a virtual clock, which then decides instead.
    pub virtual_at: Option<DateTime<Utc>>,
}

/// Where [`leave_sending`] takes a row.
enum Leave<'a> {
    Error,
    Scheduled {
        wait: Wait,
        kind: Reschedule,
        reason: &'a str,
    },
}

/// `SENDING → ERROR | SCHEDULED` (at `now()` + its wait; a deferral counted and its attempt
/// given back), with `last_error` and what the attempt noted, if the row is still `fence`'s. One
/// statement for every outcome but `SENT` (batched: [`mark_sent_many`]). Returns the row's
/// `scheduled_on` when it was written.
async fn leave_sending(
    pool: &PgPool,
    fence: Fence,
    to: Leave<'_>,
    last_error: &str,
    attempted: Option<&Attempted>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let (status, wait, kind, reason) = match to {
        Leave::Error => (MessageStatus::Error, None, None, None),
        Leave::Scheduled { wait, kind, reason } => (
            MessageStatus::Scheduled,
            Some(wait),
            Some(kind),
            Some(reason),
        ),
    };
    let deferral = matches!(kind, Some(Reschedule::Deferral | Reschedule::Throttle));
    let throttle = kind == Some(Reschedule::Throttle);
    Ok(sqlx::query_scalar(concat!(
        "UPDATE messages SET status = $3, \
             scheduled_on = coalesce($11, now() + $4, scheduled_on), \
             last_error = $5, deferrals = deferrals + CASE WHEN $6 THEN 1 ELSE 0 END, \
             attempts = greatest(attempts - CASE WHEN $6 THEN 1 ELSE 0 END, 0), \
             throttles = throttles + CASE WHEN $7 THEN 1 ELSE 0 END, wait_reason = $8, \
             send_attempted_at = coalesce(now() - $9, send_attempted_at), \
             graph_draft_id = coalesce($10, graph_draft_id), updated_at = now() \
         WHERE id = $1 AND claim_token = $2 AND status = ",
        sql_status!(Sending),
        " RETURNING scheduled_on"
    ))
    .bind(fence.id)
    .bind(fence.token)
    .bind(status.as_str())
    .bind(wait.map(|w| interval(w.wait)))
    .bind(last_error)
    .bind(deferral)
    .bind(throttle)
    .bind(reason)
    .bind(attempted.map(|a| interval(a.at.elapsed())))
    .bind(attempted.and_then(|a| a.draft_id.as_deref()))
    .bind(wait.and_then(|w| w.virtual_at))
    .fetch_optional(pool)
    .await?)
}

/// `d` as a PostgreSQL interval.
fn interval(d: Duration) -> sqlx::postgres::types::PgInterval {
    sqlx::postgres::types::PgInterval {
        months: 0,
        days: 0,
        microseconds: i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
    }
}

/// The `SCHEDULED` messages of sender `sender` (a tenant or system mailbox id) that wait for
/// its pause (`wait_reason = 'paused'`) become due now. Returns how many.
///
/// # Errors
/// Database errors.
pub(crate) async fn resume_paused(pool: &PgPool, sender: Uuid) -> Result<u64, StoreError> {
    let done = sqlx::query(concat!(
        "UPDATE messages SET scheduled_on = now(), wait_reason = NULL, updated_at = now() \
         WHERE status = ",
        sql_status!(Scheduled),
        " AND coalesce(system_mailbox_id, tenant_id) = $1 \
           AND wait_reason = 'paused' AND scheduled_on > now()"
    ))
    .bind(sender)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Rows in status `$from` whose `$since` column is older than the lease (`$1`) back to
/// `SCHEDULED`, due now, with `$set` (a `SET` item list ending in `last_error`).
macro_rules! recover_stale {
    ($from:ident, $since:literal, $set:literal) => {
        concat!(
            "UPDATE messages SET status = ",
            sql_status!(Scheduled),
            ", scheduled_on = now(), updated_at = now(), ",
            $set,
            " WHERE status = ",
            sql_status!($from),
            " AND ",
            $since,
            " < now() - $1 RETURNING id"
        )
    };
}

/// Runs a [`recover_stale`] statement with `lease`; returns the ids it rescheduled.
async fn recover(
    pool: &PgPool,
    statement: &'static str,
    lease: Duration,
) -> Result<Vec<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(statement)
        .bind(interval(lease))
        .fetch_all(pool)
        .await?)
}

/// Rows `SENDING` for longer than `lease` (the sending replica died; the outcome is unknown)
/// back to `SCHEDULED`, due now, marked as possibly sent: `send_attempted_at` = now, the latest
/// a request of the lost attempt could have been written (its notes died with it). Their next
/// attempt sees that and checks Graph before it sends again (docs/delivery.md).
/// Returns their ids.
///
/// # Errors
/// Database errors.
pub async fn recover_stale_sending(
    pool: &PgPool,
    lease: Duration,
) -> Result<Vec<Uuid>, StoreError> {
    let statement = recover_stale!(
        Sending,
        "sending_at",
        "send_attempted_at = now(), \
         last_error = 'send lease expired: outcome unknown, rescheduled'"
    );
    recover(pool, statement, lease).await
}
