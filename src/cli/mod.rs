//! The `mail-worker` command line: what each subcommand does ([`main`], `execute`); the
//! subcommands themselves in `args.rs`, `run`'s flags (one per declared setting) in
//! `run_args.rs`, text output in `tables.rs`; `messages`, `queue`, `campaign`,
//! `suppressions` and `enqueue` in their own files, `status` and `mailbox usage` in `reports.rs`,
//! `senders import`, `senders verify` and `mailbox set-limits` in `sender_settings.rs`.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use crate::{
    config::Config,
    log_events,
    store::{self, admin},
};

mod args;
mod campaign;
mod enqueue;
mod messages;
mod outbox;
mod queue;
mod reports;
mod run_args;
mod sender_settings;
mod suppressions;
mod suspend;
mod tables;

pub use args::{
    BulkArgs, CampaignCommand, Cli, Command, EventsCommand, ListArgs, MailboxCommand,
    MessagesCommand, PurgeArgs, Selection, SendersCommand, SetLimits, SuppressionsCommand,
};
pub use run_args::RunArgs;
pub(crate) use tables::{status_table, usage_page_text, usage_text};

/// The `mail-worker` binary's whole life: parse the command line, read the config (a bad value
/// exits 78, `EX_CONFIG`), set up JSON logging, run the command, and report why it exited.
pub async fn main() -> ExitCode {
    let cli = Cli::parse();
    let overrides = match &cli.command {
        Command::Run(args) | Command::Admin(args) => args.overrides.clone(),
        _ => Vec::new(),
    };
    let config = match Config::from_lookup_all(|name| {
        overrides
            .iter()
            .find(|(var, _)| *var == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(name).ok())
    }) {
        Ok(config) => config,
        Err(errors) => {
            // Every bad variable, one line each, so one fix-and-retry round fixes them all.
            for e in errors {
                eprintln!("mail-worker: bad configuration: {e}");
            }
            return ExitCode::from(78); // EX_CONFIG
        }
    };
    crate::telemetry::init(config.log_format, &config.log_filter);
    let daemon = matches!(cli.command, Command::Run(_) | Command::Admin(_));
    match execute(cli, config).await {
        Ok(code) => code,
        Err(e) => {
            let shown = format!("{e:#}{}", advice(&e));
            // A command's as a plain line; the daemon's also as a JSON log line first (its
            // stderr is a log stream), the plain line after it for a person reading
            // `kubectl logs` or a terminal.
            if daemon {
                tracing::error!(
                    event = log_events::DAEMON_STOPPED,
                    error = shown,
                    "mail-worker failed"
                );
            }
            eprintln!("mail-worker: {shown}");
            if e.downcast_ref::<crate::config::ConfigError>().is_some()
                || e.chain().any(|c| {
                    c.downcast_ref::<crate::rate_limit::adaptive::AdaptiveRulesError>()
                        .is_some()
                })
            {
                // EX_CONFIG, as for a bad variable read at start (and `check-config`'s answer
                // to the same rules file).
                ExitCode::from(78)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// What to do about `error`, said after it (`""` when there is nothing to add): a database
/// missing or behind is fixed by `mail-worker migrate`, a system mailbox comes from
/// `mail-worker senders import`. The store says what is wrong; the command line, what to run.
fn advice(error: &anyhow::Error) -> &'static str {
    match error
        .chain()
        .find_map(|e| e.downcast_ref::<store::StoreError>())
    {
        Some(store::StoreError::MissingDatabase(_)) => ": run `mail-worker migrate` to create it",
        Some(store::StoreError::NotMigrated { .. }) => ": run `mail-worker migrate`",
        Some(store::StoreError::NotFound {
            entity: store::Entity::SystemMailbox,
            ..
        }) => {
            " (system mailboxes come from `mail-worker senders import`; tenant senders always use the default limits)"
        }
        _ => "",
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
            tracing::info!(event = log_events::DB_MIGRATED, "migrations applied");
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig => Ok(check_config(&config)),
        Command::Run(_) => crate::daemon::run(config).await,
        Command::Admin(_) => crate::admin::run(config).await,
        Command::Senders(SendersCommand::Import { file }) => {
            sender_settings::import_file(&config, &file).await
        }
        Command::Senders(SendersCommand::Verify {
            addresses,
            send_test_to,
            json,
        }) => sender_settings::verify(&config, addresses, send_test_to, json).await,
        Command::Mailbox(MailboxCommand::SetLimits(args)) => {
            sender_settings::set_limits(&config, args).await
        }
        // A dry run pushes nothing: it checks the lines as the import would (the branch below).
        Command::Enqueue {
            file,
            via,
            dry_run: false,
            ..
        } if via == "queue" => enqueue::push_file(&config, &file).await,
        Command::Queue(command) => queue::queue_command(&config, command).await,
        Command::Suppressions(command) => {
            suppressions::suppressions_command(&config, command).await
        }
        Command::Events(command) => outbox::events_command(&config, command).await,
        Command::Campaign(command) => campaign::campaign_command(&config, command).await,
        Command::Enqueue { file, dry_run, .. } => {
            enqueue::insert_file(&config, &file, dry_run).await
        }
        Command::Mailbox(MailboxCommand::Usage {
            address,
            page,
            per_page,
            json,
        }) => reports::usage(&config, address, (page, per_page), json).await,
        Command::Messages(command) => match command {
            MessagesCommand::Retry(args) => {
                messages::bulk(&config, admin::BulkAction::Retry, &args).await
            }
            MessagesCommand::Cancel(args) => {
                messages::bulk(&config, admin::BulkAction::Cancel, &args).await
            }
            MessagesCommand::List(args) => messages::list_messages(&config, &args).await,
            MessagesCommand::Show { id, json } => messages::show_message(&config, id, json).await,
            MessagesCommand::Purge(args) => messages::purge_messages(&config, &args).await,
        },
        Command::Suspend(args) => suspend::suspend(&config, &args).await,
        Command::Resume(scope) => suspend::resume(&config, &scope).await,
        Command::Probe { addr, path } => probe(&config, addr, &path).await,
        Command::Status { json } => reports::status(&config, json).await,
    }
}

/// `check-config`: the settings with secrets redacted, the warnings, and exit 78 (`EX_CONFIG`)
/// when a set `ADMIN_TOKEN` or the webhooks' secret is bad (both named when both are).
fn check_config(config: &Config) -> ExitCode {
    out(&(config.redacted_lines().join("\n") + "\n"));
    for warning in config
        .warnings()
        .into_iter()
        .chain(Config::environment_warnings())
    {
        eprintln!("mail-worker: warning: {warning}");
    }
    // A set ADMIN_TOKEN is checked as `mail-worker admin` would (unset is fine: only the admin
    // UI needs it), the webhooks' secret as `run` reads it (its reference resolved, its
    // length), the adaptive rules file, the senders file and the ingest listener's tokens.
    let admin = config
        .admin
        .token
        .as_ref()
        .and_then(|token| crate::admin::AdminToken::resolve(Some(token)).err());
    let outbox = crate::outbox::OutboxSettings::from_config(config).err();
    let rules = crate::rate_limit::adaptive::load_rules(
        config.settings.limiter.adaptive_rules_file.as_deref(),
    )
    .err()
    .map(|e| e.to_string());
    // SENDERS_FILE as `run` reads it at start-up: every entry checked, nothing written.
    let senders = config
        .senders_file
        .as_deref()
        .and_then(|path| crate::daemon::check_senders_file(path).err())
        .map(|e| format!("{e:#}"));
    // The ingest listener's tokens as `run` resolves them when INGEST_LISTEN is set (their
    // references, lengths, INGEST_TOKENS_FILE); nothing is bound.
    let ingest = config.ingest.listen.and_then(|_| {
        crate::ingest::IngestSettings::from_config(&config.ingest, config.events.outbox())
            .err()
            .map(|e| e.to_string())
    });
    let bad: Vec<String> = admin
        .into_iter()
        .chain(outbox)
        .map(|e| e.to_string())
        .chain(rules)
        .chain(senders)
        .chain(ingest)
        .collect();
    for e in &bad {
        eprintln!("mail-worker: bad configuration: {e}");
    }
    if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(78) // EX_CONFIG
    }
}

/// `probe [ADDR] PATH`: one GET of the daemon's `/healthz` or `/readyz`, its status and body
/// printed; fails unless it answered 2xx.
///
/// # Errors
/// `METRICS_LISTEN` off and no address given, or no answer.
async fn probe(
    config: &Config,
    addr: Option<std::net::SocketAddr>,
    path: &str,
) -> anyhow::Result<ExitCode> {
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

/// Writes to stdout; a closed pipe (`mail-worker status | head`) is not an error.
fn out(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn read(path: &std::path::Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}
