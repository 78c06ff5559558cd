//! `mail-worker suspend` and `resume`'s arguments.

use clap::Args;

use crate::import::campaign::MAX_CAMPAIGN_ID_CHARS;

/// Which mailbox, tenant or campaign: exactly one.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct SuspendScope {
    /// A sending mailbox (a system mailbox or a tenant's sender address): all its mail.
    #[arg(long)]
    pub mailbox: Option<String>,
    /// A Graph tenant id: its external mail (internal mail goes on).
    #[arg(long)]
    pub tenant: Option<String>,
    /// A campaign id (`campaignId`): its messages, on every sender.
    #[arg(long, value_parser = parse_campaign)]
    pub campaign: Option<String>,
}

/// `mail-worker suspend`.
#[derive(Debug, Clone, Args)]
pub struct SuspendArgs {
    /// What to suspend.
    #[command(flatten)]
    pub scope: SuspendScope,
    /// For how long, with a unit (`30m`, `2h`, `1d`); it ends by itself.
    #[arg(long = "for", value_parser = parse_for)]
    pub for_: std::time::Duration,
    /// Why, shown by `mailbox usage` and in the log line (one line, at most 200 characters).
    #[arg(long, value_parser = parse_reason)]
    pub reason: Option<String>,
}

/// A campaign id as a line's `campaignId` is stored: trimmed, not blank, at most 200
/// characters (a trial suspended `""` and a 300-character id, which no message can have).
fn parse_campaign(raw: &str) -> Result<String, String> {
    let id = raw.trim();
    let chars = id.chars().count();
    if id.is_empty() {
        return Err("a campaign id is not blank (a line's blank campaignId means none)".into());
    }
    if chars > MAX_CAMPAIGN_ID_CHARS {
        return Err(format!(
            "a campaign id is at most {MAX_CAMPAIGN_ID_CHARS} characters, as a line's campaignId (this one has {chars})"
        ));
    }
    Ok(id.to_owned())
}

/// A reason on one line of at most 200 characters (it is shown in a table row and a log line).
fn parse_reason(raw: &str) -> Result<String, String> {
    let reason = raw.trim();
    if reason.chars().any(char::is_control) {
        return Err("one line without control characters (no newline or tab)".into());
    }
    if reason.chars().count() > 200 {
        return Err("at most 200 characters".into());
    }
    Ok(reason.to_owned())
}

/// A duration from 1 s to 30 days.
fn parse_for(raw: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(raw.trim())
        .ok()
        .filter(|d| {
            *d >= std::time::Duration::from_secs(1)
                && *d <= std::time::Duration::from_secs(30 * 86_400)
        })
        .ok_or_else(|| format!("{raw:?}: a duration with a unit from 1s to 30d, e.g. 2h"))
}
