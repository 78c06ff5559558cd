//! The daemon's moving parts: the send-scheduled-messages claim loop (`claim.rs`), the
//! apalis-redis queue (`queue.rs`), the job handler (`handler.rs`), lease recovery
//! (`recovery.rs`) and [`run`], which runs them together until shutdown.

pub mod claim;
pub mod handler;
pub mod queue;
pub mod recovery;

use std::{future::Future, sync::Arc, time::Duration};

use apalis::prelude::*;
use sqlx::PgPool;

use crate::{config::WorkerConfig, events, service::MailProviderService};

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

/// Runs the claim loop, the recovery loop and the queue worker until `shutdown` completes,
/// then stops claiming and lets in-flight sends finish within `shutdown_grace`.
///
/// # Errors
/// [`WorkerError`] when a part stops on its own: the caller should exit non-zero.
pub async fn run(
    pool: PgPool,
    service: Arc<MailProviderService>,
    settings: DaemonSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WorkerError> {
    let concurrency = settings.worker.concurrency.get() as usize;
    let queue = queue::open(
        &settings.redis_url,
        &settings.worker.queue_name,
        concurrency,
    )
    .await?;
    let name = worker_name();
    tracing::info!(
        event = events::DAEMON_STARTED,
        worker = %name,
        concurrency,
        queue = %settings.worker.queue_name,
        "daemon started"
    );

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let claimer = tokio::spawn(claim::run_loop(
        pool.clone(),
        queue.clone(),
        settings.worker.clone(),
        stop_rx.clone(),
    ));
    let recoverer = tokio::spawn(recovery::run_loop(
        pool.clone(),
        settings.worker.clone(),
        stop_rx.clone(),
    ));

    let signal = {
        let stop_tx = stop_tx.clone();
        async move {
            shutdown.await;
            tracing::info!(
                event = events::DAEMON_STOPPING,
                "shutdown requested; finishing in-flight sends"
            );
            let _ = stop_tx.send(true);
            Ok::<(), std::io::Error>(())
        }
    };
    let handler = handler::Handler::new(pool.clone(), service);
    let worker = WorkerBuilder::new(name)
        .backend(queue.poll_with_interval(settings.worker.poll_interval))
        .data(handler)
        .concurrency(concurrency)
        .parallelize(tokio::spawn)
        .build(handler::handle)
        .run_until(signal);

    let grace = settings.shutdown_grace;
    let mut stop_watch = stop_rx.clone();
    let result = tokio::select! {
        r = worker => r.map_err(|e| WorkerError::Apalis(e.to_string())),
        _ = async {
            let _ = stop_watch.wait_for(|s| *s).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(event = events::DAEMON_STOPPED, "shutdown grace elapsed with sends in flight; their rows will be recovered after SEND_LEASE_MS");
            Ok(())
        }
    };
    let asked = *stop_rx.borrow();
    let _ = stop_tx.send(true);
    let _ = claimer.await;
    let _ = recoverer.await;
    result?;
    if !asked {
        return Err(WorkerError::StoppedUnasked);
    }
    tracing::info!(
        event = events::DAEMON_STOPPED,
        reason = "shutdown requested",
        "daemon stopped"
    );
    Ok(())
}
