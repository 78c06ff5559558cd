//! The command line: every subcommand and its arguments (clap derive); `messages …`'s in
//! `args/messages.rs`. `run`'s and `admin`'s flags are one per declared setting
//! ([`super::RunArgs`]).

use std::{num::NonZeroU32, path::PathBuf};

use clap::{Args, Parser, Subcommand};

use super::RunArgs;

mod messages;
mod suspend;
pub use messages::{BulkArgs, ListArgs, MessagesCommand, PurgeArgs, Selection};
pub use suspend::{SuspendArgs, SuspendScope};

/// Delivers campaign and system mail through Microsoft Graph and SendGrid, with a
/// distributed per-mailbox rate limiter in Redis. Configured by environment variables
/// (see config/mail-worker.env.example).
#[derive(Debug, Parser)]
#[command(name = "mail-worker", version = crate::VERSION, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the database if missing and apply migrations (idempotent).
    Migrate,
    /// Print the effective configuration (secrets redacted); non-zero on a bad variable.
    CheckConfig,
    /// Run the daemon: claim loop, worker, lease recovery and the metrics/health listener,
    /// until SIGTERM/SIGINT. Every setting is an environment variable (or its flag).
    Run(RunArgs),
    /// Serve the admin UI on ADMIN_LISTEN (default 127.0.0.1:9185) until SIGTERM/SIGINT:
    /// mailboxes with their live use, limits, messages, retry and cancel. Needs ADMIN_TOKEN;
    /// runs beside any number of `run` replicas (it reads PostgreSQL and the limiter's Redis).
    Admin(RunArgs),
    /// Manage senders (tenants and system mailboxes).
    #[command(subcommand)]
    Senders(SendersCommand),
    /// Manage a system mailbox's settings.
    #[command(subcommand)]
    Mailbox(MailboxCommand),
    /// Insert the messages of a JSONL campaign file (idempotent on `id`); reports every bad
    /// line with its number and exits non-zero if there was one.
    Enqueue {
        /// One JSON message per line.
        file: PathBuf,
        /// Check every line and count what would be inserted; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// `database` (default: insert the rows) or `queue`: push every non-blank line as a
        /// job onto the intake queue (INTAKE_QUEUE on REDIS_URL), for the replicas to consume.
        #[arg(long, default_value = "database", value_parser = ["database", "queue"])]
        via: String,
    },
    /// Campaigns: when a campaign file would finish, and how a running campaign goes.
    #[command(subcommand)]
    Campaign(CampaignCommand),
    /// The intake queue (INTAKE_QUEUE on REDIS_URL): counts and dead-lettered jobs.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// List, show, retry or cancel messages, by filter (instead of SQL); purge old finished ones.
    #[command(subcommand)]
    Messages(MessagesCommand),
    /// The suppression list: recipients a sender (a system mailbox or a tenant) no longer
    /// sends to — hard bounces, operators' entries, CSV imports. A suppressed recipient is
    /// dropped from new messages and again just before a send.
    #[command(subcommand)]
    Suppressions(SuppressionsCommand),
    /// The outbox of events and its webhooks (EVENTS_WEBHOOK_URL): delivery state, dead
    /// events, replay.
    #[command(subcommand)]
    Events(EventsCommand),
    /// Suspend a mailbox, a Graph tenant's external mail or a campaign for a while (every
    /// replica; kept in PostgreSQL too, so a Redis flush does not lift it): its messages wait
    /// (SCHEDULED), never fail, and it ends by itself (docs/adaptive-rules.md).
    Suspend(SuspendArgs),
    /// Lift what holds a mailbox, a tenant or a campaign: an operator's suspension or an
    /// adaptive rule's action.
    Resume(SuspendScope),
    /// Ask a running daemon's `/healthz` (or `--path`): exit 0 on 200, 1 otherwise. For the
    /// image's `HEALTHCHECK` (it has no curl).
    Probe {
        /// Where the daemon listens; default `METRICS_LISTEN` with 0.0.0.0 read as 127.0.0.1.
        #[arg(long)]
        addr: Option<std::net::SocketAddr>,
        /// `/healthz` (liveness) or `/readyz` (readiness).
        #[arg(long, default_value = "/healthz")]
        path: String,
    },
    /// Counts by status per sender, the oldest due message, the next scheduled one, deferrals.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `mail-worker campaign …`
