//! The writes of one attempt, each fenced by its claim ([`Fence`]): renewing its lease, and its
//! outcome — `SENT` (batched), `ERROR` or back to `SCHEDULED` — with what it noted.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{Fence, interval};
use crate::{
    domain::{EventKind, MessageStatus, sql_status},
    store::{
        StoreError,
        events::{self, Outbox},
    },
};

/// One `SENT` to write: the attempt's [`Fence`], its note (what a person should know although
/// it went, e.g. `outcome unknown; resent`) and how many of the row's recipients were
/// suppressed just before the send (not sent to: its `sent` event does not count them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentRow {
    pub fence: Fence,
    pub note: Option<String>,
    pub suppressed: u32,
}

/// `SENDING → SENT` of many messages in one statement, each with `last_error = note`, `NULL`
/// without one. Returns the ids written: those still held by their [`Fence`] (the others were
/// taken over by lease recovery and a new claim meanwhile). With `outbox` on, their `sent`
/// events are written in the same transaction (one multi-row insert), with the recipients
/// actually sent to.
///
/// # Errors
/// Database errors; nothing is written then.
pub(crate) async fn mark_sent_many(
    pool: &PgPool,
    sent: &[SentRow],
    outbox: Outbox,
) -> Result<Vec<Uuid>, StoreError> {
    let ids: Vec<Uuid> = sent.iter().map(|r| r.fence.id).collect();
    let tokens: Vec<Uuid> = sent.iter().map(|r| r.fence.token).collect();
    let notes: Vec<Option<&str>> = sent.iter().map(|r| r.note.as_deref()).collect();
    let update = sqlx::query_scalar(concat!(
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
    .bind(&notes);
    if !outbox.is_on() {
        return Ok(update.fetch_all(pool).await?);
    }
    let mut tx = pool.begin().await?;
    let written: Vec<Uuid> = update.fetch_all(&mut *tx).await?;
    events::record(&mut *tx, EventKind::Sent, &written).await?;
    let (suppressed_ids, suppressed): (Vec<Uuid>, Vec<i32>) = sent
        .iter()
        .filter(|r| r.suppressed > 0 && written.contains(&r.fence.id))
        .map(|r| (r.fence.id, i32::try_from(r.suppressed).unwrap_or(i32::MAX)))
        .unzip();
    if !suppressed_ids.is_empty() {
        // Only the events this transaction wrote (`xid`), never an earlier send's.
        sqlx::query(
            "UPDATE events e SET recipients = greatest(e.recipients - s.n, 0) \
             FROM unnest($1::uuid[], $2::int[]) AS s(id, n) \
             WHERE e.kind = 'sent' AND e.message_id = s.id \
                 AND e.xid = pg_current_xact_id()::text::bigint",
        )
        .bind(&suppressed_ids)
        .bind(&suppressed)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(written)
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
    outbox: Outbox,
) -> Result<bool, StoreError> {
    let left = leave_sending(pool, fence, Leave::Error, (error, attempted), outbox).await?;
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
    /// `last_error` of a message waiting for its sender's pause starts with this.
    pub(crate) const PAUSED_PREFIX: &str = "sender paused: ";
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
    outbox: Outbox,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let to = Leave::Scheduled { wait, kind, reason };
    leave_sending(pool, fence, to, (last_error, attempted), outbox).await
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
/// statement for every outcome but `SENT` (batched: [`mark_sent_many`]); with `outbox` on, its
/// event (`failed`, or `deferred` once per reason) in the same transaction. Returns the row's
/// `scheduled_on` when it was written.
async fn leave_sending(
    pool: &PgPool,
    fence: Fence,
    to: Leave<'_>,
    (last_error, attempted): (&str, Option<&Attempted>),
    outbox: Outbox,
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
    let update = sqlx::query_scalar(concat!(
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
    .bind(wait.and_then(|w| w.virtual_at));
    if !outbox.is_on() {
        return Ok(update.fetch_optional(pool).await?);
    }
    let event = match status {
        MessageStatus::Error => EventKind::Failed,
        _ => EventKind::Deferred,
    };
    let mut tx = pool.begin().await?;
    let left: Option<DateTime<Utc>> = update.fetch_optional(&mut *tx).await?;
    if left.is_some() {
        events::record_one(&mut *tx, event, fence.id).await?;
    }
    tx.commit().await?;
    Ok(left)
}

/// Every `SCHEDULED` message that waits for its sender's pause (`wait_reason = 'paused'`), of
/// any sender, becomes due now. Run once by the daemon at start-up: the pauses were an earlier
/// process's (they are kept per process), and their rows would otherwise wait for its next
/// probe, up to 15 min, after the restart that was to fix them (an `env:` secret set by a
/// rollout). Returns how many.
///
/// # Errors
/// Database errors.
pub(crate) async fn resume_all_paused(pool: &PgPool) -> Result<u64, StoreError> {
    let done = sqlx::query(concat!(
        "UPDATE messages SET scheduled_on = now(), wait_reason = NULL, updated_at = now() \
         WHERE status = ",
        sql_status!(Scheduled),
        " AND wait_reason = 'paused' AND scheduled_on > now()"
    ))
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
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
