//! `mail-worker suspend` and `resume`'s arguments.

use clap::Args;

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
    #[arg(long)]
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
    /// Why, shown by `mailbox usage` and in the log line.
    #[arg(long)]
    pub reason: Option<String>,
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
