//! `mail-worker events stats|dead|replay`: the outbox's webhooks for operators
//! (docs/events.md).

use std::process::ExitCode;

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::{args::EventsCommand, out};
use crate::{config::Config, plural::counted, store};

/// `--since`: an RFC 3339 time, or a duration back from now as `MAIL_RETRY_FOR` takes it.
///
/// # Errors
/// Neither, or a time after `now` (nothing has happened since then: a mistyped year, not an
/// empty answer).
pub(crate) fn since(raw: &str, now: DateTime<Utc>) -> anyhow::Result<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc3339(raw.trim()) {
        let at = at.with_timezone(&Utc);
        anyhow::ensure!(
            at <= now,
            "--since {raw:?} is in the future (now is {}): give a past time or a duration back",
            now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        return Ok(at);
    }
    let back = crate::config::parse_duration(raw.trim()).map_err(|problem| {
        anyhow::anyhow!("--since {raw:?}: not an RFC 3339 time (2026-12-01T08:00:00Z), and as a duration it {problem}")
    })?;
    Ok(now - chrono::Duration::from_std(back).context("--since is too far back")?)
}

/// `mail-worker events …`.
pub(super) async fn events_command(
    config: &Config,
    command: EventsCommand,
) -> anyhow::Result<ExitCode> {
    let pool = store::open(&config.database_url, 2).await?;
    match command {
        EventsCommand::Stats { json } => {
            let stats = store::events::admin::stats(&pool).await?;
            // The receivers configured here, shown as in logs (no credentials).
            let configured: Vec<String> = config
                .events
                .webhook_urls
                .iter()
                .map(crate::config::events::shown)
                .collect();
            if json {
                // `webhooks_on` tells off from "nothing delivered yet" to a script.
                let shown = serde_json::json!({
                    "webhooks_on": !configured.is_empty(),
                    "webhook_urls": configured,
                    "receivers": stats.receivers,
                    "events": stats.events,
                });
                out(&(serde_json::to_string_pretty(&shown)? + "\n"));
                return Ok(ExitCode::SUCCESS);
            }
            if configured.is_empty() {
                out("EVENTS_WEBHOOK_URL is off: no events are written\n");
            }
            let kinds: Vec<String> = stats
                .events
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            out(&format!(
                "events kept: {}\n",
                if kinds.is_empty() {
                    "none".to_owned()
                } else {
                    kinds.join(", ")
                }
            ));
            // A receiver taken out of EVENTS_WEBHOOK_URL keeps its row (and its counts): say so,
            // since nothing delivers to it any more and its events are purged after a day.
            for r in &stats.receivers {
                let gone = if configured.is_empty() || configured.contains(&r.receiver) {
                    String::new()
                } else {
                    format!(
                        " (not in EVENTS_WEBHOOK_URL: last claimed {}, nothing delivers to it)",
                        r.seen_at.to_rfc3339()
                    )
                };
                out(&format!(
                    "{}: delivered {}, dead {} ({} to replay), pending {} (oldest {:.0} s), failures in a row {}{}{gone}\n",
                    r.receiver,
                    r.delivered,
                    r.dead,
                    r.dead_to_replay,
                    r.pending,
                    r.oldest_pending_seconds,
                    r.failures,
                    r.last_error.as_deref().map_or(String::new(), |e| format!(
                        ", last error: {e}, next try {}",
                        r.next_try_at.to_rfc3339()
                    ))
                ));
            }
        }
        EventsCommand::Dead {
            since: raw,
            limit,
            json,
        } => {
            let dead =
                store::events::admin::dead_list(&pool, since(&raw, Utc::now())?, limit).await?;
            if json {
                out(&(serde_json::to_string_pretty(&dead)? + "\n"));
                return Ok(ExitCode::SUCCESS);
            }
            if dead.is_empty() {
                out(&format!("no dead events since {raw}\n"));
            }
            for d in dead {
                out(&format!(
                    "{} {} {} message {} at {}: dead {}: {}\n",
                    d.receiver,
                    d.id,
                    d.kind,
                    d.message_id,
                    d.occurred_at.to_rfc3339(),
                    d.dead_at.to_rfc3339(),
                    d.reason
                ));
            }
        }
        EventsCommand::Replay { since: raw } => {
            let replayed = store::events::admin::replay(&pool, since(&raw, Utc::now())?).await?;
            out(&format!(
                "{} since {raw} to be delivered again to {} ({} dead cleared)\n",
                counted(replayed.events, "event", "events"),
                counted(replayed.receivers, "receiver", "receivers"),
                replayed.dead_cleared
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_a_duration_back() {
        let now = DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            since("2026-12-01T08:00:00Z", now).unwrap().to_rfc3339(),
            "2026-12-01T08:00:00+00:00"
        );
        assert_eq!(
            since("90m", now).unwrap().to_rfc3339(),
            "2026-12-02T10:30:00+00:00"
        );
        let e = since("yesterday", now).unwrap_err().to_string();
        assert!(e.contains("RFC 3339") && e.contains("unit"), "{e}");
        let e = since("2027-12-01T08:00:00Z", now).unwrap_err().to_string();
        assert_eq!(
            e,
            "--since \"2027-12-01T08:00:00Z\" is in the future (now is 2026-12-02T12:00:00Z): give a past time or a duration back"
        );
        assert_eq!(
            since("2026-12-02T12:00:00Z", now).unwrap(),
            now,
            "now itself is not the future"
        );
    }
}
