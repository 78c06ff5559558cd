//! `mail-worker status` and `mail-worker mailbox usage`: the shared reports printed as text or
//! JSON.

use std::process::ExitCode;

use crate::{
    config::Config,
    domain::MailboxAddress,
    reports::usage::{mailbox_usage, usage_page},
    store::{self, report},
};

use super::{out, status_table, usage_page_text, usage_text};

/// `status`: each sender's messages by status.
///
/// # Errors
/// PostgreSQL trouble.
pub(super) async fn status(config: &Config, json: bool) -> anyhow::Result<ExitCode> {
    let pool = store::open(&config.database_url, 2).await?;
    let rows = report::by_sender(&pool).await?;
    if json {
        out(&(serde_json::to_string_pretty(&rows)? + "\n"));
    } else {
        out(&status_table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}

/// `mailbox usage [ADDRESS]`: one mailbox's limits, live budget and messages; without an
/// address, page `page` of every mailbox, `per_page` a page.
///
/// # Errors
/// A bad address, a page past the last, PostgreSQL or Redis trouble.
pub(super) async fn usage(
    config: &Config,
    address: Option<String>,
    (page, per_page): (u32, u32),
    json: bool,
) -> anyhow::Result<ExitCode> {
    let pool = store::open(&config.database_url, 2).await?;
    let Some(address) = address else {
        let page = usage_page(config, &pool, page, per_page).await?;
        if let Some(past) = page.past_the_last() {
            anyhow::bail!(past);
        }
        out(&if json {
            serde_json::to_string_pretty(&page)? + "\n"
        } else {
            usage_page_text(&page)
        });
        return Ok(ExitCode::SUCCESS);
    };
    let usage = mailbox_usage(config, &pool, &MailboxAddress::parse(&address)?).await?;
    if json {
        out(&(serde_json::to_string_pretty(&usage)? + "\n"));
    } else {
        out(&usage_text(&usage));
    }
    Ok(ExitCode::SUCCESS)
}
