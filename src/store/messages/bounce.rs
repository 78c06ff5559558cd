//! `SENT → BOUNCED`: the one transition a non-delivery report makes ([`mark`]), in one
//! transaction that the suppression list (a hard bounce's recipients) and the events outbox join.

use sqlx::{PgPool, Row, postgres::PgConnection};
use uuid::Uuid;

use super::SenderRef;
use crate::{
    domain::{EventKind, MailboxAddress, SuppressionSource, classify, sql_status},
    store::{
        StoreError,
        events::{self, Outbox},
        suppressions,
    },
};

/// What the NDR says about one of our messages.
#[derive(Debug, Clone)]
pub struct Bounce<'a> {
    /// Our message (the id in the `internetMessageId` we set).
    pub message_id: Uuid,
    /// The mailbox whose Inbox held the NDR: only a message sent from it is marked.
    pub mailbox: &'a MailboxAddress,
    /// The DSN status code, `5.1.1`.
    pub code: &'a str,
    /// The NDR's text for that code, already scrubbed (`mailer::redact`).
    pub text: &'a str,
    /// The recipients the NDR names as failed (any case).
    pub failed: &'a [String],
}

/// A row that became `BOUNCED`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounced {
    /// The message.
    pub message_id: Uuid,
    /// Who sent it.
    pub sender: SenderRef,
    /// Its campaign, if any.
    pub campaign_id: Option<String>,
    /// The DSN status code.
    pub code: String,
    /// Every recipient address of the row (To, Cc, Bcc), as stored.
    pub recipients: Vec<String>,
    /// Of them, those the NDR names as failed (as stored; empty when it names none of them).
    pub bounced: Vec<String>,
    /// The codes and texts of the recipients the message trace already found failed (`recipient_outcomes`,
    /// while others were pending): the trace wrote their `bounced` events and paused their
    /// budgets, so the NDR adds neither (docs/decisions/0044-delivery-trace.md).
    pub traced: Vec<String>,
}

/// What [`mark`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marked {
    /// The row was `SENT` and is now `BOUNCED`.
    Bounced(Bounced),
    /// The row already is `BOUNCED` (an NDR read twice, or a second recipient's NDR).
    AlreadyBounced,
    /// The row is not `SENT` yet (its `SENT` write is still on its way): read the NDR again later.
    NotSentYet,
    /// No row of ours: not our message, sent from another mailbox, or deleted by retention.
    Unknown,
}

/// Marks the message of `bounce` `BOUNCED` with the code and text, if it is `SENT` from
/// `bounce.mailbox`, in one transaction with the suppression of a hard bounce's recipients and,
/// with `outbox` on, the `bounced` event.
///
/// # Errors
/// Database errors.
pub async fn mark(
    pool: &PgPool,
    bounce: &Bounce<'_>,
    outbox: Outbox,
) -> Result<Marked, StoreError> {
    let mut tx = pool.begin().await?;
    let marked = mark_in(&mut tx, bounce).await?;
    if let Marked::Bounced(b) = &marked {
        suppress_hard(&mut tx, b).await?;
        // The trace told this message's failure first: its `bounced` events are written.
        if outbox.is_on() && b.traced.is_empty() {
            events::record_one(&mut *tx, EventKind::Bounced, b.message_id).await?;
        }
    }
    tx.commit().await?;
    Ok(marked)
}

/// A hard bounce ([`classify`]: 5.1.1 and the like) puts each recipient the NDR names on its
/// sender's suppression list, in the transaction of the `BOUNCED` write; a soft one (5.7.x, 4.x.x)
/// suppresses nothing. An address the list refuses as malformed is skipped, not an error: the
/// bounce itself is recorded.
async fn suppress_hard(conn: &mut PgConnection, b: &Bounced) -> Result<(), StoreError> {
    let Some(hard) = classify(&b.code) else {
        return Ok(());
    };
    let reason = hard.reason();
    for address in &b.bounced {
        match suppressions::add(
            &mut *conn,
            b.sender,
            address,
            &reason,
            SuppressionSource::Bounce,
        )
        .await
        {
            Ok(_) | Err(StoreError::Invalid { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// [`mark`]'s statements on `conn` (a transaction).
async fn mark_in(conn: &mut PgConnection, bounce: &Bounce<'_>) -> Result<Marked, StoreError> {
    let row = sqlx::query(
        "SELECT m.status, m.tenant_id, m.system_mailbox_id, m.campaign_id, \
             ARRAY(SELECT r->>'address' FROM jsonb_array_elements( \
                 m.to_recipients || m.cc_recipients || m.bcc_recipients) r) AS recipients \
         FROM messages m \
         LEFT JOIN tenants t ON t.id = m.tenant_id \
         LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
         WHERE m.id = $1 AND lower(coalesce(t.sender_address, s.address)) = $2 \
         FOR UPDATE OF m",
    )
    .bind(bounce.message_id)
    .bind(bounce.mailbox.as_str().to_lowercase())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(Marked::Unknown);
    };
    let status: String = row.try_get("status")?;
    match status.as_str() {
        "SENT" => {}
        "BOUNCED" => return Ok(Marked::AlreadyBounced),
        "SCHEDULED" | "SENDING" => return Ok(Marked::NotSentYet),
        _ => return Ok(Marked::Unknown),
    }
    sqlx::query(concat!(
        "UPDATE messages SET status = ",
        sql_status!(Bounced),
        ", bounced_at = now(), bounce_code = $2, bounce_text = $3, updated_at = now() \
         WHERE id = $1"
    ))
    .bind(bounce.message_id)
    .bind(bounce.code)
    .bind(bounce.text)
    .execute(&mut *conn)
    .await?;
    let sender = SenderRef::of_row(&row, "messages", || {
        format!("message {}", bounce.message_id)
    })?;
    let recipients: Vec<String> = row.try_get("recipients")?;
    let bounced: Vec<String> = recipients
        .iter()
        .filter(|r| bounce.failed.iter().any(|f| f.eq_ignore_ascii_case(r)))
        .cloned()
        .collect();
    let traced: Vec<String> = sqlx::query_scalar(
        "SELECT concat_ws(' ', code, detail) FROM recipient_outcomes \
         WHERE message_id = $1 AND outcome = 'failed' ORDER BY recipient",
    )
    .bind(bounce.message_id)
    .fetch_all(&mut *conn)
    .await?;
    // Each recipient the NDR names keeps its fate where the trace keeps its own (one view of
    // both sources; the trace never overwrites a final one).
    sqlx::query(
        "INSERT INTO recipient_outcomes (message_id, recipient, trace_status, outcome, at, code, detail) \
         SELECT $1, lower(r), 'NDR', 'failed', now(), $3, $4 FROM unnest($2::text[]) r \
         ON CONFLICT (message_id, recipient) DO UPDATE SET trace_status = 'NDR', \
             outcome = 'failed', at = now(), code = $3, detail = $4, updated_at = now() \
         WHERE recipient_outcomes.outcome = 'pending'",
    )
    .bind(bounce.message_id)
    .bind(&bounced)
    .bind(bounce.code)
    .bind(bounce.text)
    .execute(&mut *conn)
    .await?;
    Ok(Marked::Bounced(Bounced {
        message_id: bounce.message_id,
        sender,
        campaign_id: row.try_get("campaign_id")?,
        recipients,
        bounced,
        traced,
        code: bounce.code.to_owned(),
    }))
}
