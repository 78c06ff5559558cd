//! The `mail-worker` command line: subcommands and what each does ([`main`], `execute`); the
//! daemon's variables as `run`'s flags are in `env_vars.rs`, the text output in `tables.rs`.

use std::{num::NonZeroU32, path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::{
    admin::usage::mailbox_usage,
    config::Config,
    domain::{MailboxAddress, MessageStatus},
    events, import,
    store::{self, admin, report, senders},
};

mod env_vars;
mod tables;

pub use env_vars::{ENV_VARS, EnvVar, RunArgs};
pub(crate) use tables::{status_table, usage_text};

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
    },
    /// Retry or cancel messages, by filter (instead of SQL).
    #[command(subcommand)]
    Messages(MessagesCommand),
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
    /// A mailbox's limits, its live budget as the limiter counts it, and its messages.
    Usage {
        /// The mailbox's address (a system mailbox or a tenant's sender).
        address: String,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
}

/// `mail-worker messages …`
#[derive(Debug, Subcommand)]
pub enum MessagesCommand {
    /// Put messages back to SCHEDULED, due now, attempts reset (default: --status ERROR).
    Retry(MessageArgs),
    /// End messages that were not sent yet (default: --status SCHEDULED) as ERROR "cancelled".
    Cancel(MessageArgs),
}

