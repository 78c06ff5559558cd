//! The intake consumer's supervisor: runs the apalis worker, notices when it stops polling,
//! and starts it again.
//!
//! apalis 1.0's `Worker::run_until` returns a poll error (`fetch_next` failed: the queue's Redis
//! restarted, or froze past the connection's response timeout) at once, as the worker's stream
//! ends there (apalis-core `worker/mod.rs`, `run`: the first `Err` is returned). The consumer
//! then started again only after the cleanup task, which ran until the daemon's stop, had
//! ended: it never did while the daemon lived (issue 46). Now the cleanup task ends with the
//! worker, and a worker that fails, or stays silent while its Redis answers (a stall no error
//! reports), is started again under a fresh name after a jittered backoff (0.5 s doubling to
//! 5 s), with one `intake.consumerRestart` line and `mail_worker_intake_consumer_restarts_total`.
//! Its [`ConsumerHealth`] tells `/readyz` and `/healthz`.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use apalis::prelude::{BackendExt, WorkerBuilder, WorkerBuilderExt};
use apalis_redis::RedisStorage;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{IntakeError, IntakeSettings, QueueConnection, cleanup, consumer, job, worker_name};
use crate::{
    backoff, log_events,
    ops::{Metrics, intake::ConsumerHealth},
};

/// The first wait before a restart; it doubles after each failed start.
const RESTART_BASE: Duration = Duration::from_millis(500);
/// The longest wait before a restart: 5 s, so jobs pushed after the queue's Redis comes back
/// are consumed within about 5 s of it.
const RESTART_CAP: Duration = Duration::from_secs(5);
/// The longest a stopping worker waits to leave the queue (`lua/intake/leave.lua`); a Redis
/// that does not answer by then gets the worker's jobs re-queued after its heartbeat lapses.
const LEAVE_WITHIN: Duration = Duration::from_secs(5);
/// The longest the watchdog waits for the queue's Redis to answer its `PING`.
const PING_WITHIN: Duration = Duration::from_secs(2);

/// Why one run of the worker ended.
enum Ended {
    /// The daemon stops.
    Stopped,
    /// The worker failed (or could not start).
    Failed(IntakeError),
    /// The worker was silent past its orphan threshold while its Redis answered.
    Stalled(Duration),
}

/// Marks the supervisor ended when it goes other than by the daemon's stop (a panic).
struct EndGuard<'a>(&'a ConsumerHealth, &'a CancellationToken);

impl Drop for EndGuard<'_> {
    fn drop(&mut self) {
        if !self.1.is_cancelled() {
            self.0.ended();
        }
    }
}

