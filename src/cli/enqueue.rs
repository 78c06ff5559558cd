//! `mail-worker enqueue FILE`: the lines inserted into PostgreSQL (or only checked, with
//! `--dry-run`), or pushed onto the intake queue (`--via queue`) for the replicas to store.

use std::{path::Path, process::ExitCode};

use crate::{config::Config, import, intake, plural::counted, store};

use super::{out, queue};

/// `enqueue --via queue FILE`: the lines checked as the import would (a bad one is named and
/// nothing is pushed, instead of dead letters for the replicas to find), then pushed.
///
/// # Errors
/// An unreadable file, PostgreSQL or Redis trouble.
pub(super) async fn push_file(config: &Config, file: &Path) -> anyhow::Result<ExitCode> {
    let bytes = read_bytes(file)?;
    let pool = store::open(&config.database_url, 2).await?;
    let bad = import::check(&pool, &bytes).await?.bad;
    if !bad.is_empty() {
        for entry in &bad {
            eprintln!("{}:{entry}", file.display());
        }
        eprintln!(
            "mail-worker: {}: nothing pushed (fix them, or check with `enqueue --dry-run`)",
            counted(bad.len() as u64, "bad line", "bad lines")
        );
        return Ok(ExitCode::FAILURE);
    }
    let (settings, mut conn) = queue::queue_of(config).await?;
    let queue = settings.queue.as_str();
    let lines: Vec<Vec<u8>> = intake::file_lines(&bytes).collect();
    let given = lines.len();
    let pushed = intake::push_lines(conn.clone(), queue, lines).await?;
    let stats = intake::dead::stats(&mut conn, queue, settings.orphaned_after()).await?;
    out(&format!(
        "{pushed} of {} pushed onto {queue} ({} already there: waiting, in flight or dead — a dead one must be discarded with `mail-worker queue discard ID` before it is pushed again; {} waiting); the replicas store them, `mail-worker queue dead` lists refused ones\n",
        counted(given as u64, "line", "lines"),
        given - pushed,
        stats.waiting + stats.scheduled
    ));
    Ok(ExitCode::SUCCESS)
}

/// `enqueue FILE` (and `--dry-run`): the lines inserted (or counted), each bad one named; fails
/// when any line is bad.
///
/// # Errors
/// An unreadable file or PostgreSQL trouble.
pub(super) async fn insert_file(
    config: &Config,
    file: &Path,
    dry_run: bool,
) -> anyhow::Result<ExitCode> {
    let pool = store::open(&config.database_url, 4).await?;
    let bytes = read_bytes(file)?;
    let enqueued = if dry_run {
        import::check(&pool, &bytes).await?
    } else {
        import::enqueue(&pool, &bytes, config.events.outbox()).await?
    };
    for entry in &enqueued.bad {
        eprintln!("{}:{entry}", file.display());
    }
    out(&summary(&enqueued, dry_run));
    Ok(if enqueued.bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `3 messages inserted, 0 already present, 1 bad line, …`: the line `enqueue` prints.
fn summary(enqueued: &import::Enqueued, dry_run: bool) -> String {
    let import::Enqueued {
        inserted,
        good: total,
        bad,
        suppressed,
        all_suppressed,
    } = enqueued;
    let suppressed = if *suppressed > 0 {
        format!(
            ", {} suppressed ({} left with none: ERROR \"{}\")",
            counted(*suppressed, "recipient", "recipients"),
            counted(*all_suppressed, "message", "messages"),
            crate::domain::ALL_SUPPRESSED
        )
    } else {
        String::new()
    };
    format!(
        "{} {}, {} already present, {}{suppressed}{}\n",
        counted(*inserted, "message", "messages"),
        if dry_run {
            "would be inserted"
        } else {
            "inserted"
        },
        total - *inserted as usize,
        counted(bad.len() as u64, "bad line", "bad lines"),
        if dry_run {
            " (dry run: nothing written)"
        } else {
            ""
        }
    )
}

fn read_bytes(file: &Path) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))
}
