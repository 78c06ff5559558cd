//! `mail-worker queue stats|dead|retry|discard`: the intake queue's dead letters.

use std::process::ExitCode;

use anyhow::Context;

use super::{args, out};
use crate::{config::Config, intake};

/// The intake queue's name and a connection to its Redis.
pub(super) async fn queue_of(config: &Config) -> anyhow::Result<(String, intake::QueueConnection)> {
    let queue = config
        .intake
        .queue
        .clone()
        .context("INTAKE_QUEUE is off: there is no intake queue")?;
    let conn = intake::connect(&config.redis_url).await?;
    Ok((queue, conn))
}

/// `mail-worker queue …`.
pub(super) async fn queue_command(
    config: &Config,
    command: args::QueueCommand,
) -> anyhow::Result<ExitCode> {
    use args::QueueCommand;
    use intake::dead::{self, Which};
    let (queue, mut conn) = queue_of(config).await?;
    let which = |ids: Vec<String>, all: bool| -> anyhow::Result<Which> {
        match (all, ids.is_empty()) {
            (true, true) => Ok(Which::All),
            (false, false) => Ok(Which::Ids(ids)),
            _ => anyhow::bail!("give task ids or --all (not both)"),
        }
    };
    match command {
        QueueCommand::Stats => {
            let s = dead::stats(&mut conn, &queue).await?;
            out(&format!(
                "{queue}: waiting {}, scheduled {}, in flight {}, dead {}, done (not yet removed) {}, workers {}\n",
                s.waiting, s.scheduled, s.in_flight, s.dead, s.done, s.workers
            ));
        }
        QueueCommand::Dead { limit } => {
            for job in dead::list(&mut conn, &queue, limit).await? {
                out(&format!(
                    "{} ({} bytes): {}\n",
                    job.task, job.bytes, job.reason
                ));
            }
        }
        QueueCommand::Retry { ids, all } => {
            let n = dead::retry(&mut conn, &queue, which(ids, all)?).await?;
            out(&format!("{n} dead jobs back on {queue}\n"));
        }
        QueueCommand::Discard { ids, all } => {
            let n = dead::discard(&mut conn, &queue, which(ids, all)?).await?;
            out(&format!("{n} dead jobs discarded\n"));
        }
    }
    Ok(ExitCode::SUCCESS)
}
