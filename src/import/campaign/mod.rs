//! A campaign file: one JSON message per line (the format of
//! `shared/data/campaign-invitations.jsonl`; every field and refusal is listed in
//! `docs/file-formats.md`):
//!
//! ```json
//! {"id": "<uuid>", "systemMailbox": "events@contoso.example" | "tenant": "northwind",
//!  "to": [{"address": "…", "name": "…"}], "cc": […], "bcc": […], "subject": "…",
//!  "body": {"contentType": "html" | "text", "content": "…"},
//!  "headers": [{"name": "x-campaign-id", "value": "…"}],
//!  "attachments": [{"name": "invite.ics", "contentType": "text/calendar", "contentBase64": "…"}],
//!  "scheduledOn": "2026-12-01T15:55:00Z"}
//! ```
//!
//! The file is read **line by line as bytes**: one bad line never costs another. A line that
//! cannot become a message is reported with its line number (and its id when one can be read)
//! and skipped: not UTF-8, not JSON, not a message, a bad id, an unknown or ambiguous sender, no
//! recipients, a bad body type, bad base64, a bad `scheduledOn`, a NUL character anywhere
//! (PostgreSQL cannot store one), or a size Graph certainly refuses. Recipient addresses and
//! header names are *not* judged here: a message Graph would refuse is stored and ends `ERROR`
//! with the reason when sent, never silently dropped. Recipient domains written in Unicode are
//! converted to punycode (IDNA, UTS #46) so the stored address is what Graph is sent.
//!
//! Here the file and its insert; one line's parsing is `line.rs`.

mod campaign_id;
mod line;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_by;

use crate::store::events::Outbox;
use std::collections::{HashMap, HashSet};

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::BadEntry;
use crate::domain::{ALL_SUPPRESSED, MailboxAddress};
use crate::store::{
    StoreError,
    messages::{self, NewMessage, SenderRef},
    suppressions,
};

pub(crate) use campaign_id::MAX_CAMPAIGN_ID_CHARS;
pub use line::parse_line_bytes;

#[derive(Debug, Clone, Default)]
pub struct SenderDirectory {
    /// Tenants by name.
    pub tenants: HashMap<String, Uuid>,
    /// System mailboxes by lower-case address.
    pub system_mailboxes: HashMap<String, Uuid>,
    /// Sender pools by name.
    pub pools: HashMap<String, crate::store::pools::PoolRef>,
}

impl SenderDirectory {
    /// The sender an operator names by a system mailbox's address (any case) or a tenant's
    /// name: a suppression list's scope.
    pub fn scope(&self, name: &str) -> Option<SenderRef> {
        let name = name.trim();
        MailboxAddress::parse(name)
            .ok()
            .and_then(|a| self.system_mailboxes.get(a.as_str()))
            .map(|id| SenderRef::SystemMailbox(*id))
            .or_else(|| self.tenants.get(name).map(|id| SenderRef::Tenant(*id)))
    }
}

/// Why [`SenderDirectory::scope`] found nothing, naming `name`.
pub fn unknown_scope(name: &str) -> String {
    format!(
        "scope {:?} is neither a system mailbox's address nor a tenant's name (see `mail-worker senders import`)",
        name.trim()
    )
}

/// The lines of `bytes`: split at `\n`, a trailing `\r` removed, a leading UTF-8 byte-order
/// mark ignored; numbered from 1.
pub(crate) fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    bytes
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line.strip_suffix(b"\r").unwrap_or(line)))
}

/// Parses a whole file's bytes: the good messages with their line numbers, and every bad line.
/// Blank lines are skipped; an id repeated within the file is a bad line (the first one wins).
pub fn parse_bytes(
    bytes: &[u8],
    senders: &SenderDirectory,
) -> (Vec<(usize, NewMessage)>, Vec<BadEntry>) {
    parse_numbered(lines(bytes), senders)
}

/// Parses numbered lines (a file's, or the elements of the HTTP ingest's JSON array) as
/// [`parse_bytes`] does: blank ones skipped, an id repeated among them a bad line.
pub(crate) fn parse_numbered<'a>(
    numbered: impl IntoIterator<Item = (usize, &'a [u8])>,
    senders: &SenderDirectory,
) -> (Vec<(usize, NewMessage)>, Vec<BadEntry>) {
    let mut good: Vec<(usize, NewMessage)> = Vec::new();
    let mut bad = Vec::new();
    let mut seen = HashMap::new();
    for (number, line) in numbered {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_line_bytes(number, line, senders) {
            Ok(m) => {
                if let Some(first) = seen.insert(m.id, number) {
                    seen.insert(m.id, first);
                    bad.push(BadEntry {
                        location: format!("line {number}"),
                        reason: format!("id {} repeats line {first}", m.id),
                    });
                } else {
                    good.push((number, m));
                }
            }
            Err(e) => bad.push(e),
        }
    }
    (good, bad)
}

/// What [`enqueue`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnqueueReport {
    /// Rows newly inserted.
    pub inserted: u64,
    /// Good lines stored now or already present (`inserted` ≤ `stored`).
    pub stored: usize,
    /// Every line not stored, by line number, in file order.
    pub bad: Vec<BadEntry>,
    /// Recipients dropped as suppressed.
    pub suppressed: u64,
    /// Lines stored `ERROR` [`ALL_SUPPRESSED`].
    pub all_suppressed: u64,
}

/// How many lines are inserted in one transaction.
pub(crate) const INSERT_CHUNK: usize = 500;

