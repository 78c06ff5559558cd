//! Each recipient's fate as the message trace tells it (`recipient_outcomes`, `crate::delivery`):
//! [`apply`] writes a message's recipients in one transaction with what they make of the message
//! (`SENT → DELIVERED` when every recipient was delivered, `SENT → BOUNCED` when one failed and
//! none is pending), the outcome event of each recipient once (`delivered`, `bounced`,
//! `filtered`, unique per message, kind and recipient), a hard failure's suppression and the
//! quota or reputation failures to pause (the NDR path's table, [`action_of`]). A
//! recipient's final outcome is never overwritten, so a trace read twice changes nothing.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row, postgres::PgConnection};
use uuid::Uuid;

use super::{SenderRef, StoreError, events::Outbox, suppressions};
use crate::domain::{EventKind, FailureAction, SuppressionSource, action_of, sql_status};

/// What the trace says of one recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Not final yet (`Pending`, `GettingStatus`, …).
    Pending,
    /// `Delivered` (or `Expanded`: a group, its members delivered).
    Delivered,
    /// `Failed`.
    Failed,
    /// `FilteredAsSpam` or `Quarantined`.
    Filtered,
}

crate::domain::keyword::keywords!(Outcome {
    Pending => "pending",
    Delivered => "delivered",
    Failed => "failed",
    Filtered => "filtered",
});

impl Outcome {
    /// The outcome of a trace `status`.
    pub fn of_trace(status: &str) -> Self {
        match status {
            "Delivered" | "Expanded" => Self::Delivered,
            "Failed" => Self::Failed,
            "FilteredAsSpam" | "Quarantined" => Self::Filtered,
            _ => Self::Pending,
        }
    }

    fn event(self) -> Option<EventKind> {
        match self {
            Self::Pending => None,
            Self::Delivered => Some(EventKind::Delivered),
            Self::Failed => Some(EventKind::Bounced),
            Self::Filtered => Some(EventKind::Filtered),
        }
    }
}

/// One recipient's record.
#[derive(Debug, Clone)]
pub struct RecipientOutcome {
    /// The recipient, as the trace names it.
    pub recipient: String,
    /// The trace's status (`Delivered`, `Failed`, …).
    pub trace_status: String,
    /// What it means.
    pub outcome: Outcome,
    /// The trace's time.
    pub at: DateTime<Utc>,
    /// For a failure: the enhanced status code and the text (scrubbed).
    pub failure: Option<(String, String)>,
    /// The message trace id.
    pub trace_id: String,
}

/// What [`apply`] did to one message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Recipients whose outcome became final now, by outcome.
    pub finals: Vec<Outcome>,
    /// The message's status after it (`None`: not ours, or not sent).
    pub status: Option<String>,
    /// Hard failures suppressed (new entries only).
    pub suppressed: u32,
    /// The sending mailbox (lower case).
    pub sender: Option<String>,
    /// Failures that became final now whose code pauses a budget
    /// ([`crate::domain::action_of`]): code and text, for the caller to pause. Empty when an
    /// NDR already bounced the message (it paused then).
    pub pauses: Vec<(String, String)>,
}

/// Writes `rows` (recipients of `message`) and settles the message, in one transaction.
///
/// # Errors
/// Database errors.
pub async fn apply(
    pool: &PgPool,
    message: Uuid,
    rows: &[RecipientOutcome],
    outbox: Outbox,
) -> Result<Applied, StoreError> {
    let mut tx = pool.begin().await?;
    let applied = apply_in(&mut tx, message, rows, outbox).await?;
    tx.commit().await?;
    Ok(applied)
}

/// [`apply`] for many messages in one transaction (a read writes its page's messages together:
/// one commit per message made 100,000 messages a matter of minutes). The messages are locked
/// in the order given; give them sorted.
///
/// # Errors
/// Database errors (nothing of the batch is written then).
pub async fn apply_batch(
    pool: &PgPool,
    batch: &[(Uuid, Vec<RecipientOutcome>)],
    outbox: Outbox,
) -> Result<Vec<Applied>, StoreError> {
    let mut tx = pool.begin().await?;
    let mut applied = Vec::with_capacity(batch.len());
    for (message, rows) in batch {
        applied.push(apply_in(&mut tx, *message, rows, outbox).await?);
    }
    tx.commit().await?;
    Ok(applied)
}

