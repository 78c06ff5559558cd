//! The outbox (docs/events.md): `events` rows written in the transaction of the status change
//! they report ([`record`]), delivered to each webhook receiver in commit order
//! ([`delivery`]), listed, replayed and cleaned up for operators ([`admin`]).
//!
//! An event is read from its message row as the change left it: `campaign_id`, the sender, the
//! recipient count (To + Cc + Bcc), the reason (`wait_reason` of a `deferred` one, else
//! `last_error`) and the next slot (`scheduled_on` of a `deferred` one). So one call records
//! any kind, and the rows of a batch are one multi-row `INSERT … SELECT`.

pub mod admin;
pub mod delivery;

use sqlx::{Executor, Postgres};
use uuid::Uuid;

use super::StoreError;
use crate::domain::EventKind;

/// Whether status changes write events (`EVENTS_WEBHOOK_URL` set) or not (`off`, the default:
/// nothing is written, so the outbox costs nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Outbox {
    /// No events are written.
    #[default]
    Off,
    /// Every status change writes its event.
    On,
}

impl Outbox {
    /// Whether events are written.
    pub(crate) fn is_on(self) -> bool {
        self == Self::On
    }
}

/// Records one event of `kind` for each of `messages` (ids of rows this transaction changed),
/// in one multi-row `INSERT … SELECT`; a `deferred` event is skipped when the message already
/// has one with the same reason. A `bounced` event's reason is the NDR's DSN code and text. Returns how many were written. Run it on the transaction of
/// the change (`&mut *tx`).
///
/// # Errors
/// Database errors.
pub(crate) async fn record<'e, E>(
    executor: E,
    kind: EventKind,
    messages: &[Uuid],
) -> Result<u64, StoreError>
where
    E: Executor<'e, Database = Postgres>,
{
    if messages.is_empty() {
        return Ok(0);
    }
    let deferred = kind == EventKind::Deferred;
    let done = sqlx::query(
        "INSERT INTO events (kind, message_id, campaign_id, sender_id, recipients, reason, next_attempt_at) \
         SELECT $1, m.id, m.campaign_id, coalesce(m.system_mailbox_id, m.tenant_id), \
             jsonb_array_length(m.to_recipients) + jsonb_array_length(m.cc_recipients) \
                 + jsonb_array_length(m.bcc_recipients), \
             CASE WHEN $3 THEN coalesce(m.wait_reason, 'scheduled') \
                 WHEN $1 = 'overflowed' THEN m.overflow_reason \
                 WHEN m.status = 'BOUNCED' THEN concat_ws(' ', m.bounce_code, m.bounce_text) \
                 ELSE m.last_error END, \
             CASE WHEN $3 THEN m.scheduled_on END \
         FROM messages m WHERE m.id = ANY($2) ORDER BY m.id \
         ON CONFLICT (message_id, reason) WHERE kind = 'deferred' DO NOTHING",
    )
    .bind(kind.as_str())
    .bind(messages)
    .bind(deferred)
    .execute(executor)
    .await?;
    Ok(done.rows_affected())
}

/// [`record`] of one message.
///
/// # Errors
/// Database errors.
pub(crate) async fn record_one<'e, E>(
    executor: E,
    kind: EventKind,
    message: Uuid,
) -> Result<u64, StoreError>
where
    E: Executor<'e, Database = Postgres>,
{
    record(executor, kind, std::slice::from_ref(&message)).await
}

/// Records `kind` about one `recipient` of `message` with `reason`, once: a second call for the
/// same message, kind and recipient writes nothing. Returns how many were written (0 or 1).
///
/// # Errors
/// Database errors.
pub(crate) async fn record_recipient<'e, E>(
    executor: E,
    kind: EventKind,
    message: Uuid,
    recipient: &str,
    reason: &str,
) -> Result<u64, StoreError>
where
    E: Executor<'e, Database = Postgres>,
{
    let done = sqlx::query(
        "INSERT INTO events (kind, message_id, campaign_id, sender_id, recipients, reason, recipient) \
         SELECT $1, m.id, m.campaign_id, coalesce(m.system_mailbox_id, m.tenant_id), 1, $3, $4 \
         FROM messages m WHERE m.id = $2 \
         ON CONFLICT (message_id, kind, recipient) WHERE recipient IS NOT NULL DO NOTHING",
    )
    .bind(kind.as_str())
    .bind(message)
    .bind(reason)
    .bind(recipient)
    .execute(executor)
    .await?;
    Ok(done.rows_affected())
}
