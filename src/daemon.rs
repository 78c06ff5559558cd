//! The composition root of `mail-worker run`: one PostgreSQL pool, one [`MailRateLimiter`]
//! (its own Redis connection), one [`MailerFactory`], one [`MailProviderService`], and the
//! worker loops, until SIGTERM/SIGINT.

use std::{future::Future, process::ExitCode, sync::Arc};

use anyhow::Context;
use sqlx::PgPool;

use crate::{
    clock::{Clock, SystemClock},
    config::Config,
    events,
    mailer::factory::MailerFactory,
    rate_limit::MailRateLimiter,
    service::{MailProviderService, ServiceSettings},
    store,
    worker::{self, DaemonSettings},
};

/// Builds the service stack for `config` on `pool`: limiter, factory, service.
///
/// # Errors
/// A limiter or HTTP client that cannot be built from the configuration.
pub fn build_service(
    config: &Config,
    pool: PgPool,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Arc<MailProviderService>> {
    let limiter = Arc::new(
        MailRateLimiter::new(&config.rate_limit)
            .context("building the rate limiter")?
            .with_history(Arc::new(store::history::PgSendHistory::new(pool.clone()))),
    );
    let factory =
        MailerFactory::new(config, limiter, clock.clone()).context("building the mailers")?;
    Ok(Arc::new(
        MailProviderService::new(
            pool,
            Arc::new(factory),
            clock,
            ServiceSettings {
                defer_spread_max: config.defer_spread_max,
                max_attempts: config.max_attempts.get(),
            },
        )
        .with_outcome_write_deadline(config.worker.send_lease),
    ))
}

/// The daemon's settings from the config.
pub fn daemon_settings(config: &Config) -> DaemonSettings {
    DaemonSettings {
        redis_url: config.redis_url.clone(),
        worker: config.worker.clone(),
        shutdown_grace: config.shutdown_grace,
    }
}

/// Runs the daemon until `shutdown` completes.
///
/// # Errors
/// Start-up failures and parts that stopped on their own.
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // Each worker slot holds a connection at a time; keep a few for the loops.
    let pool = store::prepare(&config.database_url, config.worker.concurrency.get() + 4)
        .await
        .context("preparing the database")?;
    let service = build_service(&config, pool.clone(), Arc::new(SystemClock))?;
    worker::run(pool, service, daemon_settings(&config), shutdown).await?;
    Ok(())
}

/// `mail-worker run`: the daemon until SIGTERM or SIGINT; exit 0 after a requested shutdown,
/// non-zero when any part stopped on its own.
///
/// # Errors
/// As [`run_until`].
pub async fn run(config: Config) -> anyhow::Result<ExitCode> {
    run_until(config, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

/// Completes on SIGTERM (Kubernetes' stop) or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!(event = events::DAEMON_STOPPING, signal = "SIGINT", "signal received"),
        _ = term => tracing::info!(event = events::DAEMON_STOPPING, signal = "SIGTERM", "signal received"),
    }
}