async fn apply_in(
    conn: &mut PgConnection,
    message: Uuid,
    rows: &[RecipientOutcome],
    outbox: Outbox,
) -> Result<Applied, StoreError> {
    let mut out = Applied::default();
    let Some(row) = sqlx::query(
        "SELECT m.status, m.tenant_id, m.system_mailbox_id, \
             lower(coalesce(t.sender_address, s.address)) AS sender, \
             ARRAY(SELECT DISTINCT lower(r->>'address') FROM jsonb_array_elements( \
                 m.to_recipients || m.cc_recipients || m.bcc_recipients) r) AS recipients \
         FROM messages m \
         LEFT JOIN tenants t ON t.id = m.tenant_id \
         LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
         WHERE m.id = $1 FOR UPDATE OF m",
    )
    .bind(message)
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(out);
    };
    let status: String = row.try_get("status")?;
    if !matches!(status.as_str(), "SENT" | "BOUNCED" | "DELIVERED") {
        return Ok(out);
    }
    let sender = SenderRef::of_row(&row, "messages", || format!("message {message}"))?;
    let recipients: Vec<String> = row.try_get("recipients")?;
    out.sender = row.try_get("sender")?;
    // An NDR bounced it first: it wrote the `bounced` event and paused what it names.
    let ndr_first = status == "BOUNCED";
    for r in rows {
        let recipient = r.recipient.to_lowercase();
        if !recipients.contains(&recipient) {
            continue;
        }
        let (code, detail) = r.failure.clone().unzip();
        let changed: Option<bool> = sqlx::query_scalar(
            "INSERT INTO recipient_outcomes \
                 (message_id, recipient, trace_status, outcome, at, code, detail, trace_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (message_id, recipient) DO UPDATE SET \
                 trace_status = EXCLUDED.trace_status, outcome = EXCLUDED.outcome, \
                 at = EXCLUDED.at, code = EXCLUDED.code, detail = EXCLUDED.detail, \
                 trace_id = EXCLUDED.trace_id, updated_at = now() \
             WHERE recipient_outcomes.outcome = 'pending' \
             RETURNING true",
        )
        .bind(message)
        .bind(&recipient)
        .bind(&r.trace_status)
        .bind(r.outcome.as_str())
        .bind(r.at)
        .bind(&code)
        .bind(&detail)
        .bind(&r.trace_id)
        .fetch_optional(&mut *conn)
        .await?;
        let Some(kind) = changed.and(r.outcome.event()) else {
            continue;
        };
        out.finals.push(r.outcome);
        if outbox.is_on() {
            let reason = r
                .failure
                .as_ref()
                .map(|(code, text)| format!("{code} {text}"))
                .unwrap_or_else(|| r.trace_status.clone());
            if !(kind == EventKind::Bounced && ndr_first) {
                super::events::record_recipient(&mut *conn, kind, message, &recipient, &reason)
                    .await?;
            }
        }
        let Some((code, text)) = &r.failure else {
            continue;
        };
        match action_of(code, text) {
            FailureAction::Suppress(hard) => {
                match suppressions::add(
                    &mut *conn,
                    sender,
                    &recipient,
                    &hard.reason(),
                    SuppressionSource::Bounce,
                )
                .await
                {
                    Ok(added) => out.suppressed += u32::from(added),
                    Err(StoreError::Invalid { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            FailureAction::Pause(_) if !ndr_first => {
                out.pauses.push((code.clone(), text.clone()));
            }
            FailureAction::Pause(_) | FailureAction::Bounce => {}
        }
    }
    out.status = Some(settle(conn, message, &status, recipients.len()).await?);
    Ok(out)
}

/// The message's status from its recipients' outcomes: a `SENT` one becomes `BOUNCED` (with the
/// first failure's code and text) when none is pending and one failed, `DELIVERED` when all are
/// final and none failed; otherwise it stays.
async fn settle(
    conn: &mut PgConnection,
    message: Uuid,
    status: &str,
    recipients: usize,
) -> Result<String, StoreError> {
    if status != "SENT" {
        return Ok(status.to_owned());
    }
    let (finals, failed): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE outcome <> 'pending'), count(*) FILTER (WHERE outcome = 'failed') \
         FROM recipient_outcomes WHERE message_id = $1",
    )
    .bind(message)
    .fetch_one(&mut *conn)
    .await?;
    if usize::try_from(finals).unwrap_or(0) < recipients {
        return Ok(status.to_owned());
    }
    if failed > 0 {
        sqlx::query(concat!(
            "UPDATE messages m SET status = ",
            sql_status!(Bounced),
            ", bounced_at = now(), bounce_code = o.code, bounce_text = o.detail, updated_at = now() \
             FROM (SELECT code, detail FROM recipient_outcomes \
                   WHERE message_id = $1 AND outcome = 'failed' ORDER BY at, recipient LIMIT 1) o \
             WHERE m.id = $1"
        ))
        .bind(message)
        .execute(&mut *conn)
        .await?;
        return Ok("BOUNCED".to_owned());
    }
    sqlx::query(concat!(
        "UPDATE messages SET status = ",
        sql_status!(Delivered),
        ", delivered_at = now(), updated_at = now() WHERE id = $1"
    ))
    .bind(message)
    .execute(&mut *conn)
    .await?;
    Ok("DELIVERED".to_owned())
}

/// The `SENT` messages of senders `mailboxes` (lower case) sent between `give_up` and `lag`
/// ago by PostgreSQL's clock (`sent_at` is its time): how many, and how long ago the oldest was
/// sent.
///
/// # Errors
/// Database errors.
pub(crate) async fn pending(
    pool: &PgPool,
    mailboxes: &[String],
    (give_up, lag): (std::time::Duration, std::time::Duration),
) -> Result<(i64, Option<std::time::Duration>), StoreError> {
    let (count, age): (i64, Option<f64>) = sqlx::query_as(concat!(
        "SELECT count(*), extract(epoch FROM now() - min(m.sent_at))::float8 FROM messages m \
         LEFT JOIN tenants t ON t.id = m.tenant_id \
         LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
         WHERE m.status = ",
        sql_status!(Sent),
        " AND m.sent_at > now() - $2 AND m.sent_at <= now() - $3 \
           AND lower(coalesce(t.sender_address, s.address)) = ANY($1)"
    ))
    .bind(mailboxes)
    .bind(super::messages::interval(give_up))
    .bind(super::messages::interval(lag))
    .fetch_one(pool)
    .await?;
    Ok((
        count,
        age.map(|s| std::time::Duration::from_secs_f64(s.max(0.0))),
    ))
}

/// One recipient's fate as `messages show` and the admin UI's message page list it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct RecipientFate {
    /// The recipient, masked (`g***@example.org`).
    pub recipient: String,
    /// What told it: the trace's status (`Delivered`, `Failed`, `FilteredAsSpam`, …) or `NDR`.
    pub status: String,
    /// `delivered`, `failed`, `filtered` or `pending`.
    pub outcome: String,
    /// The trace's (or the NDR's) time.
    pub at: DateTime<Utc>,
    /// A failure's enhanced status code.
    pub code: Option<String>,
    /// A failure's text (scrubbed when it was read).
    pub detail: Option<String>,
}

