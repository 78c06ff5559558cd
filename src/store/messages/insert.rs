//! Inserting a campaign's messages and their attachments.

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

use super::SenderRef;
use crate::{
    domain::{EventKind, MessageContent, Priority},
    store::{
        StoreError,
        events::{self, Outbox},
    },
};

/// A message to insert (what `mail-worker enqueue` or a producer writes).
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// `messages.id`; re-inserting the same id is a no-op.
    pub id: Uuid,
    /// Its sender (for a pooled message: the member it waits under until placed).
    pub sender: SenderRef,
    /// The pool it was given to (`senderPool`), placed on a member at its first attempt.
    pub sender_pool: Option<Uuid>,
    /// Recipients, subject, body, headers and attachments.
    pub content: MessageContent,
    /// When to send; `None` = now.
    pub scheduled_on: Option<DateTime<Utc>>,
    /// The line's `by` (`messages.send_by`): when it should have been sent by; a pool whose
    /// overflow rule is `forecastMisses` overflows it when no member can meet it.
    pub send_by: Option<DateTime<Utc>>,
    /// Which of its sender's due rows a claim takes first; `None` = the sender's default
    /// (`tenants.priority` / `system_mailboxes.priority`).
    pub priority: Option<Priority>,
    /// Its campaign (`messages.campaign_id`): the line's `campaignId`, else its
    /// `x-campaign-id` header; `None` = none.
    pub campaign_id: Option<String>,
}

