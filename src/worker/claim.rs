//! send-scheduled-messages: every `SCHEDULER_INTERVAL_MS`, in one transaction, claim due
//! `SCHEDULED` rows (`FOR UPDATE SKIP LOCKED`, oldest first), mark them `QUEUED`, push one
//! job each, and commit only after the pushes succeeded.

use sqlx::PgPool;
use tokio::sync::watch;

use super::queue::{self, JobQueue};
use crate::{
    config::WorkerConfig,
    events,
    store::{StoreError, messages},
};

/// The most messages kept `QUEUED` (on the queue, not yet started) across replicas:
/// `QUEUED_PER_WORKER_SLOT × WORKER_CONCURRENCY`. Claiming far more than the workers can take
/// would only make them wait in Redis, where a lost job costs a `QUEUE_LEASE_MS` wait.
pub const QUEUED_PER_WORKER_SLOT: i64 = 2;

/// Claims one batch: at most `batch_size`, and no more than keeps the `QUEUED` count under the
/// cap. Returns how many were claimed.
///
/// # Errors
/// PostgreSQL errors; a failed push rolls back and leaves the rows `SCHEDULED`.
pub async fn claim_once(
    pool: &PgPool,
    queue: &mut JobQueue,
    batch_size: i64,
    concurrency: i64,
) -> Result<usize, ClaimError> {
    let room = QUEUED_PER_WORKER_SLOT * concurrency - messages::count_queued(pool).await?;
    let limit = batch_size.min(room);
    if limit <= 0 {
        return Ok(0);
    }
    let mut tx = pool.begin().await.map_err(StoreError::from)?;
    let ids = messages::claim_due(&mut tx, limit).await?;
    if ids.is_empty() {
        return Ok(0);
    }
    messages::mark_queued(&mut tx, &ids).await?;
    queue::push_all(queue, &ids)
        .await
        .map_err(|e| ClaimError::Push(e.to_string()))?;
    tx.commit().await.map_err(StoreError::from)?;
    Ok(ids.len())
}

/// A claim that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// PostgreSQL failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The queue refused the jobs; the rows stay `SCHEDULED`.
    #[error("pushing jobs to the queue failed: {0}")]
    Push(String),
}

/// Claims every `SCHEDULER_INTERVAL_MS` until `stop` turns true. Failures are logged and
/// retried on the next tick (PostgreSQL or Redis may come back).
pub async fn run_loop(
    pool: PgPool,
    queue: JobQueue,
    config: WorkerConfig,
    stop: watch::Receiver<bool>,
) {
    let (_keep, queue) = watch::channel(Some(queue));
    run_loop_observed(pool, queue, config, stop, super::Observers::default()).await;
}

/// [`run_loop`] with the queue from `queue` (none while the queue's Redis is unavailable: the
/// tick is skipped), counting claims in `observers.metrics` and beating `claim`.
pub async fn run_loop_observed(
    pool: PgPool,
    queue: watch::Receiver<Option<JobQueue>>,
    config: WorkerConfig,
    mut stop: watch::Receiver<bool>,
    observers: super::Observers,
) {
    let mut tick = tokio::time::interval(config.scheduler_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let batch = config.scheduler_batch_size.get() as i64;
    let concurrency = config.concurrency.get() as i64;
    // A tick may wait on PostgreSQL up to its acquire timeout (10 s) and more.
    let allowance = config.scheduler_interval * 3 + std::time::Duration::from_secs(60);
    loop {
        observers.liveness.beat("claim", allowance);
        tokio::select! {
            _ = stop.wait_for(|s| *s) => {
                observers.liveness.ended("claim");
                return;
            }
            _ = tick.tick() => {}
        }
        let Some(mut queue) = queue.borrow().clone() else {
            continue;
        };
        match claim_once(&pool, &mut queue, batch, concurrency).await {
            Ok(0) => {}
            Ok(claimed) => {
                observers.metrics.claimed(claimed as u64);
                tracing::debug!(
                    event = events::SCHEDULER_CLAIMED,
                    claimed,
                    "claimed due messages"
                );
            }
            Err(e) => {
                tracing::warn!(event = events::SCHEDULER_CLAIMED, error = %e, "claiming due messages failed; retrying next tick")
            }
        }
    }
}
