//! The daemon's moving parts: the send-scheduled-messages claim loop (`claim.rs`), the
//! apalis-redis queue (`queue.rs`), the job handler (`handler.rs`), lease recovery
//! (`recovery.rs`) and [`run`], which runs them together until shutdown.

pub mod claim;
pub mod handler;
pub mod queue;
pub mod recovery;

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use apalis::prelude::*;
use sqlx::PgPool;

use crate::{
    config::WorkerConfig,
    events,
    ops::{Liveness, Metrics},
    service::MailProviderService,
};

/// Why the daemon stopped other than by request.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The queue's Redis could not be reached at start-up.
    #[error("job queue unavailable: {0}")]
    Queue(#[from] redis::RedisError),
    /// The apalis worker stopped with an error.
    #[error("queue worker failed: {0}")]
    Apalis(String),
    /// The apalis worker stopped although no shutdown was requested (e.g. after losing Redis):
    /// exit non-zero so the orchestrator restarts the process.
    #[error("queue worker stopped unexpectedly")]
    StoppedUnasked,
}

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// `REDIS_URL`, the queue's Redis.
    pub redis_url: url::Url,
    /// Worker, scheduler and lease settings.
    pub worker: WorkerConfig,
    /// `SHUTDOWN_GRACE_MS`.
    pub shutdown_grace: Duration,
}

/// A unique worker name per process and start: `mail-worker-<host>-<pid>-<random>`. apalis
/// refuses to register a name that is still active, so a restart must never reuse one.
pub fn worker_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("mail-worker-{host}-{}-{}", std::process::id(), &random[..8])
}

/// What the daemon's loops report to: its metrics, the loops' heartbeats (`/healthz`) and
/// whether the queue worker runs (`/readyz`). [`run`] uses fresh ones nobody reads.
#[derive(Debug, Clone, Default)]
pub struct Observers {
    /// Counts claims and sends in flight.
    pub metrics: Arc<Metrics>,
    /// The loops' heartbeats.
    pub liveness: Arc<Liveness>,
    /// True while the apalis worker is registered and polling.
    pub queue_up: Arc<AtomicBool>,
}

/// The first wait before reconnecting to the queue's Redis: 250 ms, doubling to
/// [`QUEUE_RETRY_MAX`].
pub const QUEUE_RETRY_MIN: Duration = Duration::from_millis(250);
/// The longest wait between two reconnection attempts: 5 s (so the daemon resumes within
/// seconds of Redis coming back).
pub const QUEUE_RETRY_MAX: Duration = Duration::from_secs(5);

