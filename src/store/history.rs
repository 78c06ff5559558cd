//! The send history the limiter rebuilds a mailbox's budgets from when its Redis comes back
//! empty ([`crate::rate_limit::SendHistory`]): what each mailbox sent in the last 24 h.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::{
    domain::{MailboxAddress, sql_status},
    rate_limit::{SendHistory, SentRecord},
};

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

#[async_trait::async_trait]
impl SendHistory for PgSendHistory {
    async fn sent_since(
        &self,
        mailbox: &MailboxAddress,
        since: DateTime<Utc>,
    ) -> Result<Vec<SentRecord>, String> {
        let rows: Vec<(DateTime<Utc>, i32)> = sqlx::query_as(concat!(
            "SELECT m.sent_at, (jsonb_array_length(m.to_recipients) \
                    + jsonb_array_length(m.cc_recipients) \
                    + jsonb_array_length(m.bcc_recipients))::int4 \
             FROM messages m \
             WHERE m.status = ",
            sql_status!(Sent),
            " AND m.sent_at > $1 \
               AND coalesce(m.system_mailbox_id, m.tenant_id) IN ( \
                   SELECT id FROM system_mailboxes WHERE address = $2 \
                   UNION ALL SELECT id FROM tenants WHERE sender_address = $2) \
             ORDER BY m.sent_at"
        ))
        .bind(since)
        .bind(mailbox.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(|e| format!("reading the send history of {mailbox}: {e}"))?;
        Ok(rows
            .into_iter()
            .map(|(sent_at, recipients)| SentRecord {
                sent_at,
                recipients: u32::try_from(recipients).unwrap_or(0),
            })
            .collect())
    }
}
