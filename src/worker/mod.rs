//! The daemon's moving parts: the send-scheduled-messages claim loop, which hands each claimed
//! row to a worker slot in this process (`claim.rs`), sending one message (`handler.rs`), lease
//! recovery (`recovery.rs`) and [`run`], which runs them together until shutdown.
//!
//! PostgreSQL is the queue: a claim moves due rows straight to `SENDING` (`FOR UPDATE SKIP
//! LOCKED`, fair across senders) for this replica's free slots. There is no job queue in Redis
//! (earlier versions pushed one apalis-redis job per claim; apalis-redis keeps every finished
//! job's data and metadata, and a shared queue lets any replica take a job another claimed).

pub mod claim;
pub mod handler;
pub mod recovery;

use std::{
    future::Future,
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use sqlx::PgPool;

use crate::{
    config::WorkerConfig,
    events,
    ops::{Liveness, Metrics},
    service::MailProviderService,
    shutdown,
};

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// Worker, scheduler and lease settings.
    pub worker: WorkerConfig,
    /// `SHUTDOWN_GRACE`.
    pub shutdown_grace: Duration,
}

/// What the daemon's loops report to: its metrics, the loops' heartbeats (`/healthz`) and
/// whether the claim loop runs (`/readyz`). [`run`] uses fresh ones nobody reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observers {
    /// Counts claims and sends in flight.
    pub metrics: Arc<Metrics>,
    /// The loops' heartbeats.
    pub liveness: Arc<Liveness>,
    /// True while the claim loop runs.
    pub claiming: Arc<AtomicBool>,
}

/// Runs the claim loop (and the sends it starts), the recovery loop and the paused-sender
/// revisits until `shutdown` completes, then stops claiming and lets in-flight sends finish
/// within `shutdown_grace`. Nothing it meets stops it early: PostgreSQL going away is lived
/// through ([`run_observed`]).
pub async fn run(
    pool: PgPool,
    service: Arc<MailProviderService>,
    settings: DaemonSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    run_observed(pool, service, settings, Observers::default(), shutdown).await;
}

/// [`run`], reporting to `observers`. PostgreSQL going away is lived through: claims and
/// outcome writes are retried, the daemon stays up.
pub(crate) async fn run_observed(
    pool: PgPool,
    service: Arc<MailProviderService>,
    settings: DaemonSettings,
    observers: Observers,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn({
        let stop_tx = stop_tx.clone();
        async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        }
    });
    tracing::info!(
        event = events::DAEMON_STARTED,
        version = crate::VERSION,
        concurrency = settings.worker.concurrency.get(),
        "daemon started"
    );
    let recoverer = tokio::spawn(recovery::run_loop_observed(
        pool.clone(),
        settings.worker.clone(),
        stop_rx.clone(),
        Arc::clone(&observers.liveness),
    ));
    let revisit = tokio::spawn(revisit_paused_loop(
        Arc::clone(&service),
        settings
            .worker
            .scheduler_interval
            .max(Duration::from_secs(1)),
        stop_rx.clone(),
    ));
    let handler = handler::Handler::new(service).with_metrics(Arc::clone(&observers.metrics));
    claim::run_loop(
        pool,
        handler,
        settings.worker,
        settings.shutdown_grace,
        stop_rx,
        observers,
    )
    .await;
    let _ = stop_tx.send(true);
    let _ = recoverer.await;
    let _ = revisit.await;
    tracing::info!(
        event = events::DAEMON_STOPPED,
        reason = "shutdown requested",
        "daemon stopped"
    );
}

/// Every `interval`, resumes paused senders whose configuration changed.
async fn revisit_paused_loop(
    service: Arc<MailProviderService>,
    interval: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let service = &service;
    shutdown::every(interval, stop, None, || async move {
        if let Err(e) = service.revisit_paused().await {
            tracing::warn!(error = %e, "revisiting paused senders failed; retrying next tick");
        }
    })
    .await;
}