/// Inserts `messages` in one transaction of two statements (one multi-row `INSERT … SELECT FROM
/// UNNEST` for the rows, one for the attachments of the rows that were new), skipping ids that
/// already exist (also an id repeated within `messages`). A message whose `failed` entry is a
/// reason is stored `ERROR` with it as `last_error` (never sent: every recipient suppressed),
/// the others `SCHEDULED`; with `outbox` on, their events in the same transaction (`accepted`
/// for every new row, and `failed` for those stored `ERROR`: one multi-row insert each).
/// Returns the ids that were new. On a connection inside a transaction (the HTTP ingest's
/// request) the two statements run in a savepoint of it.
///
/// # Errors
/// Database errors; nothing is inserted then.
pub(crate) async fn insert(
    conn: &mut PgConnection,
    messages: &[NewMessage],
    failed: &[Option<&str>],
    outbox: Outbox,
) -> Result<Vec<Uuid>, StoreError> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    debug_assert_eq!(messages.len(), failed.len());
    let json = |v: &dyn Fn(&NewMessage) -> serde_json::Result<String>| {
        messages
            .iter()
            .map(v)
            .collect::<serde_json::Result<Vec<String>>>()
    };
    let bad_json = |e: serde_json::Error| StoreError::BadRow {
        table: "messages",
        problem: e.to_string(),
    };
    let (tenants, mailboxes): (Vec<Option<Uuid>>, Vec<Option<Uuid>>) = messages
        .iter()
        .map(|m| match m.sender {
            SenderRef::Tenant(id) => (Some(id), None),
            SenderRef::SystemMailbox(id) => (None, Some(id)),
        })
        .unzip();
    let mut tx = conn.begin().await?;
    let new_ids: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO messages (id, tenant_id, system_mailbox_id, to_recipients, cc_recipients, \
             bcc_recipients, subject, body_content_type, body, headers, scheduled_on, priority, campaign_id, \
             status, last_error, sender_pool_id, send_by) \
         SELECT id, tenant_id, system_mailbox_id, to_r::jsonb, cc_r::jsonb, bcc_r::jsonb, \
             subject, content_type, body, headers::jsonb, coalesce(scheduled_on, now()), \
             coalesce(t.priority, \
                 (SELECT s.priority FROM system_mailboxes s WHERE s.id = t.system_mailbox_id), \
                 (SELECT x.priority FROM tenants x WHERE x.id = t.tenant_id), 'normal'), \
             campaign_id, CASE WHEN failed IS NULL THEN 'SCHEDULED' ELSE 'ERROR' END, failed, \
             sender_pool_id, send_by \
         FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], \
             $7::text[], $8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::text[], $13::text[], \
             $14::text[], $15::uuid[], $16::timestamptz[]) \
             AS t(id, tenant_id, system_mailbox_id, to_r, cc_r, bcc_r, subject, content_type, \
                  body, headers, scheduled_on, priority, campaign_id, failed, sender_pool_id, send_by) \
         ON CONFLICT (id) DO NOTHING \
         RETURNING id",
    )
    .bind(messages.iter().map(|m| m.id).collect::<Vec<_>>())
    .bind(tenants)
    .bind(mailboxes)
    .bind(json(&|m| serde_json::to_string(&m.content.to)).map_err(bad_json)?)
    .bind(json(&|m| serde_json::to_string(&m.content.cc)).map_err(bad_json)?)
    .bind(json(&|m| serde_json::to_string(&m.content.bcc)).map_err(bad_json)?)
    .bind(
        messages
            .iter()
            .map(|m| m.content.subject.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        messages
            .iter()
            .map(|m| m.content.body_content_type.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        messages
            .iter()
            .map(|m| m.content.body.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(json(&|m| serde_json::to_string(&m.content.headers)).map_err(bad_json)?)
    .bind(messages.iter().map(|m| m.scheduled_on).collect::<Vec<_>>())
    .bind(
        messages
            .iter()
            .map(|m| m.priority.map(Priority::as_str))
            .collect::<Vec<_>>(),
    )
    .bind(
        messages
            .iter()
            .map(|m| m.campaign_id.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(failed)
    .bind(messages.iter().map(|m| m.sender_pool).collect::<Vec<_>>())
    .bind(messages.iter().map(|m| m.send_by).collect::<Vec<_>>())
    .fetch_all(&mut *tx)
    .await?;
    // The attachments of the rows inserted now (an id repeated in `messages`: its first).
    let new: std::collections::HashSet<Uuid> = new_ids.iter().copied().collect();
    let mut seen = std::collections::HashSet::new();
    let (mut ids, mut positions, mut names, mut types, mut contents) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for m in messages
        .iter()
        .filter(|m| new.contains(&m.id) && seen.insert(m.id))
    {
        for (position, a) in m.content.attachments.iter().enumerate() {
            ids.push(m.id);
            positions.push(position as i32);
            names.push(a.name.as_str());
            types.push(a.content_type.as_str());
            contents.push(a.content.as_slice());
        }
    }
    if !ids.is_empty() {
        sqlx::query(
            "INSERT INTO message_attachments (message_id, position, name, content_type, content) \
             SELECT * FROM UNNEST($1::uuid[], $2::int4[], $3::text[], $4::text[], $5::bytea[])",
        )
        .bind(ids)
        .bind(positions)
        .bind(names)
        .bind(types)
        .bind(contents)
        .execute(&mut *tx)
        .await?;
    }
    if outbox.is_on() && !new_ids.is_empty() {
        events::record(&mut *tx, EventKind::Accepted, &new_ids).await?;
        let refused: Vec<Uuid> = messages
            .iter()
            .zip(failed)
            .filter(|(m, f)| f.is_some() && new.contains(&m.id))
            .map(|(m, _)| m.id)
            .collect();
        if !refused.is_empty() {
            events::record(&mut *tx, EventKind::Failed, &refused).await?;
        }
    }
    tx.commit().await?;
    Ok(new_ids)
}

/// Which of `ids` are stored already (what `enqueue` skips and `enqueue --dry-run` reports as
/// present).
///
/// # Errors
/// Database errors.
pub(crate) async fn present(pool: &PgPool, ids: &[Uuid]) -> Result<Vec<Uuid>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT id FROM messages WHERE id = ANY($1)")
            .bind(ids)
            .fetch_all(pool)
            .await?,
    )
}