/// The filters of `messages retry|cancel` (all given ones must hold).
#[derive(Debug, Args)]
pub struct MessageArgs {
    /// A sender: system mailbox or tenant sender address, or tenant name.
    #[arg(long)]
    pub sender: Option<String>,
    /// Status: retry takes ERROR (default) or SCHEDULED; cancel SCHEDULED.
    #[arg(long)]
    pub status: Option<String>,
    /// Only messages whose last error contains this text (case-insensitive).
    #[arg(long)]
    pub error_like: Option<String>,
    /// Only this message (repeatable).
    #[arg(long = "id")]
    pub ids: Vec<uuid::Uuid>,
    /// Count what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
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
    let overrides = match &cli.command {
        Command::Run(args) | Command::Admin(args) => args.overrides.clone(),
        _ => Vec::new(),
    };
    let config = match Config::from_lookup(|name| {
        overrides
            .iter()
            .find(|(var, _)| *var == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(name).ok())
    }) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("mail-worker: bad configuration: {e}");
            return ExitCode::from(78); // EX_CONFIG
        }
    };
    crate::telemetry::init(config.log_format, &config.log_filter);
    let daemon = matches!(cli.command, Command::Run(_) | Command::Admin(_));
    match execute(cli, config).await {
        Ok(code) => code,
        Err(e) => {
            // Once: the daemon's as a JSON log line (its stderr is a log stream), a command's
            // as a plain line.
            if daemon {
                tracing::error!(
                    event = events::DAEMON_STOPPED,
                    error = format!("{e:#}"),
                    "mail-worker failed"
                );
            } else {
                eprintln!("mail-worker: {e:#}");
            }
            if e.downcast_ref::<crate::config::ConfigError>().is_some() {
                ExitCode::from(78) // EX_CONFIG, as for a bad variable read at start
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Runs `cli` with `config`; returns the process exit code.
///
/// # Errors
/// Any failure, with its cause chain, for `main` to print.
pub(crate) async fn execute(cli: Cli, config: Config) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Migrate => {
            store::migrate(&config.database_url).await?;
            tracing::info!(event = events::DB_MIGRATED, "migrations applied");
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig => {
            out(&(config.redacted_lines().join("\n") + "\n"));
            for warning in config.warnings() {
                eprintln!("mail-worker: warning: {warning}");
            }
            // A set ADMIN_TOKEN is checked as `mail-worker admin` would (unset is fine: only
            // the admin UI needs it).
            if config.admin.token.is_some() {
                crate::admin::AdminToken::resolve(config.admin.token.as_ref())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(_) => crate::daemon::run(config).await,
        Command::Admin(_) => crate::admin::run(config).await,
        Command::Senders(SendersCommand::Import { file }) => {
            let pool = store::open(&config.database_url, 4).await?;
            let text = read(&file)?;
            let parsed =
                import::senders::parse(&text).with_context(|| file.display().to_string())?;
            for mailbox in &parsed.system_mailboxes {
                let per_minute = mailbox.rate_limit_per_minute;
                let per_day = mailbox.rate_limit_recipients_per_day;
                let name = |field: &str| format!("{} {}: {field}", file.display(), mailbox.address);
                let (minute_name, day_name) = (
                    name("rateLimitPerMinute"),
                    name("rateLimitRecipientsPerDay"),
                );
                for warning in crate::config::above_exchange(
                    per_minute.map(|v| (minute_name.as_str(), v)),
                    per_day.map(|v| (day_name.as_str(), v)),
                ) {
                    eprintln!("mail-worker: warning: {warning}");
                }
            }
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
            let pool = store::open(&config.database_url, 2).await?;
            let change = if args.clear {
                senders::LimitsChange::Clear
            } else {
                senders::LimitsChange::Set {
                    per_minute: args.per_minute,
                    recipients_per_day: args.recipients_per_day,
                }
            };
            let (per_minute, per_day) = senders::set_limits(&pool, &address, change).await?;
            for warning in crate::config::above_exchange(
                per_minute.map(|v| ("--per-minute", v.get())),
                per_day.map(|v| ("--recipients-per-day", v.get())),
            ) {
                eprintln!("mail-worker: warning: {warning}");
            }
            let show = |v: Option<NonZeroU32>| v.map_or("default".into(), |v| v.to_string());
            out(&format!(
                "{address}: per minute {}, recipients per day {}\n",
                show(per_minute),
                show(per_day)
            ));
            Ok(ExitCode::SUCCESS)
        }
        Command::Enqueue { file, dry_run } => {
            let pool = store::open(&config.database_url, 4).await?;
            let bytes =
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let import::Enqueued {
                inserted,
                good: total,
                bad,
            } = if dry_run {
                import::check(&pool, &bytes).await?
            } else {
                import::enqueue(&pool, &bytes).await?
            };
            for entry in &bad {
                eprintln!("{}:{entry}", file.display());
            }
            out(&format!(
                "{inserted} messages {}, {} already present, {} bad lines{}\n",
                if dry_run {
                    "would be inserted"
                } else {
                    "inserted"
                },
                total - inserted as usize,
                bad.len(),
                if dry_run {
                    " (dry run: nothing written)"
                } else {
                    ""
                }
            ));
            Ok(if bad.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Mailbox(MailboxCommand::Usage { address, json }) => {
            let address = MailboxAddress::parse(&address)?;
            let pool = store::open(&config.database_url, 2).await?;
            let usage = mailbox_usage(&config, &pool, &address).await?;
            if json {
                out(&(serde_json::to_string_pretty(&usage)? + "\n"));
            } else {
                out(&usage_text(&usage));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Messages(command) => {
            let (retry, args) = match command {
                MessagesCommand::Retry(args) => (true, args),
                MessagesCommand::Cancel(args) => (false, args),
            };
            let filter = admin::MessageFilter {
                sender: args.sender.clone(),
                status: match &args.status {
                    None => None,
                    Some(s) => Some(s.to_ascii_uppercase().parse::<MessageStatus>().map_err(
                        |_| anyhow::anyhow!("--status {s}: not one of {}", MessageStatus::NAMES),
                    )?),
                },
                error_like: args.error_like.clone(),
                ids: args.ids.clone(),
            };
            let pool = store::open(&config.database_url, 2).await?;
            let action = if retry {
                admin::BulkAction::Retry
            } else {
                admin::BulkAction::Cancel
            };
            let changed = action.apply(&pool, &filter, args.dry_run).await?;
            if args.json {
                out(&(serde_json::to_string_pretty(&changed)? + "\n"));
            } else {
                let verb = if retry { "retried" } else { "cancelled" };
                out(&if changed.dry_run {
                    format!(
                        "{} messages match; dry run: nothing {verb}\n",
                        changed.matched
                    )
                } else {
                    format!(
                        "{} messages {verb} ({} matched)\n",
                        changed.changed, changed.matched
                    )
                });
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Probe { addr, path } => {
            let mut addr = addr
                .or(config.metrics_listen)
                .context("METRICS_LISTEN is off: nothing to probe")?;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            let url = format!("http://{addr}{path}");
            let client = reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(3))
                .build()?;
            let answer = client
                .get(&url)
                .send()
                .await
                .with_context(|| format!("METRICS_LISTEN ({addr}): no answer"))?;
            let status = answer.status();
            let body = answer.text().await.unwrap_or_default();
            out(&format!("{status} {body}\n"));
            Ok(if status.is_success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Status { json } => {
            let pool = store::open(&config.database_url, 2).await?;
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
