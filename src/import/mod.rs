//! Reading producer files: the senders file (`mail-worker senders import`), a campaign
//! JSONL file (`mail-worker enqueue`) and a suppression CSV (`mail-worker suppressions import`).

pub mod campaign;
pub mod senders;
pub mod suppressions;

use sqlx::PgPool;

use crate::store;

/// One unusable input line or entry, by position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {reason}")]
pub struct BadEntry {
    /// `line 12` or `tenants[2]`.
    pub location: String,
    /// What is wrong, naming the field.
    pub reason: String,
}

/// What [`enqueue`] did with a campaign file.
#[derive(Debug)]
pub struct Enqueued {
    /// Messages inserted (a message whose id is already stored is not inserted again).
    pub inserted: u64,
    /// Lines that became a message (inserted or already present).
    pub good: usize,
    /// Lines that could not become a message, with their line numbers.
    pub bad: Vec<BadEntry>,
    /// Recipients dropped from the inserted messages as suppressed (none in a dry run).
    pub suppressed: u64,
    /// Messages inserted `ERROR` "all recipients suppressed".
    pub all_suppressed: u64,
}

/// Parses a campaign file (JSONL, [`campaign`]; its bytes, so a line that is not UTF-8 costs
/// only itself) against the stored senders and inserts its good lines (`mail-worker enqueue`,
/// the demo). A chunk PostgreSQL refuses is retried line by line, so only the refused line is
/// lost, and named.
///
/// # Errors
/// PostgreSQL errors other than refusing one row (see [`campaign::enqueue`]).
pub async fn enqueue(
    pool: &PgPool,
    bytes: impl AsRef<[u8]>,
    outbox: store::events::Outbox,
) -> Result<Enqueued, store::StoreError> {
    let directory = sender_directory(pool).await?;
    let report = campaign::enqueue(pool, bytes.as_ref(), &directory, outbox).await?;
    Ok(Enqueued {
        inserted: report.inserted,
        good: report.stored,
        bad: report.bad,
        suppressed: report.suppressed,
        all_suppressed: report.all_suppressed,
    })
}

/// What [`enqueue`] would do, writing nothing (`mail-worker enqueue --dry-run`): every line
/// checked against the stored senders, `inserted` = the good lines whose id is not stored yet.
///
/// # Errors
/// PostgreSQL errors.
pub async fn check(pool: &PgPool, bytes: impl AsRef<[u8]>) -> Result<Enqueued, store::StoreError> {
    let directory = sender_directory(pool).await?;
    let (good, bad) = campaign::parse_bytes(bytes.as_ref(), &directory);
    let ids: Vec<uuid::Uuid> = good.iter().map(|(_, m)| m.id).collect();
    let present = store::messages::present(pool, &ids).await?.len() as u64;
    Ok(Enqueued {
        inserted: ids.len() as u64 - present,
        good: good.len(),
        bad,
        suppressed: 0,
        all_suppressed: 0,
    })
}

/// The stored senders by name and address, as a campaign line names them.
///
/// # Errors
/// PostgreSQL errors.
pub(crate) async fn sender_directory(
    pool: &PgPool,
) -> Result<campaign::SenderDirectory, store::StoreError> {
    let (tenants, system_mailboxes) = store::senders::sender_ids(pool).await?;
    Ok(campaign::SenderDirectory {
        tenants,
        system_mailboxes,
        pools: store::pools::directory(pool).await?,
    })
}
