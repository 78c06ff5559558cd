//! `mail-worker queue stats|dead|retry|discard`: the intake queue's dead letters.

use std::process::ExitCode;

use anyhow::Context;

use super::{args, out};
use crate::{config::Config, intake, plural::counted};

/// The intake queue's settings and a connection to its Redis.
pub(super) async fn queue_of(
    config: &Config,
) -> anyhow::Result<(intake::IntakeSettings, intake::QueueConnection)> {
    let settings = intake::IntakeSettings::from_config(&config.intake, config.events.outbox())
        .context("INTAKE_QUEUE is off: there is no intake queue")?;
    // One line naming the server (its password hidden) and the cause once: the error's own
    // chain repeats the cause at every level.
    let conn = intake::connect(&config.redis_url).await.map_err(|e| {
        let cause = match &e {
            intake::IntakeError::Redis(r) => r.to_string(),
            other => other.to_string(),
        };
        anyhow::anyhow!(
            "cannot reach the intake queue's Redis at {} (REDIS_URL): {cause}",
            config.redis_url.redacted()
        )
    })?;
    Ok((settings, conn))
}

/// `mail-worker queue …`.
pub(super) async fn queue_command(
    config: &Config,
    command: args::QueueCommand,
) -> anyhow::Result<ExitCode> {
    use args::QueueCommand;
    use intake::dead::{self, Which};
    let (settings, mut conn) = queue_of(config).await?;
    let queue = settings.queue.as_str();
    let which = |ids: Vec<String>, all: bool| -> anyhow::Result<Which> {
        match (all, ids.is_empty()) {
            (true, true) => Ok(Which::All),
            (false, false) => Ok(Which::Ids(ids)),
            _ => anyhow::bail!("give task ids or --all (not both)"),
        }
    };
    match command {
        QueueCommand::Stats => {
            let s = dead::stats(&mut conn, queue, settings.orphaned_after()).await?;
            out(&format!(
                "{queue}: waiting {}, scheduled {}, in flight {}, dead {}, done (not yet removed) {}, oldest waiting {}, workers alive {} ({} silent for over {} s)\n",
                s.waiting,
                s.scheduled,
                s.in_flight,
                s.dead,
                s.done,
                s.oldest_seconds
                    .map_or("-".to_owned(), |a| format!("{a} s")),
                s.workers,
                s.workers_silent,
                settings.orphaned_after().as_secs()
            ));
            if let Some(warning) = s.no_consumer() {
                out(&format!("warning: {warning}\n"));
            }
        }
        QueueCommand::Dead { limit } => {
            let jobs = dead::list(&mut conn, queue, limit).await?;
            if jobs.is_empty() {
                out(&format!("no dead-lettered jobs in {queue}\n"));
            }
            for job in jobs {
                out(&format!(
                    "{} ({}): {}\n",
                    job.task,
                    counted(job.bytes as u64, "byte", "bytes"),
                    job.reason
                ));
            }
        }
        QueueCommand::Retry { ids, all } => {
            let given = ids.len() as u64;
            let n = dead::retry(&mut conn, queue, which(ids, all)?).await?;
            return Ok(acted(queue, given, n, &format!("back on {queue}")));
        }
        QueueCommand::Discard { ids, all } => {
            let given = ids.len() as u64;
            let n = dead::discard(&mut conn, queue, which(ids, all)?).await?;
            return Ok(acted(queue, given, n, "discarded"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Says how many dead jobs were `what` (`done` of them); then exit 1 with a hint when fewer of
/// the `given` task ids than that were dead letters, success otherwise (and for `--all`,
/// `given` 0).
fn acted(queue: &str, given: u64, done: u64, what: &str) -> ExitCode {
    out(&format!(
        "{} {what}\n",
        counted(done, "dead job", "dead jobs")
    ));
    if done >= given {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "mail-worker: {} of the given task ids {} not in {queue}'s dead letters (a task id, as `mail-worker queue dead` lists them: waiting or stored jobs are not dead)",
        given - done,
        if given - done == 1 { "is" } else { "are" }
    );
    ExitCode::FAILURE
}
