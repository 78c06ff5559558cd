//! Bounce reading (`GRAPH_READ_BOUNCES=on`): Exchange reports a failed delivery after Graph's
//! `202`, as a non-delivery report (NDR) in the sending mailbox's Inbox. Every replica runs
//! [`BounceReader::run`]: every `GRAPH_BOUNCE_INTERVAL` it walks the Graph senders whose
//! `readBounces` is on, one mailbox at a time, and reads the Inboxes whose read it takes
//! ([`crate::store::bounce_reads`]: one replica per Inbox at a time, each Inbox about once per
//! interval in all). A read (`read.rs`) lists the NDRs (at most [`MAX_PAGES`] pages of
//! [`PAGE_SIZE`]), reads each one's MIME (`GET …/messages/{id}/$value`) and matches it to our
//! message by the original's `Message-ID` (`ndr/`), marks it `BOUNCED` with the DSN code and text
//! ([`crate::store::messages::bounce::mark`]), and moves the NDR to `GRAPH_BOUNCE_FOLDER` or
//! marks it read. Each Graph request holds an in-flight lease of the mailbox, as a send does
//! (Exchange's 4 concurrent requests count every request). An NDR that says a budget is used
//! up pauses it (the codes: [`crate::domain::action_of`], the table the message trace uses too;
//! `pause.rs`): `5.1.90` / `5.2.2` submission quota the mailbox until
//! its rolling 24 h frees (`mail.bounce.mailboxPaused`), `5.7.233` the tenant's external mail
//! until its window frees, `5.7.705` / `5.7.708` / `5.7.501` for 24 h
//! (`mail.bounce.tenantPaused`); kept in PostgreSQL across a limiter Redis flush
//! (docs/decisions/0032-quota-ndrs-pause.md). Requests per mailbox per hour:
//! docs/decisions/0018-bounce-reading.md.

mod ndr;
mod pause;
mod read;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{
    log_events,
    replica_reader::ReplicaReader,
    store::{self, StoreError},
};
pub(crate) use pause::{Found, Pauses, Told};
pub use read::ReadOutcome;

/// NDRs one listing page asks for (`$top`).
pub const PAGE_SIZE: u32 = 50;
/// Pages one read lists at most; the rest waits for the next interval. So a read makes at most
/// `MAX_PAGES` listing requests and two requests per NDR it handles, its MIME and its mark or
/// move (`MAX_PAGES × (1 + 2 × PAGE_SIZE)` = 404).
pub const MAX_PAGES: usize = 4;
/// How long one read may take; also its hold on the mailbox in `bounce_reads` (a crashed
/// reader's mailbox is read again by another replica after it).
pub const READ_DEADLINE: Duration = Duration::from_secs(120);

/// Bounce reading's settings (`GRAPH_READ_BOUNCES`, `GRAPH_BOUNCE_INTERVAL`,
/// `GRAPH_BOUNCE_FOLDER`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BounceSettings {
    /// `GRAPH_READ_BOUNCES`, `off` (default) or `on`.
    pub enabled: bool,
    /// `GRAPH_BOUNCE_INTERVAL`, default `5m`: how often each Inbox is read.
    pub interval: Duration,
    /// `GRAPH_BOUNCE_FOLDER`: where a handled NDR is moved (a well-known folder name such as
    /// `deleteditems` or `archive`, or a folder id); unset (default): it is marked read instead.
    pub folder: Option<String>,
}

impl Default for BounceSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: Duration::from_secs(300),
            folder: None,
        }
    }
}

/// Reads the Graph senders' Inboxes for NDRs. One per replica.
pub type BounceReader = ReplicaReader<BounceSettings>;

impl BounceReader {
    /// Rounds every interval until `stop`.
    pub(crate) async fn run(self, stop: CancellationToken) {
        self.rounds(self.settings.interval, stop, Self::round, |e| {
            tracing::warn!(
                event = log_events::MAIL_BOUNCE_READ_FAILED,
                mailbox = "",
                error = %e,
                "could not list the senders to read for bounces; the next interval tries again"
            );
        })
        .await;
    }

    /// One round: every reading sender's Inbox whose read this replica takes, one at a time.
    /// Returns what each read did, by mailbox.
    ///
    /// # Errors
    /// PostgreSQL failed listing the senders or taking a read.
    pub async fn round(&self) -> Result<Vec<(String, ReadOutcome)>, StoreError> {
        let mut done = Vec::new();
        for sender in store::bounce_reads::readers(&self.pool).await? {
            let mailbox = sender.mailbox().to_string();
            if !store::bounce_reads::take(&self.pool, &mailbox, &self.reader, READ_DEADLINE).await?
            {
                continue;
            }
            let outcome = match tokio::time::timeout(READ_DEADLINE, self.read(&sender)).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(e)) => {
                    tracing::warn!(
                        event = log_events::MAIL_BOUNCE_READ_FAILED,
                        mailbox = %mailbox,
                        error = %e,
                        "reading the Inbox for bounces failed; the next interval tries again"
                    );
                    ReadOutcome::default()
                }
                Err(_) => {
                    tracing::warn!(
                        event = log_events::MAIL_BOUNCE_READ_FAILED,
                        mailbox = %mailbox,
                        error = "deadline",
                        "reading the Inbox for bounces took longer than {} s; the next interval goes on",
                        READ_DEADLINE.as_secs()
                    );
                    ReadOutcome::default()
                }
            };
            store::bounce_reads::done(&self.pool, &mailbox, &self.reader, self.settings.interval)
                .await?;
            done.push((mailbox, outcome));
        }
        Ok(done)
    }
}
