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
    Ok(Arc::new(MailProviderService::new(
        pool,
        Arc::new(factory),
        clock,
        ServiceSettings {
            defer_spread_max: config.defer_spread_max,
            max_attempts: config.max_attempts.get(),
        },
    )))
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
    refuse_a_cluster_for_the_queue(&config.redis_url).await?;
    let service = build_service(&config, pool.clone(), Arc::new(SystemClock))?;
    worker::run(pool, service, daemon_settings(&config), shutdown).await?;
    Ok(())
}

/// The queue (apalis-redis) keeps each job across several keys with no common hash tag, so on
/// a Redis Cluster its scripts fail with `CROSSSLOT`. Say so at start-up instead. (The limiter
/// is fine on a cluster: point `MAIL_RATE_LIMIT_REDIS_URL` at it.) A Redis that cannot be
/// reached is left to the queue's own reconnects.
async fn refuse_a_cluster_for_the_queue(url: &url::Url) -> anyhow::Result<()> {
    let Ok(client) = redis::Client::open(url.as_str()) else {
        return Ok(());
    };
    let info = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("INFO")
            .arg("cluster")
            .query_async::<String>(&mut conn)
            .await
    })
    .await;
    if let Ok(Ok(info)) = info
        && info.contains("cluster_enabled:1")
    {
        anyhow::bail!(
            "REDIS_URL ({}): this is a Redis Cluster node, but the job queue needs a standalone (or Sentinel-managed) Redis; \
             a cluster can serve the rate limiter (MAIL_RATE_LIMIT_REDIS_URL)",
            crate::config::redact_url(url)
        );
    }
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
