//! `messages` and `message_attachments`: inserting a campaign, claiming due rows, the
//! status transitions of one send, lease recovery and the status report.
//!
//! Transitions: `SCHEDULED → SENDING` ([`claim_due`], one statement that also loads the rows
//! and their attachments), `SENDING → SENT | ERROR | SCHEDULED` ([`mark_sent_many`],
//! [`mark_error`], [`reschedule`], [`release_unstarted`]), and back to `SCHEDULED` from stale
//! `SENDING` rows ([`recover_stale_sending`]); `SENT → BOUNCED` when the mailbox received a
//! non-delivery report ([`bounce::mark`]).
//!
//! Row writes of a sent message: the claim and the outcome, two. What the Graph mailer notes
//! before a request that may deliver ([`Attempted`]: when, and the draft's id) is written with
//! the outcome; a row a crash left `SENDING` is marked as possibly sent by lease recovery.
//!
//! Fenced: every claim gives the row a fresh `claim_token`, and every write of that attempt (its
//! outcome, [`renew_lease`], [`release_unstarted`]) matches it ([`Fence`]). An attempt whose
//! lease another claim took over writes nothing. Times are PostgreSQL's: `scheduled_on` is
//! `now()` plus a wait, `send_attempted_at` is `now()` minus how long ago the attempt noted it.
//!
//! Here the shared shapes of a row's identity; beside it the insert of a campaign
//! (`insert.rs`), the claim and the row as loaded (`claim.rs`), the writes of one attempt
//! (`attempt.rs`: lease renewal and outcome) and lease recovery (`recover.rs`).

mod attempt;
pub mod bounce;
mod claim;
mod insert;
mod recover;

use std::time::Duration;

use uuid::Uuid;

pub(crate) use attempt::{
    Attempted, Reschedule, SentRow, Wait, holder, mark_error, mark_sent_many, renew_lease,
    reschedule, resume_all_paused, resume_paused, wait_reason,
};
pub use claim::{StoredMessage, claim_due};
pub(crate) use claim::{claim_due_from, due_senders, release_unstarted};
pub use insert::NewMessage;
pub(crate) use insert::{insert, present};
pub use recover::recover_stale_sending;

pub use super::SenderRef;

/// One attempt's hold on its row: the message and the `claim_token` its claim set. Every write
/// of the attempt matches both, so it changes nothing once lease recovery and a new claim took
/// the row over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// `messages.id`.
    pub id: Uuid,
    /// `messages.claim_token` as the claim set it.
    pub token: Uuid,
}

/// `d` as a PostgreSQL interval.
pub(crate) fn interval(d: Duration) -> sqlx::postgres::types::PgInterval {
    sqlx::postgres::types::PgInterval {
        months: 0,
        days: 0,
        microseconds: i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
    }
}
