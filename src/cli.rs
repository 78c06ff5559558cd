//! The `mail-worker` command line: subcommands and what each does.

use std::{num::NonZeroU32, path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::{
    config::Config,
    domain::MailboxAddress,
    events, import,
    store::{self, report, senders},
};

/// Delivers campaign and system mail through Microsoft Graph and SendGrid, with a
/// distributed per-mailbox rate limiter in Redis. Configured by environment variables
/// (see config/mail-worker.env.example).
#[derive(Debug, Parser)]
#[command(name = "mail-worker", version, about, long_about = None)]
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
    /// Run the daemon: claim loop, worker and lease recovery, until SIGTERM/SIGINT.
    Run,
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
    },
    /// Counts by status per sender, the oldest due message, the next scheduled one, deferrals.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
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
}

/// `mail-worker mailbox …`
#[derive(Debug, Subcommand)]
pub enum MailboxCommand {
    /// Set (or clear) a system mailbox's rate-limit overrides; applies to its next message.
    SetLimits(SetLimits),
}

/// Arguments of `mailbox set-limits`.
#[derive(Debug, Args)]
pub struct SetLimits {
    /// The system mailbox's address.
    pub address: String,
    /// Messages per UTC minute.
    #[arg(long, conflicts_with = "clear")]
    pub per_minute: Option<NonZeroU32>,
    /// Recipients per UTC day.
    #[arg(long, conflicts_with = "clear")]
    pub recipients_per_day: Option<NonZeroU32>,
    /// Remove both overrides (back to the defaults).
    #[arg(long)]
    pub clear: bool,
}

/// The `mail-worker` binary's whole life: parse the command line, read the config (a bad value
/// exits 78, `EX_CONFIG`), set up JSON logging, run the command, and report why it exited.
pub async fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("mail-worker: bad configuration: {e}");
            return ExitCode::from(78); // EX_CONFIG
        }
    };
    crate::telemetry::init(config.log_format, &config.log_filter);
    match execute(cli, config).await {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "mail-worker failed");
            eprintln!("mail-worker: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `cli` with `config`; returns the process exit code.
///
/// # Errors
/// Any failure, with its cause chain, for `main` to print.
pub async fn execute(cli: Cli, config: Config) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Migrate => {
            store::migrate(&config.database_url).await?;
            tracing::info!(event = events::DB_MIGRATED, "migrations applied");
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig => {
            out(&(config.redacted_lines().join("\n") + "\n"));
            Ok(ExitCode::SUCCESS)
        }
        Command::Run => crate::daemon::run(config).await,
        Command::Senders(SendersCommand::Import { file }) => {
            let pool = store::migrate(&config.database_url).await?;
            let text = read(&file)?;
            let parsed =
                import::senders::parse(&text).with_context(|| file.display().to_string())?;
            let report = import::senders::import(&pool, &parsed).await?;
            out(&format!(
                "imported {} tenants and {} system mailboxes from {}\n",
                report.tenants,
                report.system_mailboxes,
                file.display()
            ));
            Ok(ExitCode::SUCCESS)
        }
        Command::Mailbox(MailboxCommand::SetLimits(args)) => {
            if !args.clear && args.per_minute.is_none() && args.recipients_per_day.is_none() {
                anyhow::bail!("give --per-minute and/or --recipients-per-day, or --clear");
            }
            let address = MailboxAddress::parse(&args.address)?;
            let pool = store::connect(&config.database_url, 2).await?;
            let change = if args.clear {
                senders::LimitsChange::Clear
            } else {
                senders::LimitsChange::Set {
                    per_minute: args.per_minute,
                    recipients_per_day: args.recipients_per_day,
                }
            };
            let (per_minute, per_day) = senders::set_limits(&pool, &address, change).await?;
            let show = |v: Option<NonZeroU32>| v.map_or("default".into(), |v| v.to_string());
            out(&format!(
                "{address}: per minute {}, recipients per day {}\n",
                show(per_minute),
                show(per_day)
            ));
            Ok(ExitCode::SUCCESS)
        }
        Command::Enqueue { file } => {
            let pool = store::migrate(&config.database_url).await?;
            let bytes =
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let import::Enqueued {
                inserted,
                good: total,
                bad,
            } = import::enqueue(&pool, &bytes).await?;
            for entry in &bad {
                eprintln!("{}:{entry}", file.display());
            }
            out(&format!(
                "{inserted} messages inserted, {} already present, {} bad lines\n",
                total - inserted as usize,
                bad.len()
            ));
            Ok(if bad.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Status { json } => {
            let pool = store::connect(&config.database_url, 2).await?;
            let rows = report::by_sender(&pool).await?;
            if json {
                out(&(serde_json::to_string_pretty(&rows)? + "\n"));
            } else {
                out(&status_table(&rows));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Writes to stdout; a closed pipe (`mail-worker status | head`) is not an error.
fn out(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn read(path: &std::path::Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// The status report as a fixed-width table.
pub fn status_table(rows: &[report::SenderStatus]) -> String {
    let mut out = format!(
        "{:<32} {:<18} {:>9} {:>6} {:>7} {:>6} {:>6} {:>9}  {:<20} {:<20}\n",
        "mailbox",
        "sender",
        "SCHEDULED",
        "QUEUED",
        "SENDING",
        "SENT",
        "ERROR",
        "deferrals",
        "oldest due",
        "next scheduled"
    );
    let time = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map_or("-".to_owned(), |t| {
            t.format("%Y-%m-%d %H:%M:%S").to_string()
        })
    };
    for r in rows {
        out.push_str(&format!(
            "{:<32} {:<18} {:>9} {:>6} {:>7} {:>6} {:>6} {:>9}  {:<20} {:<20}\n",
            r.mailbox,
            r.kind,
            r.scheduled,
            r.queued,
            r.sending,
            r.sent,
            r.error,
            r.deferrals,
            time(r.oldest_due),
            time(r.next_scheduled)
        ));
    }
    out
}
