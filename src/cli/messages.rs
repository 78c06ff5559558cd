//! `mail-worker messages list|show|retry|cancel|purge`, and the selection `list|retry|cancel`
//! share.

use std::process::ExitCode;

use super::{ListArgs, PurgeArgs, Selection, args::BulkArgs, out, tables};
use crate::{
    config::{Config, ZERO, parse_duration},
    domain::{MessageStatus, mask_address},
    log_events,
    plural::counted,
    store::{self, admin, retention},
};

/// `messages retry|cancel` without `--sender`, `--id` or `--error-like` would take every
/// message of the status: refused unless `--all` says so (a dry run only counts, so it may go
/// without).
fn refuse_unfiltered(args: &BulkArgs, action: admin::BulkAction) -> anyhow::Result<()> {
    let s = &args.args.selection;
    let narrowed = s.sender.is_some() || s.error_like.is_some() || !s.ids.is_empty();
    if narrowed || args.all || args.args.dry_run {
        return Ok(());
    }
    let (command, every) = match action {
        admin::BulkAction::Retry => ("retry", "retry every ERROR message (or of --status)"),
        admin::BulkAction::Cancel => ("cancel", "cancel every unsent (SCHEDULED) message"),
    };
    anyhow::bail!(
        "messages {command}: no filter given, so this would {every}; narrow it with --sender, \
         --id or --error-like, or give --all to {command} them all (--dry-run counts them first)"
    )
}

/// `messages retry|cancel`: apply `action` to the selection, print the counts, and log one
/// line of what changed (counts and filters, addresses masked) unless it was a dry run.
pub(super) async fn bulk(
    config: &Config,
    action: admin::BulkAction,
    bulk: &BulkArgs,
) -> anyhow::Result<ExitCode> {
    refuse_unfiltered(bulk, action)?;
    let args = &bulk.args;
    let filter = selected(&args.selection)?;
    let pool = store::open(&config.database_url, 2).await?;
    let changed = action
        .apply(&pool, &filter, args.dry_run, config.events.outbox())
        .await?;
    crate::reports::bookings::unbook_messages(config, &pool, &changed.changed_ids).await?;
    let (verb, event) = match action {
        admin::BulkAction::Retry => ("retried", log_events::MAIL_CLI_MESSAGES_RETRIED),
        admin::BulkAction::Cancel => ("cancelled", log_events::MAIL_CLI_MESSAGES_CANCELLED),
    };
    if !changed.dry_run {
        let s = &args.selection;
        let masked = |text: &str| {
            text.split_whitespace()
                .map(|word| {
                    if word.contains('@') {
                        mask_address(word)
                    } else {
                        word.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        tracing::info!(
            event,
            matched = changed.matched,
            changed = changed.changed,
            sender = s.sender.as_deref().map(masked),
            status = filter.status.map(|status| status.as_str()),
            error_like = s.error_like.as_deref().map(masked),
            ids = s.ids.len(),
            all = s.sender.is_none() && s.error_like.is_none() && s.ids.is_empty(),
            "messages {verb} by an operator (mail-worker messages)"
        );
    }
    if args.json {
        out(&(serde_json::to_string_pretty(&changed)? + "\n"));
    } else if changed.dry_run {
        out(&format!(
            "{} match; dry run: nothing {verb}\n",
            counted(changed.matched, "message", "messages")
        ));
    } else {
        out(&format!(
            "{} {verb} ({} matched)\n",
            counted(changed.changed, "message", "messages"),
            changed.matched
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// The filter of `messages list|retry|cancel`; `--status` in any case.
pub(super) fn selected(selection: &Selection) -> anyhow::Result<admin::MessageFilter> {
    Ok(admin::MessageFilter {
        sender: selection.sender.clone(),
        status: selection
            .status
            .as_deref()
            .map(|s| {
                s.to_ascii_uppercase()
                    .parse::<MessageStatus>()
                    .map_err(|_| {
                        anyhow::anyhow!("--status {s}: not one of {}", MessageStatus::NAMES)
                    })
            })
            .transpose()?,
        error_like: selection.error_like.clone(),
        ids: selection.ids.clone(),
    })
}

/// `messages list`.
pub(super) async fn list_messages(config: &Config, args: &ListArgs) -> anyhow::Result<ExitCode> {
    let filter = selected(&args.selection)?;
    let pool = store::open(&config.database_url, 2).await?;
    let lines = admin::list(&pool, &filter, args.limit).await?;
    if args.json {
        out(&(serde_json::to_string_pretty(&lines)? + "\n"));
    } else {
        out(&tables::message_lines(&lines));
    }
    Ok(ExitCode::SUCCESS)
}

/// `messages show ID`: the message, then each recipient's fate (the message trace's or an
/// NDR's; addresses masked).
pub(super) async fn show_message(
    config: &Config,
    id: uuid::Uuid,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let filter = admin::MessageFilter {
        ids: vec![id],
        ..Default::default()
    };
    let pool = store::open(&config.database_url, 2).await?;
    let Some(line) = admin::list(&pool, &filter, 1).await?.pop() else {
        anyhow::bail!("no message {id}");
    };
    let fates = store::outcomes::of_message(&pool, id).await?;
    if json {
        let mut json = serde_json::to_value(&line)?;
        json["recipients"] = serde_json::to_value(&fates)?;
        out(&(serde_json::to_string_pretty(&json)? + "\n"));
    } else {
        out(&tables::message_text(&line));
        out(&tables::fates_text(&fates));
    }
    Ok(ExitCode::SUCCESS)
}

/// `messages purge --older-than D [--dry-run]`: a retention round now (refused under 24 h, and
/// while a replica's round holds the lock).
pub(super) async fn purge_messages(config: &Config, args: &PurgeArgs) -> anyhow::Result<ExitCode> {
    let given = args.older_than.trim();
    let older_than = match parse_duration(given) {
        Ok(d) if d >= retention::MIN_RETENTION => d,
        Ok(_) => anyhow::bail!("--older-than {given}: {}", retention::TOO_SHORT),
        Err(problem) if problem == ZERO => {
            anyhow::bail!("--older-than {given}: {}", retention::TOO_SHORT)
        }
        Err(problem) => anyhow::bail!("--older-than {given}: {problem}"),
    };
    let pool = store::open(&config.database_url, 2).await?;
    let purged = if args.dry_run {
        retention::count(&pool, older_than).await?
    } else {
        let never = crate::shutdown::CancellationToken::new();
        retention::purge(&pool, older_than, retention::PAUSE, never)
            .await?
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "another process is purging now (a replica's MAIL_RETENTION round holds the lock): nothing deleted, try again later"
                )
            })?
    };
    if args.json {
        let mut json = serde_json::to_value(purged)?;
        json["dry_run"] = args.dry_run.into();
        out(&(serde_json::to_string_pretty(&json)? + "\n"));
    } else if args.dry_run {
        out(&format!(
            "{} messages ({} attachments) finished more than {given} ago; dry run: nothing deleted\n",
            purged.messages, purged.attachments
        ));
    } else {
        out(&format!(
            "{} messages deleted ({} attachments, {}), finished more than {given} ago\n",
            purged.messages,
            purged.attachments,
            crate::plural::counted(purged.batches, "batch", "batches")
        ));
    }
    Ok(ExitCode::SUCCESS)
}
