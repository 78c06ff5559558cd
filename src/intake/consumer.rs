//! The consumer: apalis runs one handler per fetched job; each hands its line to the
//! [`Batcher`], which parses the waiting lines with the file import's code, stores the good
//! ones in one multi-row insert and answers every handler only after the commit. A handler
//! that returns `Ok` is acked (apalis-redis `Done`); a bad line returns an [`AbortError`]
//! (`Killed`: dead-lettered with its reason); a line that could not be stored while this
//! process stops returns a [`DeferredError`] (back to the queue, consumed after).

use crate::store::events::Outbox;
use std::{sync::Arc, time::Duration};

use apalis::prelude::{AbortError, BoxDynError, Data, DeferredError, TaskId};
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{
    import::{self, campaign},
    log_events,
    ops::{
        Metrics,
        intake::{ConsumerHealth, IntakeOutcome},
        metrics::STAGE_INTAKE,
    },
    store::StoreError,
};

/// The most lines one insert takes.
pub(crate) const MAX_BATCH: usize = campaign::INSERT_CHUNK;

/// Why a job was not acked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotStored {
    /// The line is not a message: the file import's reason for it.
    #[error("{0}")]
    Dead(String),
    /// PostgreSQL did not take it before this process stopped: back to the queue.
    #[error("PostgreSQL did not answer before the process stopped; the job goes back to the queue")]
    Returned,
}

struct Pending {
    task: String,
    line: Vec<u8>,
    reply: oneshot::Sender<Result<(), NotStored>>,
}

/// Collects the lines of the running handlers into batches (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Batcher {
    tx: mpsc::Sender<Pending>,
    /// Told of each job a handler holds (a consumer waiting for PostgreSQL is busy, not dead).
    health: Arc<ConsumerHealth>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("task", &self.task).finish()
    }
}

impl Batcher {
    /// Starts the batch loop on `pool`; `stopping` turns a PostgreSQL outage from "wait" into
    /// "return the jobs".
    pub(crate) fn start(
        pool: PgPool,
        metrics: Arc<Metrics>,
        stopping: CancellationToken,
        (outbox, health): (Outbox, Arc<ConsumerHealth>),
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(MAX_BATCH * 4);
        let task = tokio::spawn(batches(pool, metrics, rx, stopping, outbox));
        (Self { tx, health }, task)
    }

    /// Stores `line` (task `task`) with the next batch; `Ok` once its row is committed (or was
    /// stored already).
    pub(crate) async fn store(&self, task: String, line: Vec<u8>) -> Result<(), NotStored> {
        let _busy = self.health.job();
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Pending { task, line, reply }).await.is_err() {
            return Err(NotStored::Returned);
        }
        answer.await.unwrap_or(Err(NotStored::Returned))
    }
}

/// The apalis handler of one job.
pub(crate) async fn consume(
    line: Vec<u8>,
    task: TaskId,
    batcher: Data<Batcher>,
) -> Result<(), BoxDynError> {
    match batcher.store(task.to_string(), line).await {
        Ok(()) => Ok(()),
        Err(dead @ NotStored::Dead(_)) => Err(AbortError::new(dead).into()),
        Err(returned) => Err(DeferredError::new(returned).into()),
    }
}

async fn batches(
    pool: PgPool,
    metrics: Arc<Metrics>,
    mut rx: mpsc::Receiver<Pending>,
    stopping: CancellationToken,
    outbox: Outbox,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let batch = std::mem::take(&mut batch);
        store_batch(&pool, &metrics, batch, &stopping, outbox).await;
    }
}

/// The good lines of a batch by index, and the reason of every bad one by index.
type Parsed = (
    Vec<(usize, crate::store::messages::NewMessage)>,
    Vec<(usize, String)>,
);

/// The batch's lines as the file import reads them: `(index, message)` of the good ones,
/// and the reason of every bad one, by index.
fn parse(batch: &[Pending], directory: &campaign::SenderDirectory) -> Parsed {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for (i, p) in batch.iter().enumerate() {
        match campaign::parse_line_bytes(i, &p.line, directory) {
            Ok(m) => good.push((i, m)),
            Err(e) => bad.push((i, e.reason)),
        }
    }
    (good, bad)
}

/// After a PostgreSQL failure: says so (once per batch), then waits, doubling up to 5 s.
async fn pause(error: &StoreError, wait: &mut Duration, said: &mut bool) {
    if !*said {
        tracing::warn!(
            event = log_events::INTAKE_STORE_FAILED,
            error = %error,
            "storing intake jobs failed; they wait (not acked) and are stored once PostgreSQL answers"
        );
        *said = true;
    }
    tokio::time::sleep(*wait).await;
    *wait = (*wait * 2).min(Duration::from_secs(5));
}

/// Parses and stores one batch, answering each of its handlers. PostgreSQL trouble other than
/// refusing a row is waited out (nothing is dead-lettered for it), unless the process stops:
/// then the batch goes back to the queue.
async fn store_batch(
    pool: &PgPool,
    metrics: &Metrics,
    batch: Vec<Pending>,
    stopping: &CancellationToken,
    outbox: Outbox,
) {
    let mut wait = Duration::from_millis(100);
    let mut said = false;
    let (stored, good, bad) = loop {
        let attempt = async {
            let directory = import::sender_directory(pool).await?;
            let (good, bad) = parse(&batch, &directory);
            let stored = campaign::insert_chunk(&mut *pool.acquire().await?, &good, outbox).await?;
            Ok::<_, StoreError>((stored, good, bad))
        };
        match attempt.await {
            Ok(done) => break done,
            Err(e) if stopping.is_cancelled() => {
                tracing::warn!(event = log_events::INTAKE_STORE_FAILED, error = %e, jobs = batch.len(), "stopping: intake jobs not stored go back to the queue");
                for p in batch {
                    let _ = p.reply.send(Err(NotStored::Returned));
                }
                return;
            }
            Err(e) => pause(&e, &mut wait, &mut said).await,
        }
    };
    let mut answers: Vec<Result<(), NotStored>> = vec![Ok(()); batch.len()];
    for (i, reason) in bad.into_iter().chain(stored.refused) {
        answers[i] = Err(NotStored::Dead(reason));
    }
    let dead = answers.iter().filter(|a| a.is_err()).count() as u64;
    let kept = batch.len() as u64 - dead;
    debug_assert!(kept <= good.len() as u64);
    for (p, answer) in batch.into_iter().zip(answers) {
        if let Err(NotStored::Dead(reason)) = &answer {
            tracing::warn!(
                event = log_events::INTAKE_JOB_DEAD,
                task = %p.task,
                reason = %reason,
                "an intake job is not a message: dead-lettered (`mail-worker queue dead` lists it)"
            );
        }
        let _ = p.reply.send(answer);
    }
    metrics.intake_jobs(IntakeOutcome::Inserted, stored.inserted);
    metrics.intake_jobs(
        IntakeOutcome::Duplicate,
        kept.saturating_sub(stored.inserted),
    );
    metrics.intake_jobs(IntakeOutcome::Dead, dead);
    if stored.suppressed > 0 {
        metrics.recipients_suppressed(STAGE_INTAKE, stored.suppressed);
        tracing::info!(
            event = log_events::RECIPIENTS_SUPPRESSED,
            stage = STAGE_INTAKE,
            recipients = stored.suppressed,
            messages_failed = stored.all_suppressed,
            "suppressed recipients dropped from new messages"
        );
    }
}
