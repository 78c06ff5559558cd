//! `mail-worker messages list|show`, and the selection `list|retry|cancel` share.

use std::process::ExitCode;

use super::{ListArgs, Selection, out, tables};
use crate::{
    config::Config,
    domain::MessageStatus,
    store::{self, admin},
};

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

/// `messages show ID`.
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
    if json {
        out(&(serde_json::to_string_pretty(&line)? + "\n"));
    } else {
        out(&tables::message_text(&line));
    }
    Ok(ExitCode::SUCCESS)
}