/// Consumes the queue until `stop` is cancelled: the worker stops fetching, the jobs in flight are
/// stored (or, with PostgreSQL down, returned to the queue), the worker deregisters. A worker
/// that fails or stalls is started again (the module doc).
///
/// # Errors
/// None so far; the type leaves room for a failure that must stop the daemon.
pub async fn run(
    mut settings: IntakeSettings,
    conn: QueueConnection,
    pool: PgPool,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> Result<(), IntakeError> {
    let health = Arc::clone(&settings.health);
    let stopping = stop.clone();
    let _end = EndGuard(&health, &stopping);
    health.starting(settings.orphaned_after());
    let mut failures = 0u32;
    loop {
        let began = Instant::now();
        let ended = run_once(
            settings.clone(),
            conn.clone(),
            pool.clone(),
            Arc::clone(&metrics),
            stop.clone(),
        )
        .await;
        health.beat();
        let (error, stuck) = match ended {
            Ended::Stopped => return Ok(()),
            Ended::Failed(e) => {
                let stuck = health.silent_for() > settings.orphaned_after()
                    && answers(&mut conn.clone()).await;
                (e.to_string(), stuck)
            }
            Ended::Stalled(silent) => (
                format!(
                    "the consumer heard nothing from its Redis for {} s while it answered",
                    silent.as_secs()
                ),
                true,
            ),
        };
        failures = if began.elapsed() > settings.orphaned_after() {
            1
        } else {
            failures.saturating_add(1)
        };
        let wait = backoff::jittered(failures, RESTART_BASE, RESTART_CAP);
        health.restarted(&error, stuck);
        metrics.intake_consumer_restarted();
        tracing::warn!(
            event = log_events::INTAKE_CONSUMER_RESTART,
            error = %error,
            worker = %settings.worker,
            restarts = health.restarts(),
            wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            "the intake consumer stopped polling; it starts again under a new name"
        );
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
        settings.worker = worker_name(settings.worker.rsplitn(3, '-').nth(2));
    }
}

/// Whether the queue's Redis answers a `PING` within [`PING_WITHIN`].
async fn answers(conn: &mut QueueConnection) -> bool {
    let ping = redis::cmd("PING");
    matches!(
        tokio::time::timeout(PING_WITHIN, ping.query_async::<String>(conn)).await,
        Ok(Ok(_))
    )
}

/// Every heartbeat: beats, sets the silence gauge, and returns once the worker has been silent
/// past its orphan threshold while its Redis answers (a Redis that does not answer is the
/// worker's own error to report, after its response timeout).
async fn watchdog(
    settings: &IntakeSettings,
    conn: &QueueConnection,
    metrics: &Metrics,
) -> Duration {
    let health = &settings.health;
    let mut ticks = tokio::time::interval(settings.heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        health.beat();
        let silent = health.silent_for();
        metrics.set_intake_consumer_silent(silent);
        if silent > settings.orphaned_after() && answers(&mut conn.clone()).await {
            return silent;
        }
    }
}

async fn run_once(
    settings: IntakeSettings,
    conn: QueueConnection,
    pool: PgPool,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> Ended {
    let mut leave_conn = conn.clone();
    // Redis down: the call waits for a reconnect that may not come; a shutdown does not wait,
    // and a start that takes longer than the orphan threshold is a failed start.
    tokio::select! {
        started = tokio::time::timeout(settings.orphaned_after(), cleanup::started(&mut leave_conn, &settings)) => match started {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Ended::Failed(e),
            Err(_) => return Ended::Failed(IntakeError::Queue(format!("the worker's start got no answer within {} s", settings.orphaned_after().as_secs()))),
        },
        () = stop.cancelled() => return Ended::Stopped,
    }
    let health = Arc::clone(&settings.health);
    let stopping = CancellationToken::new();
    let halt = CancellationToken::new();
    let (batcher, batches) = consumer::Batcher::start(
        pool,
        Arc::clone(&metrics),
        stopping.clone(),
        (settings.outbox, Arc::clone(&health)),
    );
    let storage = RedisStorage::<Vec<u8>, QueueConnection>::new(conn.reporting_to(&health))
        .with_config(settings.storage_config());
    let cleanup = tokio::spawn(cleanup::run(
        conn.clone(),
        settings.clone(),
        Arc::clone(&metrics),
        halt.clone(),
    ));
    tracing::info!(event = log_events::INTAKE_CONSUMER, queue = %settings.queue, worker = %settings.worker, "consuming the intake queue");
    let worker = WorkerBuilder::new(settings.worker.as_str())
        .backend(
            storage
                .with_codec(job::LineBytes)
                .poll_with_interval(settings.poll),
        )
        .concurrency(settings.in_flight)
        .data(batcher)
        .build(consumer::consume);
    let signal_stop = stop.clone();
    let signal = async move {
        signal_stop.cancelled().await;
        Ok::<(), std::io::Error>(())
    };
    let ended = tokio::select! {
        result = worker.run_until(signal) => match result {
            Ok(()) if stop.is_cancelled() => Ended::Stopped,
            Ok(()) => Ended::Failed(IntakeError::Queue("the worker ended by itself".into())),
            Err(e) => Ended::Failed(IntakeError::Queue(e.to_string())),
        },
        silent = watchdog(&settings, &conn, &metrics) => Ended::Stalled(silent),
    };
    // Jobs still waiting for PostgreSQL go back to the queue; the cleanup ends with the worker.
    stopping.cancel();
    halt.cancel();
    let _ = batches.await;
    let _ = cleanup.await;
    match tokio::time::timeout(LEAVE_WITHIN, cleanup::leave(&mut leave_conn, &settings)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => tracing::info!(
            event = log_events::INTAKE_CONSUMER,
            jobs = n,
            "intake jobs not started went back to the queue"
        ),
        Ok(Err(e)) => {
            tracing::warn!(event = log_events::INTAKE_REDIS_ERROR, error = %e, "leaving the intake queue failed: another replica takes this worker's jobs after its heartbeat lapses")
        }
        Err(_) => {
            tracing::warn!(
                event = log_events::INTAKE_REDIS_ERROR,
                "leaving the intake queue got no answer within 5 s: this worker's jobs go back to the queue after its heartbeat lapses"
            )
        }
    }
    tracing::info!(event = log_events::INTAKE_CONSUMER, queue = %settings.queue, worker = %settings.worker, "stopped consuming the intake queue");
    ended
}