/// Parses `bytes` and inserts every good line, [`INSERT_CHUNK`] per transaction (suppressed
/// recipients dropped: [`insert_chunk`]). A chunk that
/// PostgreSQL refuses is retried line by line, so only the line it refuses is lost, and named
/// (with its id); lines are validated before any insert, so this is a last resort.
///
/// # Errors
/// PostgreSQL trouble other than refusing a row (a lost connection, …).
pub async fn enqueue(
    pool: &PgPool,
    bytes: &[u8],
    senders: &SenderDirectory,
    outbox: Outbox,
) -> Result<EnqueueReport, StoreError> {
    let (good, mut bad) = parse_bytes(bytes, senders);
    let mut report = EnqueueReport::default();
    let mut conn = pool.acquire().await?;
    for chunk in good.chunks(INSERT_CHUNK) {
        let stored = insert_chunk(&mut conn, chunk, outbox).await?;
        report.inserted += stored.inserted;
        report.stored += chunk.len() - stored.refused.len();
        report.suppressed += stored.suppressed;
        report.all_suppressed += stored.all_suppressed;
        bad.extend(stored.refused.into_iter().map(|(number, reason)| BadEntry {
            location: format!("line {number}"),
            reason,
        }));
    }
    bad.sort_by_key(|b| line_number(&b.location));
    report.bad = bad;
    Ok(report)
}

/// What [`insert_chunk`] stored.
#[derive(Debug, Default)]
pub(crate) struct Stored {
    /// Rows newly inserted.
    pub inserted: u64,
    /// Their ids (a line whose id is not here was stored before: a duplicate).
    pub new: HashSet<Uuid>,
    /// The lines PostgreSQL refused, by number, with the reason (naming the id).
    pub refused: Vec<(usize, String)>,
    /// Recipients dropped as suppressed from the rows inserted now.
    pub suppressed: u64,
    /// Rows inserted now as `ERROR` because every recipient is suppressed.
    pub all_suppressed: u64,
}

/// The chunk's messages without their suppressed recipients (one query for the whole chunk),
/// with each one's `ERROR` reason when none is left (it keeps its recipients then, so a retry
/// after the entries are removed sends it) and how many of its recipients were dropped.
type Unsuppressed = (Vec<NewMessage>, Vec<Option<&'static str>>, Vec<u32>);

async fn unsuppressed(
    conn: &mut PgConnection,
    chunk: &[(usize, NewMessage)],
) -> Result<Unsuppressed, StoreError> {
    let pairs: Vec<(Uuid, String)> = chunk
        .iter()
        .flat_map(|(_, m)| {
            let scope = m.sender.id();
            m.content.recipient_keys().map(move |key| (scope, key))
        })
        .collect();
    let listed = suppressions::suppressed_among(conn, &pairs).await?;
    let mut out: Unsuppressed = Default::default();
    for (_, m) in chunk {
        let mut kept = m.clone();
        let scope = m.sender.id();
        let n = if listed.is_empty() {
            0
        } else {
            kept.content
                .drop_recipients(|key| listed.contains(&(scope, key.to_owned())))
        };
        let all = kept.content.recipient_count() == 0;
        out.0.push(if all { m.clone() } else { kept });
        out.1.push(all.then_some(ALL_SUPPRESSED));
        out.2.push(n);
    }
    Ok(out)
}

/// Inserts one chunk of parsed lines in one transaction (one multi-row insert), without the
/// recipients on their sender's suppression list (a message left with none is stored `ERROR`
/// [`ALL_SUPPRESSED`]); a chunk that PostgreSQL refuses is retried line by line, so only the
/// line it refuses is lost, and named (with its id). The file import, the intake queue
/// ([`crate::intake`]) and the HTTP ingest ([`crate::ingest`], on a connection inside its
/// request's transaction: each insert a savepoint) all store so.
///
/// # Errors
/// PostgreSQL trouble other than refusing a row (a lost connection, …).
pub(crate) async fn insert_chunk(
    conn: &mut PgConnection,
    chunk: &[(usize, NewMessage)],
    outbox: Outbox,
) -> Result<Stored, StoreError> {
    let (messages, failed, dropped) = unsuppressed(conn, chunk).await?;
    let mut stored = Stored::default();
    let mut new = Vec::new();
    match messages::insert(conn, &messages, &failed, outbox).await {
        Ok(ids) => new = ids,
        Err(StoreError::Database(sqlx::Error::Database(_))) => {
            for (((number, _), m), failed) in chunk.iter().zip(&messages).zip(&failed) {
                match messages::insert(
                    conn,
                    std::slice::from_ref(m),
                    std::slice::from_ref(failed),
                    outbox,
                )
                .await
                {
                    Ok(ids) => new.extend(ids),
                    Err(StoreError::Database(sqlx::Error::Database(e))) => {
                        stored.refused.push((
                            *number,
                            format!(
                                "PostgreSQL refused the row: {} (id {})",
                                crate::mailer::redact::scrub_provider_text(e.message()),
                                m.id
                            ),
                        ));
                    }
                    Err(other) => return Err(other),
                }
            }
        }
        Err(other) => return Err(other),
    }
    stored.inserted = new.len() as u64;
    // Counted for the rows inserted now: a line stored before (a repeated job) counts once.
    stored.new = new.into_iter().collect();
    for ((m, failed), n) in messages.iter().zip(&failed).zip(dropped) {
        if stored.new.contains(&m.id) {
            stored.suppressed += u64::from(n);
            stored.all_suppressed += u64::from(failed.is_some());
        }
    }
    Ok(stored)
}

pub(crate) fn line_number(location: &str) -> usize {
    location
        .strip_prefix("line ")
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}
