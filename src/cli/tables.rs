//! The commands' text output: `mailbox usage` and `messages show` as lines, `status`,
//! `messages list` and `suppressions list` as fixed-width tables.

use crate::{
    reports::usage::{MailboxUsage, UsagePage},
    store::{admin::MessageLine, outcomes::RecipientFate, report, suppressions::Suppression},
};

/// One column of a fixed-width table: its title and width, values to its left (text) or
/// right (counts).
enum Column {
    Left(&'static str, usize),
    Right(&'static str, usize),
}
use Column::{Left, Right};

/// A fixed-width table: its columns are given once, so a header and its rows cannot drift
/// apart; `gap` stands between columns.
struct Table {
    columns: &'static [Column],
    gap: &'static str,
    out: String,
}

impl Table {
    /// The table with its header line.
    fn new(gap: &'static str, columns: &'static [Column]) -> Self {
        let mut table = Self {
            columns,
            gap,
            out: String::new(),
        };
        table.row(
            columns
                .iter()
                .map(|(Left(title, _) | Right(title, _))| (*title).to_owned()),
        );
        table
    }

    /// One line: a value per column, in order.
    fn row(&mut self, values: impl IntoIterator<Item = String>) {
        for (i, (c, v)) in self.columns.iter().zip(values).enumerate() {
            if i > 0 {
                self.out.push_str(self.gap);
            }
            self.out.push_str(&match *c {
                Left(_, w) => format!("{v:<w$}"),
                Right(_, w) => format!("{v:>w$}"),
            });
        }
        self.out.push('\n');
    }
}

/// `suppressions list` as a fixed-width table.
pub(crate) fn suppression_lines(entries: &[Suppression]) -> String {
    const COLUMNS: &[Column] = &[
        Left("ADDRESS", 40),
        Left("SCOPE", 32),
        Left("SOURCE", 7),
        Left("SINCE", 20),
        Left("REASON", 0),
    ];
    let mut table = Table::new(" ", COLUMNS);
    for e in entries {
        table.row([
            e.address.clone(),
            e.scope_name.clone(),
            e.source.to_string(),
            e.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            e.reason.clone(),
        ]);
    }
    table.out
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
    if !u.pools.is_empty() {
        row("pools", u.pools.join(", "));
    }
    if let Some(w) = &u.warm_up {
        row("warm-up", w.describe());
    }
    for action in &u.adaptive {
        row("adaptive", action.clone());
    }
    // SendGrid is not rate-limited here: Graph's defaults would be shown as if they applied
    // (a trial found a pool's SendGrid overflow sender shown at 25 a minute).
    let limits = if u.provider == "sendgrid" {
        "none here (SendGrid: its own plan's limits apply)".to_owned()
    } else {
        format!(
            "{} per minute ({}), {} recipients per day ({}), {} % reserved for high ({})",
            u.limits.per_minute,
            u.limits.per_minute_source,
            u.limits.recipients_per_day,
            u.limits.recipients_per_day_source,
            u.limits.reserved_percent,
            u.limits.reserved_percent_source
        )
    };
    row("limits", limits);
    match (&u.limiter, &u.limiter_error) {
        (Some(l), _) => {
            row(
                "limiter",
                format!(
                    "{}: {} sent in the last minute, {} in the last day, {} in flight, {} booked ({} booked ahead)",
                    l.algorithm,
                    l.sent_last_minute,
                    crate::plural::counted(l.recipients_last_day, "recipient", "recipients"),
                    l.in_flight,
                    l.booked,
                    crate::plural::counted(l.recipients_booked, "recipient", "recipients")
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
    const COLUMNS: &[Column] = &[
        Left("mailbox", 32),
        Right("per min", 7),
        Right("per day", 9),
        Right("minute", 7),
        Right("24 h", 6),
        Right("in flight", 9),
        Right("SCHEDULED", 10),
        Right("SENT", 6),
    ];
    let mut table = Table::new(" ", COLUMNS);
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
        let limit = |n: u32| {
            if u.provider == "sendgrid" {
                "-".to_owned()
            } else {
                n.to_string()
            }
        };
        table.row([
            u.mailbox.clone(),
            limit(u.limits.per_minute),
            limit(u.limits.recipients_per_day),
            minute,
            day,
            in_flight,
            count("SCHEDULED").to_string(),
            count("SENT").to_string(),
        ]);
        if !u.pools.is_empty() {
            table
                .out
                .push_str(&format!("  pools: {}\n", u.pools.join(", ")));
        }
        if let Some(w) = &u.warm_up {
            table
                .out
                .push_str(&format!("  warm-up: {}\n", w.describe()));
        }
        if let Some(e) = &u.limiter_error {
            table.out.push_str(&format!("  limiter unreadable: {e}\n"));
        }
    }
    let mut out = table.out;
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
    const COLUMNS: &[Column] = &[
        Left("mailbox", 32),
        Left("sender", 18),
        Right("SCHEDULED", 9),
        Right("paused", 6),
        Right("SENDING", 7),
        Right("SENT", 6),
        Right("ERROR", 6),
        Right("BOUNCED", 7),
        Right("deferrals", 9),
        Left("oldest due", 20),
        Left("next scheduled", 20),
    ];
    let mut table = Table::new(" ", COLUMNS);
    let time = |t| time_or_dash(t, "%Y-%m-%d %H:%M:%S");
    for r in rows {
        table.row([
            r.mailbox.clone(),
            r.kind.clone(),
            r.scheduled.to_string(),
            r.paused.to_string(),
            r.sending.to_string(),
            r.sent.to_string(),
            r.error.to_string(),
            r.bounced.to_string(),
            r.deferrals.to_string(),
            time(r.oldest_due),
            time(r.next_scheduled),
        ]);
    }
    table.out
}

/// `messages list` as a table: one line per message, a SCHEDULED one's wait in words.
pub(crate) fn message_lines(lines: &[MessageLine]) -> String {
    const COLUMNS: &[Column] = &[
        Left("ID", 36),
        Left("STATUS", 9),
        Left("MAILBOX", 28),
        Left("DUE (UTC)", 19),
        Left("WAITING / LAST ERROR", 0),
    ];
    let mut table = Table::new("  ", COLUMNS);
    for m in lines {
        let note = m
            .waiting
            .as_deref()
            .or(m.last_error.as_deref())
            .unwrap_or("");
        table.row([
            m.id.to_string(),
            m.status.to_string(),
            m.mailbox.clone(),
            m.scheduled_on.format("%Y-%m-%d %H:%M:%S").to_string(),
            note.to_owned(),
        ]);
    }
    table.out
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

/// Each recipient's fate under `messages show`'s message: status, time, and a failure's code
/// and text; nothing when none is known.
pub(crate) fn fates_text(fates: &[RecipientFate]) -> String {
    let mut out = String::new();
    for (i, f) in fates.iter().enumerate() {
        out.push_str(&format!(
            "{:<12}{} {} ({}) {}",
            if i == 0 { "recipients" } else { "" },
            f.recipient,
            f.outcome,
            f.status,
            f.at.format("%Y-%m-%d %H:%M:%S UTC")
        ));
        if let Some(code) = &f.code {
            out.push_str(&format!(" {code}"));
        }
        if let Some(detail) = &f.detail {
            out.push_str(&format!(" {detail}"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tables_header_and_rows_share_its_columns() {
        const COLUMNS: &[Column] = &[Left("mailbox", 8), Right("SENT", 5), Left("note", 0)];
        let mut table = Table::new(" ", COLUMNS);
        table.row(["a@b.nl".to_owned(), "12".to_owned(), "x".to_owned()]);
        table.row(["a-longer@b.nl".to_owned(), "3".to_owned(), String::new()]);
        assert_eq!(
            table.out,
            "mailbox   SENT note\na@b.nl      12 x\na-longer@b.nl     3 \n"
        );
    }
}
