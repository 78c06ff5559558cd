//! What the operators' two front ends (the commands in [`crate::cli`], the admin UI in
//! [`crate::admin`]) and the daemon's gauges ([`crate::daemon`]) share, so that none of them
//! depends on another: the reports and the one limiter change an operator's action makes.
//!
//! - [`usage`]: a mailbox's limits, live budget and messages (`mailbox usage`, the mailboxes
//!   pages), the budget shares the gauges and the alert read;
//! - [`limits`]: the limits in force for a sender and where each comes from;
//! - [`campaign`]: a campaign's forecast and progress (`campaign forecast|status`, the
//!   campaigns pages);
//! - [`warm_up`]: a sender's warm-up step, sending days and why it held;
//! - `bookings`: a cancelled, retried or re-limited mailbox's bookings dropped from the limiter.

mod adaptive;
pub(crate) mod bookings;
pub mod campaign;
mod limits;
pub mod usage;
pub mod warm_up;

use crate::store::StoreError;

/// What can go wrong building a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// No system mailbox or tenant sends from this address.
    #[error("no system mailbox or tenant sender {0} (see `mail-worker senders import`)")]
    NoSuchSender(String),
    /// A request that cannot be answered (a page number, a page size); the text names it.
    #[error("{0}")]
    BadInput(String),
    /// PostgreSQL.
    #[error(transparent)]
    Store(#[from] StoreError),
}