/// Runs the claim loop, the recovery loop and the queue worker until `shutdown` completes,
/// then stops claiming and lets in-flight sends finish within `shutdown_grace`.
///
/// # Errors
/// None today: a lost queue is reconnected, not fatal (kept for callers that report exits).
pub async fn run(
    pool: PgPool,
    service: Arc<MailProviderService>,
    settings: DaemonSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WorkerError> {
    run_observed(pool, service, settings, Observers::default(), shutdown).await
}

/// [`run`], reporting to `observers`.
///
/// The queue's Redis may be down at start-up or go away later: the daemon stays up, reports
/// not ready (`queue_up` false), logs `queue.unavailable` once per outage, and re-opens the
/// queue and re-registers a worker under a fresh name (Redis may have come back empty) with
/// a backoff from [`QUEUE_RETRY_MIN`] to [`QUEUE_RETRY_MAX`]. Sends already running finish
/// and write their outcomes to PostgreSQL meanwhile; their jobs' acknowledgements may be lost,
/// which is harmless (a redelivered job finds its row no longer `QUEUED`).
///
/// # Errors
/// None today (see [`run`]).
///
/// The future is not `Send` as far as the compiler can tell (apalis' higher-ranked
/// `parallelize` bound): await it, or `join!`/`select!` it, rather than spawning it.
pub async fn run_observed(
    pool: PgPool,
    service: Arc<MailProviderService>,
    settings: DaemonSettings,
    observers: Observers,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WorkerError> {
    let concurrency = settings.worker.concurrency.get() as usize;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (queue_tx, queue_rx) = tokio::sync::watch::channel::<Option<queue::JobQueue>>(None);
    tokio::spawn({
        let stop_tx = stop_tx.clone();
        async move {
            shutdown.await;
            tracing::info!(
                event = events::DAEMON_STOPPING,
                "shutdown requested; finishing in-flight sends"
            );
            let _ = stop_tx.send(true);
        }
    });
    let claimer = tokio::spawn(claim::run_loop_observed(
        pool.clone(),
        queue_rx,
        settings.worker.clone(),
        stop_rx.clone(),
        observers.clone(),
    ));
    let recoverer = tokio::spawn(recovery::run_loop_observed(
        pool.clone(),
        settings.worker.clone(),
        stop_rx.clone(),
        Arc::clone(&observers.liveness),
    ));
    let revisit = tokio::spawn(revisit_paused_loop(
        Arc::clone(&service),
        settings.worker.scheduler_interval,
        stop_rx.clone(),
    ));

    let handler =
        handler::Handler::new(pool.clone(), service).with_metrics(Arc::clone(&observers.metrics));
    let mut retry = QUEUE_RETRY_MIN;
    let mut outage_since: Option<std::time::Instant> = None;
    let mut first = true;
    loop {
        if *stop_rx.borrow() {
            break;
        }
        let allowance = QUEUE_RETRY_MAX * 3 + settings.shutdown_grace;
        observers.liveness.beat("queue", allowance);
        // Bounded: a frozen Redis must not hold the loop (and its heartbeat) forever.
        let opened = tokio::time::timeout(
            QUEUE_RETRY_MAX,
            queue::open(
                &settings.redis_url,
                &settings.worker.queue_name,
                concurrency,
            ),
        )
        .await
        .map_err(|_| format!("no answer within {} s", QUEUE_RETRY_MAX.as_secs()))
        .and_then(|r| r.map_err(|e| e.to_string()));
        let error = match opened {
            Ok(queue) => {
                let _ = queue_tx.send(Some(queue.clone()));
                let name = worker_name();
                if first {
                    tracing::info!(
                        event = events::DAEMON_STARTED,
                        worker = %name,
                        concurrency,
                        queue = %settings.worker.queue_name,
                        "daemon started"
                    );
                    first = false;
                }
                if let Some(since) = outage_since.take() {
                    tracing::info!(
                        event = events::QUEUE_RESUMED,
                        worker = %name,
                        after_ms = since.elapsed().as_millis() as u64,
                        "the queue is back; worker registered again"
                    );
                }
                observers.queue_up.store(true, Ordering::SeqCst);
                retry = QUEUE_RETRY_MIN;
                let mut stop_signal = stop_rx.clone();
                let result = WorkerBuilder::new(name)
                    .backend(queue.poll_with_interval(settings.worker.poll_interval))
                    .data(handler.clone())
                    .concurrency(concurrency)
                    .parallelize(|job| tokio::spawn(job))
                    .build(handler::handle)
                    .run_until(async move {
                        let _ = stop_signal.wait_for(|s| *s).await;
                        Ok::<(), std::io::Error>(())
                    });
                let result = tokio::select! {
                    r = result => r.map_err(|e| e.to_string()),
                    () = grace_after_stop(stop_rx.clone(), settings.shutdown_grace) => {
                        tracing::warn!(event = events::DAEMON_STOPPED, "shutdown grace elapsed with sends in flight; their rows will be recovered after SEND_LEASE_MS");
                        Ok(())
                    }
                    // The queue loop is alive while the worker runs: keep beating.
                    () = beat_forever(&observers.liveness, allowance) => Ok(()),
                };
                observers.queue_up.store(false, Ordering::SeqCst);
                if *stop_rx.borrow() {
                    break;
                }
                match result {
                    Ok(()) => "the queue worker stopped".to_owned(),
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        if outage_since.is_none() {
            outage_since = Some(std::time::Instant::now());
            tracing::warn!(
                event = events::QUEUE_UNAVAILABLE,
                error = %error,
                retry_in_ms = retry.as_millis() as u64,
                "REDIS_URL ({}): the job queue is unavailable; staying up (not ready) and reconnecting",
                crate::config::redact_url(&settings.redis_url)
            );
        }
        let mut stop_watch = stop_rx.clone();
        tokio::select! {
            _ = stop_watch.wait_for(|s| *s) => break,
            () = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(QUEUE_RETRY_MAX);
    }
    let _ = stop_tx.send(true);
    let _ = claimer.await;
    let _ = recoverer.await;
    let _ = revisit.await;
    observers.liveness.ended("queue");
    tracing::info!(
        event = events::DAEMON_STOPPED,
        reason = "shutdown requested",
        "daemon stopped"
    );
    Ok(())
}

/// Beats `queue` every [`QUEUE_RETRY_MAX`], never completing.
async fn beat_forever(liveness: &Liveness, allowance: Duration) {
    loop {
        liveness.beat("queue", allowance);
        tokio::time::sleep(QUEUE_RETRY_MAX).await;
    }
}

/// Completes `grace` after `stop` turned true.
async fn grace_after_stop(mut stop: tokio::sync::watch::Receiver<bool>, grace: Duration) {
    let _ = stop.wait_for(|s| *s).await;
    tokio::time::sleep(grace).await;
}

/// Every `interval`, resumes paused senders whose configuration changed.
async fn revisit_paused_loop(
    service: Arc<MailProviderService>,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = service.revisit_paused().await {
            tracing::warn!(error = %e, "revisiting paused senders failed; retrying next tick");
        }
    }
}
