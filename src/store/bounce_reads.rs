//! `bounce_reads`: which replica reads a mailbox's Inbox for bounces, and when it is read next.
//! [`take`] is one statement: the mailbox's read is this replica's until `lease` from now when
//! nobody holds it and its next read is due; [`done`] sets the next read an interval later. So
//! two replicas never read one Inbox at once (a crashed reader's hold ends with its lease), and
//! each Inbox is read about once per interval however many replicas run.

use std::time::Duration;

use sqlx::PgPool;

use super::{StoreError, messages::interval, read_turns};

/// [`take`]'s statement (`$1` the mailbox, `$2` the reader, `$3` the lease).
const TAKE: &str = "INSERT INTO bounce_reads (mailbox, next_read_at, reader) \
     VALUES ($1, now() + $3, $2) \
     ON CONFLICT (mailbox) DO UPDATE SET next_read_at = EXCLUDED.next_read_at, \
         reader = EXCLUDED.reader \
     WHERE bounce_reads.next_read_at <= now() \
     RETURNING reader";

/// Takes `mailbox`'s read for `reader` for `lease` if it is due; `true` when this replica
/// reads it now.
///
/// # Errors
/// Database errors.
pub(crate) async fn take(
    pool: &PgPool,
    mailbox: &str,
    reader: &str,
    lease: Duration,
) -> Result<bool, StoreError> {
    read_turns::take(pool, TAKE, mailbox, reader, lease).await
}

/// `reader` has read `mailbox`: its next read is due `every` from now.
///
/// # Errors
/// Database errors.
pub(crate) async fn done(
    pool: &PgPool,
    mailbox: &str,
    reader: &str,
    every: Duration,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE bounce_reads SET next_read_at = now() + $3 WHERE mailbox = $1 AND reader = $2",
    )
    .bind(mailbox)
    .bind(reader)
    .bind(interval(every))
    .execute(pool)
    .await?;
    Ok(())
}

/// Every Graph sender whose Inbox is read for bounces (`read_bounces`, the senders file's
/// `readBounces`, default true), as [`super::senders::all`] lists them.
///
/// # Errors
/// Database errors, or a row the code cannot use.
pub(crate) async fn readers(pool: &PgPool) -> Result<Vec<crate::domain::Sender>, StoreError> {
    let off: Vec<String> = sqlx::query_scalar(
        "SELECT address FROM system_mailboxes WHERE NOT read_bounces \
         UNION SELECT lower(sender_address) FROM tenants WHERE NOT read_bounces",
    )
    .fetch_all(pool)
    .await?;
    Ok(super::senders::all(pool)
        .await?
        .into_iter()
        .filter(|s| s.graph().is_some() && !off.iter().any(|a| a == s.mailbox().as_str()))
        .collect())
}
