//! `mail-worker messages …`: the subcommands and which messages they take.

use clap::{Args, Subcommand};

/// `mail-worker messages …`
#[derive(Debug, Subcommand)]
pub enum MessagesCommand {
    /// Put messages back to SCHEDULED, due now, attempts reset (default: --status ERROR;
    /// cancelled ones only by --id or --error-like cancelled). Needs a filter (--sender, --id,
    /// --error-like), or --all for every message of the status.
    Retry(BulkArgs),
    /// End messages that were not sent yet (default: --status SCHEDULED) as ERROR "cancelled".
    /// Needs a filter (--sender, --id, --error-like), or --all for every unsent message.
    Cancel(BulkArgs),
    /// Delete finished (SENT, ERROR) messages and their attachments older than `--older-than`,
    /// in batches, as the daemon's MAIL_RETENTION rounds do (at least 24h).
    Purge(PurgeArgs),
    /// List messages, most recently changed first: recipients masked, and for a SCHEDULED one
    /// why it waits and until when.
    List(ListArgs),
    /// One message: status, attempts, last error, and why it waits and until when.
    Show {
        /// The message's id.
        id: uuid::Uuid,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Which messages `messages list|retry|cancel` take (all given filters must hold).
#[derive(Debug, Args)]
pub struct Selection {
    /// A sender: system mailbox or tenant sender address, or tenant name.
    #[arg(long)]
    pub sender: Option<String>,
    /// Status (SCHEDULED, SENDING, SENT, ERROR); retry takes ERROR (default) or SCHEDULED,
    /// cancel SCHEDULED.
    #[arg(long)]
    pub status: Option<String>,
    /// Only messages whose last error contains this text (case-insensitive).
    #[arg(long)]
    pub error_like: Option<String>,
    /// Only this message (repeatable).
    #[arg(long = "id")]
    pub ids: Vec<uuid::Uuid>,
}

/// Arguments of `messages list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Which messages.
    #[command(flatten)]
    pub selection: Selection,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Print JSON (one array).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `messages retry|cancel`.
#[derive(Debug, Args)]
pub struct MessageArgs {
    /// Which messages.
    #[command(flatten)]
    pub selection: Selection,
    /// Count what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `messages retry|cancel`: the selection, and `--all` instead of a filter.
#[derive(Debug, Args)]
pub struct BulkArgs {
    /// Which messages, and how the result is printed.
    #[command(flatten)]
    pub args: MessageArgs,
    /// Every message of the status (retry: ERROR, cancel: SCHEDULED, unless --status says
    /// otherwise): required when no --sender, --id or --error-like narrows the selection.
    #[arg(long, conflicts_with_all = ["sender", "error_like", "ids"])]
    pub all: bool,
}

/// Arguments of `messages purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Finished longer ago than this (`ms`, `s`, `m`, `h`, `d`; at least `24h`), e.g. `30d`.
    #[arg(long)]
    pub older_than: String,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}
