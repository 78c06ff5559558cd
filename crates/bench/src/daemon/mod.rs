//! What the daemon benchmarks (3 backlog, 4 end to end, 5 profile) share, by concern:
//! [`database`] (a fresh benchmark database, system mailboxes and messages, its row writes),
//! [`child`] (graph-sim in process, the real `mail-worker run` binary as a child process, its
//! JSON log), and the drain benchmarks' counters here. The private servers, the `/proc`
//! readers and the process control come from the `test-support` crate (shared with
//! `tests/it`) and are re-exported here for the benchmarks.

pub mod child;
pub mod database;

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::Serialize;
pub use test_support::{
    measured_redis::{
        CommandCount, CommandStats, HARNESS_COMMANDS, MeasuredRedis, command_delta,
        parse_commandstats, total_calls,
    },
    private_postgres::PrivatePostgres,
    proc_stats::{children_of, cpu_seconds, peak_rss_kib},
    process::free_port,
};

pub use child::*;
pub use database::*;

/// The Entra tenant of every benchmark mailbox (graph-sim's and the database's).
pub const TENANT: &str = "contoso.example";
/// The app that sends for every benchmark mailbox.
pub const CLIENT_ID: &str = "b3c0a1e2-5d4f-4a6b-9c8d-7e6f5a4b3c2d";
/// Its secret, stored as a literal in `system_mailboxes.graph_client_secret` and given to
/// graph-sim: a benchmark value, not a real credential.
pub const CLIENT_SECRET: &str = "bench-sim-secret";
/// The daemon binary of the same build as the benchmark: `bench-mail-worker` (the `mail-worker`
/// binary's own entry point, built by this package: Cargo builds a package's binaries for its
/// benchmarks) beside the running benchmark's `deps/` folder — the release build under
/// `cargo bench`, the debug one under `cargo test --bench`.
pub static MAIL_WORKER: std::sync::LazyLock<PathBuf> =
    std::sync::LazyLock::new(|| test_support::process::built_binary("bench-mail-worker"));
/// GNU time, for the daemon's CPU time and peak RSS (`-v`); without it the figures come from
/// `/proc`.
pub const GNU_TIME: &str = "/usr/bin/time";
/// The `application_name` of the harness's own PostgreSQL connections, so they are never
/// counted as the daemon's (which connect as `mail-worker`).
pub const HARNESS_APP: &str = "mail-worker-bench";
/// The `application_name` of the harness's set-up connections (migrations, mailboxes,
/// messages), closed by [`BenchDb::settle`] before anything is measured.
pub const HARNESS_SETUP_APP: &str = "mail-worker-bench-setup";
/// The body of every benchmark message: a short HTML invitation, 1,004 bytes.
pub const BODY: &str = concat!(
    "<html><body><h1>You are invited</h1><p>Dear guest,</p>",
    "<p>We are delighted to invite you to our annual gathering. The programme starts at ",
    "nine in the morning with coffee in the main hall, followed by talks from our partners ",
    "and a walk through the new exhibition. Lunch is served at half past twelve.</p>",
    "<p>Please let us know before Friday whether you can attend, and whether you bring a ",
    "guest. Parking is available at the north entrance; the nearest station is a ten minute ",
    "walk away.</p><p>We look forward to seeing you there.</p><p>Kind regards,<br>The events ",
    "team</p><p style=\"font-size:small;color:#666\">You receive this invitation because you ",
    "registered for updates from our events team. To stop receiving invitations, reply to ",
    "this message with the word unsubscribe in the subject line.</p></body></html>",
);

/// What both drain benchmarks (backlog, budgets) read at every snapshot: the command counts
/// of the limiter's and the queue's Redis, and the claims so far.
#[derive(Debug, Clone, Serialize)]
pub struct DrainCounters {
    pub at: DateTime<Utc>,
    pub limiter_commands: CommandStats,
    pub queue_commands: CommandStats,
    /// Claims so far ([`BenchDb::claims`]).
    pub claims: u64,
}

impl DrainCounters {
    /// Reads them now.
    pub async fn read(
        limiter: &mut MeasuredRedis,
        queue: &mut MeasuredRedis,
        db: &BenchDb,
    ) -> Self {
        let at = Utc::now();
        Self {
            at,
            limiter_commands: limiter.commandstats().await,
            queue_commands: queue.commandstats().await,
            claims: db.claims().await,
        }
    }
}

/// How long a drain benchmark (backlog, budgets) runs, for its first line: a smoke run until
/// each message was tried once, else `minutes`.
pub fn drain_span(smoke: bool, minutes: u32) -> String {
    if smoke {
        "until each message was tried once".to_owned()
    } else {
        format!("{minutes} minute(s)")
    }
}

/// The options both drain benchmarks (backlog, budgets) take for the daemon and the run.
#[derive(Debug, Clone, clap::Args)]
pub struct DrainArgs {
    /// The mailboxes' limit, messages per UTC minute (`MAIL_RATE_LIMIT_PER_MINUTE`).
    #[arg(long, default_value_t = 25)]
    pub limit: u32,
    /// Whole UTC minutes to measure (budgets: per backlog size).
    #[arg(long, default_value_t = 5)]
    pub minutes: u32,
    /// `WORKER_CONCURRENCY` of the daemon (16, as in the earlier runs; production default 128).
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
}

impl DrainArgs {
    /// A limit, a minute or a worker is missing: nothing would drain.
    pub fn is_empty(&self) -> bool {
        self.limit == 0 || self.minutes == 0 || self.concurrency == 0
    }
}