#[derive(Debug, Subcommand)]
pub enum CampaignCommand {
    /// Before enqueueing: per sender, the earliest finish of a campaign file given the senders'
    /// budgets, what the limiter has booked and used, and what already waits; warns when a
    /// finish is after --by or a line's slot after its own `by` (exit 1 then), past a
    /// mailbox's day budget or a tenant's external budget; per sender pool, its lines on each
    /// member and on its overflow sender. Writes nothing.
    Forecast {
        /// The campaign file (JSONL, as `enqueue` takes it).
        file: PathBuf,
        /// The deadline, RFC 3339 (e.g. 2026-12-02T17:00:00Z).
        #[arg(long, value_parser = parse_deadline)]
        by: Option<chrono::DateTime<chrono::Utc>>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// While it runs: sent, waiting, failed and cancelled per sender, and the forecast finish
    /// of what still waits.
    Status {
        /// The campaign's id (`campaignId`, or the lines' `x-campaign-id` header).
        campaign: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `mail-worker queue …`
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Waiting, scheduled, in-flight, dead and finished jobs, and workers.
    Stats,
    /// The dead-lettered jobs: task id, size, and why the line was refused.
    Dead {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Put dead jobs back on the queue (after fixing the cause, e.g. importing a sender).
    Retry {
        /// Task ids; none with `--all`.
        ids: Vec<String>,
        /// Every dead job.
        #[arg(long)]
        all: bool,
    },
    /// Delete dead jobs.
    Discard {
        /// Task ids; none with `--all`.
        ids: Vec<String>,
        /// Every dead job.
        #[arg(long)]
        all: bool,
    },
}

/// `mail-worker suppressions …`; a scope is a system mailbox's address or a tenant's name.
#[derive(Debug, Subcommand)]
pub enum SuppressionsCommand {
    /// The entries, newest first: address, scope, source, since, reason.
    List {
        /// Only this scope's entries.
        #[arg(long)]
        scope: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: i64,
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
    },
    /// Suppress ADDRESS for a scope (kept if it is listed already).
    Add {
        /// The recipient's address.
        address: String,
        /// A system mailbox's address or a tenant's name.
        #[arg(long)]
        scope: String,
        /// Why (shown in the list).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Remove ADDRESS from a scope's list (exit 1 if it is not there).
    Remove {
        /// The recipient's address.
        address: String,
        /// A system mailbox's address or a tenant's name.
        #[arg(long)]
        scope: String,
    },
    /// Add the entries of a CSV file, `address,scope[,reason]` a line (a header line is
    /// skipped): all or nothing, every bad line named by its number.
    Import {
        /// The CSV file.
        file: PathBuf,
    },
}

/// `mail-worker events …`
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Each receiver's delivered, dead and pending events, its lag and last error; events kept
    /// by kind.
    Stats {
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The events given up at a receiver (after EVENTS_RETRY_FOR), with why.
    Dead {
        /// Those that happened since: an RFC 3339 time or a duration back from now (`24h`).
        #[arg(long, default_value = "7d")]
        since: String,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Deliver again, to every receiver, the events that happened since (same ids: receivers
    /// de-duplicate); dead ones included.
    Replay {
        /// An RFC 3339 time or a duration back from now (`2h`).
        #[arg(long)]
        since: String,
    },
}

/// `mail-worker senders …`
#[derive(Debug, Subcommand)]
pub enum SendersCommand {
    /// Upsert tenants and system mailboxes from a JSON file (format of senders.json).
    Import {
        /// The senders file.
        file: PathBuf,
    },
    /// Check Graph senders before their first message, one line per check (`ok`, `warn`,
    /// `fail`, what was found and the fix): the secret's reference, a fresh token (each AADSTS
    /// code explained; a certificate's days to expiry), its application permissions against
    /// GRAPH_SEND_MODE and GRAPH_READ_BOUNCES, one harmless mailbox request (scope, existence,
    /// licence), an onmicrosoft.com address, limits above Exchange's. Exit 1 when a check
    /// fails. Changes no sender; prints no secret or token.
    Verify {
        /// Only these senders' addresses (default: every sender).
        addresses: Vec<String>,
        /// Also send one real test message from each sender to this address (through the
        /// limiter and GRAPH_SEND_MODE) and find it in Sent Items by its internetMessageId.
        #[arg(long, value_name = "ADDRESS")]
        send_test_to: Option<String>,
        /// Print JSON (one object per sender with its checks) instead of lines.
        #[arg(long)]
        json: bool,
    },
}

/// `mail-worker mailbox …`
#[derive(Debug, Subcommand)]
pub enum MailboxCommand {
    /// Set (or clear) a system mailbox's rate-limit overrides; applies to its next message.
    SetLimits(SetLimits),
    /// A mailbox's limits, its live budget as the limiter counts it, and its messages; without
    /// an address, one page of every mailbox, busiest (most unfinished messages) first.
    Usage {
        /// The mailbox's address (a system mailbox or a tenant's sender).
        address: Option<String>,
        /// The page to print, from 1 (without an address).
        #[arg(long, default_value_t = 1, conflicts_with = "address")]
        page: u32,
        /// Mailboxes per page, at most 500 (without an address).
        #[arg(long, default_value_t = 50, conflicts_with = "address")]
        per_page: u32,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
}

/// Arguments of `mailbox set-limits`.
#[derive(Debug, Args)]
pub struct SetLimits {
    /// The system mailbox's address.
    pub address: String,
    /// Messages per minute (`paced`: any rolling 60 s; `fixed-window`: a UTC minute).
    #[arg(long, conflicts_with = "clear", value_parser = parse_limit)]
    pub per_minute: Option<NonZeroU32>,
    /// Recipients per day (`paced`: any rolling 24 h; `fixed-window`: a UTC day).
    #[arg(long, conflicts_with = "clear", value_parser = parse_limit)]
    pub recipients_per_day: Option<NonZeroU32>,
    /// The share R (percent, 0 to 90) of the minute, day and tenant budgets that only `high`
    /// messages may use (`paced`); overrides MAIL_RATE_LIMIT_RESERVED_PERCENT.
    #[arg(long, conflicts_with = "clear", value_parser = crate::rate_limit::parse_reserved_percent)]
    pub reserved_percent: Option<u8>,
    /// Remove every override (back to the defaults).
    #[arg(long)]
    pub clear: bool,
}

/// `--by`: an RFC 3339 time, the error naming the format expected.
fn parse_deadline(raw: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(raw.trim())
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| {
            format!(
                "{e}: expected an RFC 3339 time with its offset, e.g. 2026-12-02T17:00:00Z or 2026-12-02T18:00:00+01:00"
            )
        })
}

/// A limit of `mailbox set-limits`: a whole number from 1 (0 is no limit at all; `--clear`
/// goes back to the defaults).
/// A limit: 1 up to what the column holds (`integer`), as the admin form and the senders file.
fn parse_limit(raw: &str) -> Result<NonZeroU32, String> {
    raw.trim()
        .parse::<NonZeroU32>()
        .ok()
        .filter(|v| v.get() <= i32::MAX as u32)
        .ok_or_else(|| {
            format!(
                "{raw:?} is not a limit: give a whole number from 1 to {} (--clear goes back to the defaults)",
                i32::MAX
            )
        })
}
