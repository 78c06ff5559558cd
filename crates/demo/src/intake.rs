//! The demo's campaign through the intake queue: its lines are pushed with the code of
//! `mail-worker enqueue --via queue` onto a queue of the demo's own, and the daemon's intake
//! consumer (`mail_worker::intake::run`) stores them as rows, as every replica does.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use serde::Serialize;
use sqlx::PgPool;
use tokio::task::JoinHandle;

use mail_worker::{
    intake::{self, IntakeError, IntakeSettings, QueueConnection, dead},
    ops::Metrics,
    shutdown::CancellationToken,
};

/// What the intake did with the campaign.
#[derive(Debug, Clone, Serialize)]
pub struct IntakeReport {
    /// The queue (`INTAKE_QUEUE` of the demo: `{mail-worker-demo:<run>:campaign-sends}`).
    pub queue: String,
    /// Lines pushed as jobs.
    pub pushed: usize,
    /// Rows the intake committed.
    pub committed: i64,
    /// Jobs dead-lettered, with their reasons (`task (bytes): reason`).
    pub dead: Vec<String>,
}

/// The running consumer; [`Self::stop`] ends it.
pub struct Consumer {
    stop: CancellationToken,
    task: JoinHandle<Result<(), IntakeError>>,
}

impl Consumer {
    /// Stops the consumer (its jobs in flight are stored or returned first).
    pub async fn stop(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("mail-worker-demo: the intake consumer failed: {e}"),
            Err(e) => eprintln!("mail-worker-demo: the intake consumer panicked: {e}"),
        }
    }
}

/// Starts the intake consumer on `queue`, pushes `campaign`'s lines and waits (up to `within`)
/// until none is waiting or in flight.
///
/// # Errors
/// Redis errors, or a queue that did not drain within `within`.
pub async fn push_and_consume(
    conn: QueueConnection,
    queue: &str,
    pool: &PgPool,
    campaign: &[u8],
    within: Duration,
) -> anyhow::Result<(IntakeReport, Consumer)> {
    let stop = CancellationToken::new();
    let settings = IntakeSettings::new(queue, Some("mail-worker-demo"));
    let alive_within = settings.orphaned_after();
    let task = tokio::spawn(intake::run(
        settings,
        conn.clone(),
        pool.clone(),
        Arc::new(Metrics::new()),
        stop.clone(),
    ));
    let consumer = Consumer { stop, task };
    let pushed = intake::push_lines(conn.clone(), queue, intake::file_lines(campaign)).await?;
    let mut c = conn;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let s = dead::stats(&mut c, queue, alive_within).await?;
        if s.waiting + s.scheduled + s.in_flight == 0 {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            consumer.stop().await;
            anyhow::bail!("the intake queue {queue} did not drain within {within:?}: {s:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let committed: i64 = sqlx::query_scalar("SELECT count(*) FROM messages")
        .fetch_one(pool)
        .await
        .context("counting the rows the intake committed")?;
    let dead = dead::list(&mut c, queue, usize::MAX)
        .await?
        .into_iter()
        .map(|d| format!("task {} ({} bytes): {}", d.task, d.bytes, d.reason))
        .collect();
    Ok((
        IntakeReport {
            queue: queue.to_owned(),
            pushed,
            committed,
            dead,
        },
        consumer,
    ))
}
