//! Inserting a campaign's messages and their attachments.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::SenderRef;
use crate::{
    domain::{MessageContent, Priority},
    store::StoreError,
};

/// A message to insert (what `mail-worker enqueue` or a producer writes).
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// `messages.id`; re-inserting the same id is a no-op.
    pub id: Uuid,
    /// Its sender.
    pub sender: SenderRef,
    /// Recipients, subject, body, headers and attachments.
    pub content: MessageContent,
    /// When to send; `None` = now.
    pub scheduled_on: Option<DateTime<Utc>>,
    /// Which of its sender's due rows a claim takes first; `None` = the sender's default
    /// (`tenants.priority` / `system_mailboxes.priority`).
    pub priority: Option<Priority>,
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
                 bcc_recipients, subject, body_content_type, body, headers, scheduled_on, priority) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, coalesce($11, now()), \
                 coalesce($12, (SELECT priority FROM system_mailboxes WHERE id = $3), \
                     (SELECT priority FROM tenants WHERE id = $2), 'normal')) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(m.id)
        .bind(tenant)
        .bind(mailbox)
        .bind(sqlx::types::Json(&m.content.to))
        .bind(sqlx::types::Json(&m.content.cc))
        .bind(sqlx::types::Json(&m.content.bcc))
        .bind(&m.content.subject)
        .bind(m.content.body_content_type.as_str())
        .bind(&m.content.body)
        .bind(sqlx::types::Json(&m.content.headers))
        .bind(m.scheduled_on)
        .bind(m.priority.map(Priority::as_str))
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            continue;
        }
        inserted += 1;
        for (position, a) in m.content.attachments.iter().enumerate() {
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

/// How many of `ids` are stored already (what `enqueue --dry-run` reports as present).
///
/// # Errors
/// Database errors.
pub(crate) async fn count_present(pool: &PgPool, ids: &[Uuid]) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM messages WHERE id = ANY($1)")
        .bind(ids)
        .fetch_one(pool)
        .await?;
    Ok(n as u64)
}