/// Each recipient's fate of `message` that is known, by recipient; addresses masked.
///
/// # Errors
/// Database errors.
pub async fn of_message(pool: &PgPool, message: Uuid) -> Result<Vec<RecipientFate>, StoreError> {
    let mut fates: Vec<RecipientFate> = sqlx::query_as(
        "SELECT recipient, trace_status AS status, outcome, at, code, detail \
         FROM recipient_outcomes WHERE message_id = $1 ORDER BY recipient",
    )
    .bind(message)
    .fetch_all(pool)
    .await?;
    for fate in &mut fates {
        fate.recipient = crate::domain::mask_address(&fate.recipient);
    }
    Ok(fates)
}

/// Of `messages`, the `SENT` ones as `(id, "sent")` and their recipients already final as
/// `(id, "final:<recipient>")`: what a read still has to write.
///
/// # Errors
/// Database errors.
pub(crate) async fn open(
    pool: &PgPool,
    messages: &[Uuid],
) -> Result<Vec<(Uuid, String)>, StoreError> {
    Ok(sqlx::query_as(concat!(
        "SELECT id, 'sent' FROM messages WHERE id = ANY($1) AND status = ",
        sql_status!(Sent),
        " UNION ALL SELECT message_id, 'final:' || recipient FROM recipient_outcomes \
         WHERE message_id = ANY($1) AND outcome <> 'pending'"
    ))
    .bind(messages)
    .fetch_all(pool)
    .await?)
}
