//! The commands' text output: `mailbox usage` and `messages show` as lines, `status`,
//! `messages list` and `suppressions list` as fixed-width tables.

use crate::{
    admin::usage::{MailboxUsage, UsagePage},
    store::{admin::MessageLine, report, suppressions::Suppression},
};

/// `suppressions list` as a fixed-width table.
pub(crate) fn suppression_lines(entries: &[Suppression]) -> String {
    let mut out = format!(
        "{:<40} {:<32} {:<7} {:<20} {}\n",
        "ADDRESS", "SCOPE", "SOURCE", "SINCE", "REASON"
    );
    for e in entries {
        out.push_str(&format!(
            "{:<40} {:<32} {:<7} {:<20} {}\n",
            e.address,
            e.scope_name,
            e.source,
            e.created_at.format("%Y-%m-%d %H:%M:%S"),
            e.reason
        ));
    }
    out
}

/// `t` in `format`, or `-` when there is none.
fn time_or_dash(t: Option<chrono::DateTime<chrono::Utc>>, format: &str) -> String {
    t.map_or("-".to_owned(), |t| t.format(format).to_string())
}

/// `mailbox usage` as lines.
pub(crate) fn usage_text(u: &MailboxUsage) -> String {
    let time = |t| time_or_dash(t, "%Y-%m-%d %H:%M:%S%.3f");
    // Every row: its label in a 20-character column, then its value.
    let mut out = String::new();
    let mut row = |label: &str, value: String| out.push_str(&format!("{label:<20}{value}\n"));
    row(
        "mailbox",
        format!("{} ({}, {})", u.mailbox, u.sender, u.provider),
    );
    row(
        "limits",
        format!(
            "{} per minute ({}), {} recipients per day ({}), {} % reserved for high ({})",
            u.limits.per_minute,
            u.limits.per_minute_source,
            u.limits.recipients_per_day,
            u.limits.recipients_per_day_source,
            u.limits.reserved_percent,
            u.limits.reserved_percent_source
        ),
    );
    match (&u.limiter, &u.limiter_error) {
        (Some(l), _) => {
            row(
                "limiter",
                format!(
                    "{}: {} sent in the last minute, {} in the last day, {} in flight, {} booked",
                    l.algorithm,
                    l.sent_last_minute,
                    crate::plural::counted(l.recipients_last_day, "recipient", "recipients"),
                    l.in_flight,
                    l.booked
                ),
            );
            row("cooldown until", time(l.cooldown_until));
            row("next free slot", time(l.next_free_slot));
        }
        (None, Some(e)) => row("limiter", format!("unreadable: {e}")),
        (None, None) => row("limiter", "none (SendGrid is not rate-limited)".to_owned()),
    }
    let counts: Vec<String> = u
        .messages
        .by_status
        .iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    row("messages", counts.join(", "));
    if let Some(ends) = u.backlog_ends {
        row(
            "waiting sent by",
            format!(
                "{} (forecast at these budgets)",
                ends.format("%Y-%m-%d %H:%M:%S UTC")
            ),
        );
    }
    if u.messages.paused > 0 {
        row(
            "PAUSED",
            format!(
                "{} messages wait: {}",
                u.messages.paused,
                u.messages.paused_reason.as_deref().unwrap_or("?")
            ),
        );
    }
    out
}

/// A page of `mailbox usage` as a fixed-width table, one mailbox a line, busiest first.
pub(crate) fn usage_page_text(p: &UsagePage) -> String {
    let mut out = format!(
        "{:<32} {:>7} {:>9} {:>7} {:>6} {:>9} {:>10} {:>6}\n",
        "mailbox", "per min", "per day", "minute", "24 h", "in flight", "SCHEDULED", "SENT"
    );
    for u in &p.mailboxes {
        let (minute, day, in_flight) = u.limiter.as_ref().map_or_else(
            || ("-".to_owned(), "-".to_owned(), "-".to_owned()),
            |l| {
                (
                    l.sent_last_minute.to_string(),
                    l.recipients_last_day.to_string(),
                    l.in_flight.to_string(),
                )
            },
        );
        let count = |s: &str| u.messages.by_status.get(s).copied().unwrap_or(0);
        out.push_str(&format!(
            "{:<32} {:>7} {:>9} {:>7} {:>6} {:>9} {:>10} {:>6}\n",
            u.mailbox,
            u.limits.per_minute,
            u.limits.recipients_per_day,
            minute,
            day,
            in_flight,
            count("SCHEDULED"),
            count("SENT"),
        ));
        if let Some(e) = &u.limiter_error {
            out.push_str(&format!("  limiter unreadable: {e}\n"));
        }
    }
    out.push_str(&format!(
        "page {} of {} ({} per page, {} mailboxes in all; busiest first {})\n",
        p.page,
        p.pages,
        p.per_page,
        p.total,
        p.order_freshness()
    ));
    out
}

/// The status report as a fixed-width table.
pub(crate) fn status_table(rows: &[report::SenderStatus]) -> String {
    let mut out = format!(
        "{:<32} {:<18} {:>9} {:>6} {:>7} {:>6} {:>6} {:>7} {:>9}  {:<20} {:<20}\n",
        "mailbox",
        "sender",
        "SCHEDULED",
        "paused",
        "SENDING",
        "SENT",
        "ERROR",
        "BOUNCED",
        "deferrals",
        "oldest due",
        "next scheduled"
    );
    let time = |t| time_or_dash(t, "%Y-%m-%d %H:%M:%S");
    for r in rows {
        out.push_str(&format!(
            "{:<32} {:<18} {:>9} {:>6} {:>7} {:>6} {:>6} {:>7} {:>9}  {:<20} {:<20}\n",
            r.mailbox,
            r.kind,
            r.scheduled,
            r.paused,
            r.sending,
            r.sent,
            r.error,
            r.bounced,
            r.deferrals,
            time(r.oldest_due),
            time(r.next_scheduled)
        ));
    }
    out
}

/// `messages list` as a table: one line per message, a SCHEDULED one's wait in words.
pub(crate) fn message_lines(lines: &[MessageLine]) -> String {
    let mut out = format!(
        "{:<36}  {:<9}  {:<28}  {:<19}  {}\n",
        "ID", "STATUS", "MAILBOX", "DUE (UTC)", "WAITING / LAST ERROR"
    );
    for m in lines {
        let note = m
            .waiting
            .as_deref()
            .or(m.last_error.as_deref())
            .unwrap_or("");
        out.push_str(&format!(
            "{:<36}  {:<9}  {:<28}  {:<19}  {note}\n",
            m.id,
            m.status,
            m.mailbox,
            m.scheduled_on.format("%Y-%m-%d %H:%M:%S"),
        ));
    }
    out
}

/// `messages show` as lines.
pub(crate) fn message_text(m: &MessageLine) -> String {
    let mut out = format!(
        "id          {}\nstatus      {}\nmailbox     {}\nto          {}\nsubject     {}\nattempts    {} ({} deferrals)\ndue         {}\nchanged     {}\n",
        m.id,
        m.status,
        m.mailbox,
        m.to,
        m.subject,
        m.attempts,
        m.deferrals,
        m.scheduled_on.format("%Y-%m-%d %H:%M:%S UTC"),
        m.updated_at.format("%Y-%m-%d %H:%M:%S UTC"),
    );
    if let Some(w) = &m.waiting {
        out.push_str(&format!("waiting     {w}\n"));
    }
    if let Some(b) = &m.bounce {
        out.push_str(&format!("bounced     {b}\n"));
    }
    if let Some(e) = &m.last_error {
        out.push_str(&format!("last error  {e}\n"));
    }
    out
}
