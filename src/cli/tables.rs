//! The commands' text output: `mailbox usage` as lines, `status` as a fixed-width table.

use crate::{admin::usage::MailboxUsage, store::report};

/// `mailbox usage` as lines.
pub(crate) fn usage_text(u: &MailboxUsage) -> String {
    let time = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map_or("-".to_owned(), |t| {
            t.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
        })
    };
    let mut out = format!(
        "mailbox             {} ({}, {})\nlimits              {} per minute ({}), {} recipients per day ({})\n",
        u.mailbox,
        u.sender,
        u.provider,
        u.limits.per_minute,
        u.limits.per_minute_source,
        u.limits.recipients_per_day,
        u.limits.recipients_per_day_source
    );
    match (&u.limiter, &u.limiter_error) {
        (Some(l), _) => out.push_str(&format!(
            "limiter ({})   {} sent in the last minute, {} recipients in the last day, {} in flight, {} booked\ncooldown until      {}\nnext free slot      {}\n",
            l.algorithm,
            l.sent_last_minute,
            l.recipients_last_day,
            l.in_flight,
            l.booked,
            time(l.cooldown_until),
            time(l.next_free_slot)
        )),
        (None, Some(e)) => out.push_str(&format!("limiter             unreadable: {e}\n")),
        (None, None) => out.push_str("limiter             none (SendGrid is not rate-limited)\n"),
    }
    let counts: Vec<String> = u
        .messages
        .by_status
        .iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    out.push_str(&format!("messages            {}\n", counts.join(", ")));
    if u.messages.paused > 0 {
        out.push_str(&format!(
            "PAUSED              {} messages wait: {}\n",
            u.messages.paused,
            u.messages.paused_reason.as_deref().unwrap_or("?")
        ));
    }
    out
}

/// The status report as a fixed-width table.
pub(crate) fn status_table(rows: &[report::SenderStatus]) -> String {
    let mut out = format!(
        "{:<32} {:<18} {:>9} {:>6} {:>7} {:>6} {:>6} {:>9}  {:<20} {:<20}\n",
        "mailbox",
        "sender",
        "SCHEDULED",
        "paused",
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
            r.paused,
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
