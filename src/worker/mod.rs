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
    log_events,
    ops::{Liveness, Metrics},
    service::MailProviderService,
    shutdown::{self, CancellationToken},
    supervise::Supervisor,
};

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// Worker, scheduler and lease settings.
    pub worker: WorkerConfig,
    /// `SHUTDOWN_GRACE`.
    pub shutdown_grace: Duration,
    /// The metrics listener's address (`None`: off), for the `daemon.started` line.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// [`crate::config::Config::digest`], for the `daemon.started` line.
    pub config_digest: String,
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
/// through ([`spawn_parts`]); a loop that stops on its own or panics is logged
/// (`daemon.partFailed`) and stops the others.
pub async fn run(
    pool: PgPool,
    service: Arc<MailProviderService>,
    settings: DaemonSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let parts = Supervisor::default();
    spawn_parts(&parts, pool, service, settings, Observers::default());
    // The failure was logged where it happened; this entry point has no exit code to set.
    let _ = parts.run(shutdown, async {}).await;
}

/// Starts the claim loop, lease recovery and the paused-sender revisits as `parts`' draining
/// parts (`claim`, `recovery`, `revisit`), reporting to `observers`. PostgreSQL going away is
/// lived through: claims and outcome writes are retried, the daemon stays up.
pub(crate) fn spawn_parts(
    parts: &Supervisor,
    pool: PgPool,
    service: Arc<MailProviderService>,
    settings: DaemonSettings,
    observers: Observers,
) {
    tracing::info!(
        event = log_events::DAEMON_STARTED,
        version = crate::VERSION,
        concurrency = settings.worker.concurrency.get(),
        metrics_listen = %settings
            .metrics_listen
            .map_or_else(|| "off".to_owned(), |a| a.to_string()),
        config_digest = %settings.config_digest,
        "daemon started"
    );
    parts.spawn_draining("recovery", |stop| {
        recovery::run_loop_observed(
            pool.clone(),
            settings.worker.clone(),
            stop,
            Arc::clone(&observers.liveness),
        )
    });
    let interval = settings.worker.scheduler_interval;
    parts.spawn_draining("revisit", |stop| {
        revisit_paused_loop(
            Arc::clone(&service),
            interval.max(Duration::from_secs(1)),
            stop,
        )
    });
    let handler = handler::Handler::new(service).with_metrics(Arc::clone(&observers.metrics));
    parts.spawn_draining("claim", |stop| {
        claim::run_loop(
            pool,
            handler,
            settings.worker,
            settings.shutdown_grace,
            stop,
            observers,
        )
    });
}

/// Every `interval`, resumes paused senders whose configuration changed.
async fn revisit_paused_loop(
    service: Arc<MailProviderService>,
    interval: Duration,
    stop: CancellationToken,
) {
    let service = &service;
    shutdown::every(interval, stop, None, || async move {
        if let Err(e) = service.revisit_paused().await {
            tracing::warn!(error = %e, "revisiting paused senders failed; retrying next tick");
        }
    })
    .await;
}
