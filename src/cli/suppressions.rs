//! `mail-worker suppressions list|add|remove|import`: the suppression list
//! ([`crate::store::suppressions`]); a scope is a system mailbox's address or a tenant's name.

use std::{path::Path, process::ExitCode};

use anyhow::Context;
use sqlx::PgPool;

use super::{args::SuppressionsCommand, out, tables};
use crate::{
    config::Config,
    domain::SuppressionSource,
    import::{self, campaign::unknown_scope},
    plural::counted,
    store::{self, messages::SenderRef, suppressions},
};

/// The sender `name` names.
async fn scope(pool: &PgPool, name: &str) -> anyhow::Result<SenderRef> {
    import::sender_directory(pool)
        .await?
        .scope(name)
        .ok_or_else(|| anyhow::anyhow!("--scope: {}", unknown_scope(name)))
}

/// `mail-worker suppressions …`.
pub(super) async fn suppressions_command(
    config: &Config,
    command: SuppressionsCommand,
) -> anyhow::Result<ExitCode> {
    let pool = store::open(&config.database_url, 2).await?;
    match command {
        SuppressionsCommand::List {
            scope: name,
            limit,
            json,
        } => {
            let filter = suppressions::Filter {
                scope: match &name {
                    Some(name) => Some(scope(&pool, name).await?),
                    None => None,
                },
                address_contains: None,
            };
            let entries = suppressions::list(&pool, filter, limit, 0).await?;
            if json {
                out(&(serde_json::to_string_pretty(&entries)? + "\n"));
            } else {
                let total = suppressions::count(&pool, filter).await?;
                out(&tables::suppression_lines(&entries));
                out(&format!(
                    "{} shown of {}\n",
                    entries.len(),
                    counted(total as u64, "entry", "entries")
                ));
            }
        }
        SuppressionsCommand::Add {
            address,
            scope: name,
            reason,
        } => {
            let sender = scope(&pool, &name).await?;
            let added = suppressions::add(
                &pool,
                sender,
                &address,
                reason.as_deref().unwrap_or_default(),
                SuppressionSource::Manual,
            )
            .await?;
            out(&if added {
                format!("{} suppressed for {}\n", address.trim(), name.trim())
            } else {
                format!(
                    "{} was suppressed for {} already (its entry is kept)\n",
                    address.trim(),
                    name.trim()
                )
            });
        }
        SuppressionsCommand::Remove {
            address,
            scope: name,
        } => {
            let sender = scope(&pool, &name).await?;
            if !suppressions::remove(&pool, sender, &address).await? {
                anyhow::bail!("{} is not suppressed for {}", address.trim(), name.trim());
            }
            out(&format!(
                "{} removed from the list of {}\n",
                address.trim(),
                name.trim()
            ));
        }
        SuppressionsCommand::Import { file } => return import_csv(&pool, &file).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// `suppressions import FILE.csv`: every bad line on stderr and exit 1, nothing imported.
async fn import_csv(pool: &PgPool, file: &Path) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    match import::suppressions::import(pool, &bytes).await {
        Ok(done) => {
            out(&format!(
                "{} added from {} ({} already listed)\n",
                counted(done.added, "entry", "entries"),
                file.display(),
                done.entries as u64 - done.added
            ));
            Ok(ExitCode::SUCCESS)
        }
        Err(import::suppressions::CsvError::BadLines(bad)) => {
            for entry in &bad {
                eprintln!("{}:{entry}", file.display());
            }
            eprintln!(
                "mail-worker: {} in {}: nothing imported",
                counted(bad.len() as u64, "bad line", "bad lines"),
                file.display()
            );
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}
