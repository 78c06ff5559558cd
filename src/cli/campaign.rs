//! `mail-worker campaign forecast|status`: the reports of [`crate::reports::campaign`] as tables
//! or JSON.

use std::process::ExitCode;

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::{CampaignCommand, out};
use crate::plural::counted;
use crate::{
    config::Config,
    forecast::Warning,
    reports::campaign::{self, CampaignForecast, CampaignStatus},
    store,
};

/// Runs `campaign …`.
pub(super) async fn campaign_command(
    config: &Config,
    command: CampaignCommand,
) -> anyhow::Result<ExitCode> {
    let pool = store::open(&config.database_url, 2).await?;
    match command {
        CampaignCommand::Forecast { file, by, json } => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let report = campaign::forecast_file(config, &pool, &bytes, by).await?;
            for bad in &report.bad_lines {
                eprintln!("{}:{bad}", file.display());
            }
            if !report.bad_lines.is_empty() {
                eprintln!(
                    "mail-worker: {} not forecast (fix them: `enqueue` refuses them too)",
                    counted(report.bad_lines.len() as u64, "bad line", "bad lines")
                );
            }
            if json {
                out(&(serde_json::to_string_pretty(&report)? + "\n"));
            } else {
                out(&forecast_table(&report));
            }
            let late = report.senders.iter().any(|s| {
                s.warnings
                    .iter()
                    .any(|w| matches!(w, Warning::AfterDeadline { .. } | Warning::MissesBy { .. }))
            });
            Ok(if late || !report.bad_lines.is_empty() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        CampaignCommand::Status { campaign, json } => {
            let Some(report) = campaign::campaign_status(config, &pool, &campaign).await? else {
                // Suspended before its lines came: say so, not only that none is stored.
                let held = store::suspensions::of(&pool, "campaign", &campaign, Utc::now()).await?;
                match held {
                    Some(s) => anyhow::bail!(
                        "no message has campaign {campaign:?} yet; it is suspended until {} UTC",
                        s.suspended_until.format("%Y-%m-%d %H:%M:%S")
                    ),
                    None => anyhow::bail!("no message has campaign {campaign:?}"),
                }
            };
            if json {
                out(&(serde_json::to_string_pretty(&report)? + "\n"));
            } else {
                out(&status_table(&report));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn time(t: Option<DateTime<Utc>>) -> String {
    t.map_or("-".to_owned(), |t| {
        t.format("%Y-%m-%d %H:%M:%S").to_string()
    })
}

/// `campaign forecast` as a table, then its warnings.
pub(crate) fn forecast_table(r: &CampaignForecast) -> String {
    let mut out = format!(
        "{:<32} {:>8} {:>10} {:>8} {:>7} {:>11} {:>12}  {:<19}  {:>9}\n",
        "mailbox",
        "messages",
        "recipients",
        "backlog",
        "booked",
        "per minute",
        "per day",
        "finish (UTC)",
        "duration"
    );
    let mut warnings = Vec::new();
    // The share of the budgets the file's messages may use, of the whole (the rest is reserved
    // for `high`).
    let share = |provider: &str, usable: u32, whole: u32| {
        if provider == "sendgrid" {
            // Not rate-limited here: SendGrid's own plan limits apply.
            "-".to_owned()
        } else if usable == whole {
            whole.to_string()
        } else {
            format!("{usable} of {whole}")
        }
    };
    for s in &r.senders {
        out.push_str(&format!(
            "{:<32} {:>8} {:>10} {:>8} {:>7} {:>11} {:>12}  {:<19}  {:>9}\n",
            s.mailbox,
            s.messages.messages,
            s.messages.recipients,
            s.backlog.unbooked,
            s.backlog.booked,
            share(s.provider, s.usable.per_minute, s.limits.per_minute),
            share(
                s.provider,
                s.usable.recipients_per_day,
                s.limits.recipients_per_day
            ),
            time(Some(s.finish.finish)),
            duration(s.seconds)
        ));
        warnings.extend(s.warnings.iter().map(|w| format!("{}: {w}", s.mailbox)));
        if let Some(e) = &s.limiter_error {
            warnings.push(format!(
                "{}: the limiter could not be read ({e}); forecast as if the mailbox were idle",
                s.mailbox
            ));
        }
    }
    warnings.extend(r.tenant_warnings.iter().map(ToString::to_string));
    warnings.extend(r.campaigns_suspended.iter().map(|s| {
        format!(
            "campaign {} is suspended {}: its lines are forecast from then",
            s.campaign.as_deref().unwrap_or_default(),
            s.until_text()
        )
    }));
    if r.already_stored > 0 {
        out.push_str(&format!(
            "{} already stored: `enqueue` skips them, not forecast\n",
            counted(r.already_stored, "message", "messages")
        ));
    }
    out.push_str(&format!(
        "finish {} UTC ({} from now, {} limiter){}\n",
        r.finish.format("%Y-%m-%d %H:%M:%S"),
        duration((r.finish - r.now).num_milliseconds() as f64 / 1000.0),
        r.algorithm,
        r.by.map_or(String::new(), |by| format!(
            "; deadline {}",
            by.format("%Y-%m-%d %H:%M:%S UTC")
        ))
    ));
    for p in &r.pools {
        let members: Vec<String> = p
            .members
            .iter()
            .map(|m| format!("{} {}", m.mailbox, m.messages))
            .collect();
        out.push_str(&format!(
            "pool {}: {} messages over {} members ({}){}{}\n",
            p.pool,
            p.messages,
            p.members.len(),
            members.join(", "),
            if p.paused.is_empty() {
                String::new()
            } else {
                format!("; paused, skipped: {}", p.paused.join(", "))
            },
            p.overflow.map_or(String::new(), |rule| format!(
                "; {} to the overflow sender ({rule})",
                p.overflowed
            ))
        ));
    }
    for w in warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// `campaign status` as a table: the messages by status, then their recipients by fate (the
/// message trace's, or an NDR's).
pub(crate) fn status_table(r: &CampaignStatus) -> String {
    let mut out = format!(
        "campaign {}\n{:<32} {:>6} {:>9} {:>7} {:>8} {:>7} {:>10} {:>7}  {:<19}  {:<19}\n",
        r.campaign,
        "mailbox",
        "sent",
        "delivered",
        "bounced",
        "waiting",
        "failed",
        "cancelled",
        "booked",
        "last sent (UTC)",
        "forecast finish"
    );
    let row = |mailbox: &str, c: &store::campaigns::CampaignCounts, f: Option<DateTime<Utc>>| {
        format!(
            "{:<32} {:>6} {:>9} {:>7} {:>8} {:>7} {:>10} {:>7}  {:<19}  {:<19}\n",
            mailbox,
            c.sent,
            c.delivered,
            c.bounced,
            c.waiting,
            c.failed,
            c.cancelled,
            c.booked,
            time(c.last_sent),
            time(f)
        )
    };
    for s in &r.senders {
        out.push_str(&row(&s.mailbox, &s.counts, s.forecast_finish));
    }
    out.push_str(&row("all senders", &r.total, r.forecast_finish));
    if let Some(s) = &r.suspended {
        out.push_str(&format!(
            "suspended {}: nothing of it goes until then (`resume --campaign {}`); \
             the forecast finish counts from then\n",
            s.until_text(),
            r.campaign
        ));
    }
    out.push_str(&format!(
        "recipients\n{:<32} {:>9} {:>7} {:>8} {:>7}\n",
        "mailbox", "delivered", "failed", "filtered", "pending"
    ));
    let fates = |mailbox: &str, c: &store::campaigns::CampaignCounts| {
        format!(
            "{:<32} {:>9} {:>7} {:>8} {:>7}\n",
            mailbox,
            c.recipients_delivered,
            c.recipients_failed,
            c.recipients_filtered,
            c.recipients_pending
        )
    };
    for s in &r.senders {
        out.push_str(&fates(&s.mailbox, &s.counts));
    }
    out.push_str(&fates("all senders", &r.total));
    for p in &r.pools {
        out.push_str(&pool_table(p));
    }
    for s in &r.senders {
        for w in &s.warnings {
            out.push_str(&format!("warning: {}: {w}\n", s.mailbox));
        }
    }
    out
}

/// One sender pool's part of `campaign status`: each member's sent, waiting and failed
/// messages, what waits unplaced, the overflow sender's and the overflowed count by reason.
fn pool_table(p: &crate::reports::campaign::PoolStatus) -> String {
    let mut out = format!(
        "pool {}\n{:<32} {:>6} {:>8} {:>7}\n",
        p.pool, "member", "sent", "waiting", "failed"
    );
    let row = |mailbox: &str, m: &crate::reports::campaign::MemberCounts| {
        format!(
            "{:<32} {:>6} {:>8} {:>7}\n",
            mailbox, m.sent, m.waiting, m.failed
        )
    };
    for m in &p.members {
        out.push_str(&row(&m.mailbox, m));
    }
    if p.unplaced > 0 {
        out.push_str(&format!(
            "{:<32} {:>6} {:>8}\n",
            "(not placed yet)", "", p.unplaced
        ));
    }
    for m in &p.overflow {
        out.push_str(&row(&format!("{} (overflow)", m.mailbox), m));
    }
    for (reason, n) in &p.overflowed {
        out.push_str(&format!("overflowed: {n} ({reason})\n"));
    }
    out
}

/// `1h 02m 05s`, `4m 05s`, `12s`.
fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s:02}s"),
        (h, m, s) => format!("{h}h {m:02}m {s:02}s"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_read_as_hours_minutes_seconds() {
        assert_eq!(super::duration(12.4), "12s");
        assert_eq!(super::duration(245.5), "4m 06s");
        assert_eq!(super::duration(3725.0), "1h 02m 05s");
        assert_eq!(super::duration(-3.0), "0s");
    }

    #[test]
    fn a_pool_reads_as_its_members_the_unplaced_and_the_overflowed_by_reason() {
        use crate::reports::campaign::{MemberCounts, PoolStatus};
        let counts = |mailbox: &str, sent, waiting, failed| MemberCounts {
            mailbox: mailbox.into(),
            sent,
            waiting,
            failed,
        };
        let text = super::pool_table(&PoolStatus {
            pool: "invites".into(),
            members: vec![counts("a@x.org", 7, 2, 0), counts("b@x.org", 0, 0, 1)],
            unplaced: 3,
            overflow: vec![counts("sg@y.org", 4, 0, 0)],
            overflowed: [("budgetsSpent".to_owned(), 4)].into(),
        });
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        assert_eq!(
            lines,
            [
                "pool invites",
                "member                             sent  waiting  failed",
                "a@x.org                               7        2       0",
                "b@x.org                               0        0       1",
                "(not placed yet)                               3",
                "sg@y.org (overflow)                   4        0       0",
                "overflowed: 4 (budgetsSpent)",
            ]
        );
    }
}
