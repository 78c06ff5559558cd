//! `mail-worker senders import`, `senders verify` (the report of `crate::service::verify`) and `mailbox set-limits`: the senders' settings, with
//! warnings for limits above Exchange's and the bookings a limit change makes stale.

use std::{num::NonZeroU32, process::ExitCode};

use anyhow::Context;

use super::{SetLimits, out, read};
use crate::{
    config::Config,
    domain::MailboxAddress,
    import,
    plural::counted,
    reports::bookings,
    store::{self, senders},
};

/// `senders import FILE`: all or nothing, bad lines named.
pub(super) async fn import_file(
    config: &Config,
    file: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    // The file first: a bad one is named before PostgreSQL is asked anything.
    let text = read(file)?;
    let parsed = import::senders::parse(&text).with_context(|| file.display().to_string())?;
    let pool = store::open(&config.database_url, 4).await?;
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
    let (report, unbooked, due_now) = bookings::import_senders(config, &pool, &parsed)
        .await
        .with_context(|| file.display().to_string())?;
    // Pools only when the file has some (a fresh user's trial: the pools went unmentioned).
    let pools = match report.sender_pools {
        0 => String::new(),
        n => format!(" and {}", counted(n as u64, "sender pool", "sender pools")),
    };
    out(&format!(
        "imported {}{} {}{pools} from {}\n",
        counted(report.tenants as u64, "tenant", "tenants"),
        if pools.is_empty() { " and" } else { "," },
        counted(
            report.system_mailboxes as u64,
            "system mailbox",
            "system mailboxes"
        ),
        file.display()
    ));
    // As `mailbox set-limits`: the bookings the old limits (or the old tenant budget) made went,
    // their rows take fresh decisions under the new ones.
    if !report.limits_changed.is_empty() {
        out(&format!(
            "limits or tenant budget changed for {}: {} dropped, {} due now\n",
            counted(report.limits_changed.len() as u64, "sender", "senders"),
            counted(unbooked, "booking", "bookings"),
            counted(due_now, "message", "messages")
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// `mailbox set-limits ADDRESS …`: the new limits, then the mailbox's bookings dropped.
pub(super) async fn set_limits(config: &Config, args: SetLimits) -> anyhow::Result<ExitCode> {
    if !args.clear
        && args.per_minute.is_none()
        && args.recipients_per_day.is_none()
        && args.reserved_percent.is_none()
    {
        anyhow::bail!(
            "give --per-minute, --recipients-per-day and/or --reserved-percent, or --clear"
        );
    }
    let address = MailboxAddress::parse(&args.address)?;
    let pool = store::open(&config.database_url, 2).await?;
    let change = if args.clear {
        senders::LimitsChange::Clear
    } else {
        senders::LimitsChange::Set {
            per_minute: args.per_minute,
            recipients_per_day: args.recipients_per_day,
            reserved_percent: args.reserved_percent,
        }
    };
    let before = senders::overrides_of(&pool, &address).await?;
    let now = senders::set_limits(&pool, &address, change).await?;
    // The values given here, not the ones stored before (they were warned of when set).
    for warning in crate::config::above_exchange(
        args.per_minute.map(|v| ("--per-minute", v.get())),
        args.recipients_per_day
            .map(|v| ("--recipients-per-day", v.get())),
    ) {
        eprintln!("mail-worker: warning: {warning}");
    }
    let per_day = now
        .recipients_per_day
        .unwrap_or(config.rate_limit.defaults.recipients_per_day);
    let (over, most) = senders::waiting_above(&pool, &address, per_day).await?;
    if over > 0 {
        eprintln!(
            "mail-worker: warning: {} more recipients than the {per_day} a day now allowed \
             (up to {most}): each fails (RecipientsExceedDayLimit) when its turn comes, unless \
             the limit is raised again",
            counted(over, "waiting message has", "waiting messages have")
        );
    }
    let show = |v: Option<u32>| v.map_or("default".into(), |v| v.to_string());
    out(&format!(
        "{address}: per minute {}, recipients per day {}, reserved percent {}\n",
        show(now.per_minute.map(NonZeroU32::get)),
        show(now.recipients_per_day.map(NonZeroU32::get)),
        show(now.reserved_percent.map(u32::from))
    ));
    if before == Some(now) {
        // Nothing changed: the bookings the limits made still hold.
        out("limits unchanged: bookings kept\n");
        return Ok(ExitCode::SUCCESS);
    }
    let (unbooked, due_now) = bookings::after_limit_change(config, &pool, &address).await?;
    out(&format!(
        "{} dropped, {} due now (they take fresh decisions under the new limits)\n",
        counted(unbooked, "booking", "bookings"),
        counted(due_now, "message", "messages")
    ));
    Ok(ExitCode::SUCCESS)
}

/// `senders verify [ADDRESS…] [--send-test-to ADDRESS] [--json]`: the report as lines (or
/// JSON) on stdout; exit 1 when a check failed.
pub(super) async fn verify(
    config: &Config,
    addresses: Vec<String>,
    send_test_to: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use crate::service::verify::{VerifyOptions, verify_senders};
    let pool = store::open(&config.database_url, 2).await?;
    let options = VerifyOptions {
        addresses,
        send_test_to,
    };
    let report = verify_senders(
        config,
        &pool,
        &options,
        std::sync::Arc::new(crate::clock::SystemClock),
    )
    .await?;
    if json {
        out(&(serde_json::to_string_pretty(&report)? + "\n"));
    } else {
        out(&report.text());
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
