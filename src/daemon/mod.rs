//! The composition root of `mail-worker run`: one PostgreSQL pool, one
//! [`crate::rate_limit::MailRateLimiter`] (its own Redis connection), one
//! [`crate::mailer::factory::MailerFactory`], one [`crate::service::MailProviderService`], the worker
//! loops and the operations listener (`METRICS_LISTEN`: `/metrics`, `/healthz`, `/readyz`),
//! until SIGTERM/SIGINT.

use std::{
    future::Future,
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, atomic::AtomicBool},
};

use sqlx::PgPool;

use crate::{
    clock::{Clock, SystemClock},
    config::Config,
    events, intake,
    mailer::factory::SecretEnv,
    ops::{self, Liveness, Metrics, OpsState, Readiness},
    shutdown, store,
    worker::{self, DaemonSettings, Observers},
};

mod gauges;
pub mod heartbeat;
mod retention;
mod senders_file;
mod stack;
mod startup;

pub(crate) use stack::{Stack, build_stack};
pub use stack::{build_bounce_reader, build_delivery_reconciler, build_service};

/// The daemon's settings from the config.
pub fn daemon_settings(config: &Config) -> DaemonSettings {
    DaemonSettings {
        worker: config.worker.clone(),
        shutdown_grace: config.shutdown_grace,
        metrics_listen: config.metrics_listen,
        config_digest: config.digest(),
    }
}

/// What an in-process daemon may be given instead of the defaults (tests, the benchmarks).
#[derive(Clone, Default)]
pub struct Options {
    /// The clock (default: the system's).
    pub clock: Option<Arc<dyn Clock>>,
    /// How `env:` secrets are looked up (default: the process environment).
    pub secret_env: Option<SecretEnv>,
}

/// The handle of a daemon started by [`start`].
#[derive(Debug, Clone)]
pub struct Handle {
    /// Where `/metrics`, `/healthz`, `/readyz` answer (`None` with `METRICS_LISTEN=off`).
    pub ops_addr: Option<SocketAddr>,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Handle {
    /// Asks the daemon to stop, as SIGTERM does; its run future then completes.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

/// Starts the daemon in this process: binds `METRICS_LISTEN` (a port in use fails here,
/// naming the variable) and opens the (existing, migrated) database. Returns its [`Handle`]
/// and the future that runs it until [`Handle::stop`].
///
/// # Errors
/// Start-up failures, each naming what to fix.
pub async fn start(
    config: Config,
    options: Options,
) -> anyhow::Result<(Handle, impl Future<Output = anyhow::Result<()>>)> {
    // A bad senders file stops start-up before anything is bound or opened.
    let senders = config
        .senders_file
        .as_deref()
        .map(senders_file::check)
        .transpose()?;
    let listener = match config.metrics_listen {
        Some(addr) => Some(ops::bind(addr).await?),
        None => None,
    };
    let ops_addr = listener.as_ref().and_then(ops::local_addr);
    for warning in config.warnings() {
        tracing::warn!(event = events::CONFIG_WARNING, "{warning}");
    }
    // The webhook secret is read now: a missing file stops start-up, naming the variable.
    let outbox = crate::outbox::OutboxSettings::from_config(&config)?;
    // Independent of WORKER_CONCURRENCY: a send holds a connection only per statement.
    let pool = store::open(&config.database_url, config.database_max_connections.get()).await?;
    let metrics = Arc::new(Metrics::new());
    let clock = options.clock.unwrap_or_else(|| Arc::new(SystemClock));
    let stack = build_stack(
        &config,
        pool.clone(),
        clock,
        Arc::clone(&metrics),
        options.secret_env,
    )?;
    if let Some(senders) = &senders {
        senders_file::import(&config, &pool, senders).await?;
    }
    startup::say_if_limiter_unreachable(Arc::clone(&stack.limiter));
    startup::probe_paused_senders_now(&pool).await;
    let observers = Observers {
        metrics: Arc::clone(&metrics),
        liveness: Arc::new(Liveness::default()),
        claiming: Arc::new(AtomicBool::new(false)),
    };
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let run = run_parts(
        config,
        pool,
        stack,
        observers,
        (listener, outbox),
        async move {
            shutdown::stopped(&mut stop_rx).await;
        },
    );
    Ok((
        Handle {
            ops_addr,
            metrics,
            stop: stop_tx,
        },
        run,
    ))
}

async fn run_parts(
    config: Config,
    pool: PgPool,
    stack: Stack,
    observers: Observers,
    (listener, outbox): (
        Option<tokio::net::TcpListener>,
        Option<crate::outbox::OutboxSettings>,
    ),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let settings = DaemonSettings {
        metrics_listen: listener.as_ref().and_then(ops::local_addr),
        ..daemon_settings(&config)
    };
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    // The intake stops when the claim loop does: its jobs in flight are stored or returned.
    let (intake_stop, intake_stopped) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        shutdown.await;
        let _ = intake_stop.send(true);
    };
    let intake = match intake::IntakeSettings::from_config(&config.intake, config.events.outbox()) {
        Some(settings) => Some((settings, intake::QueueConnection::lazy(&config.redis_url)?)),
        None => None,
    };
    if let Some((settings, _)) = &intake {
        observers
            .liveness
            .watch_intake(Arc::clone(&settings.health));
    }
    let server = listener.map(|listener| {
        let state = OpsState {
            metrics: Arc::clone(&observers.metrics),
            liveness: Arc::clone(&observers.liveness),
            readiness: Arc::new({
                let readiness = Readiness::new(
                    pool.clone(),
                    Some(Arc::clone(&stack.limiter)),
                    Arc::clone(&observers.claiming),
                )
                .with_unreachable_bound(config.rate_limit.unreachable_not_ready_after);
                match &intake {
                    Some((settings, conn)) => {
                        readiness.with_intake(conn.clone(), Arc::clone(&settings.health))
                    }
                    None => readiness,
                }
            }),
        };
        let mut done = done_rx.clone();
        tokio::spawn(ops::serve(listener, state, async move {
            shutdown::stopped(&mut done).await;
        }))
    });
    let gauge = tokio::spawn(gauges::messages_gauge_loop(
        pool.clone(),
        Arc::clone(&observers.metrics),
        Arc::clone(&observers.liveness),
        config.metrics_refresh,
        done_rx.clone(),
    ));
    let budgets = tokio::spawn(gauges::budget_gauge_loop(
        config.clone(),
        pool.clone(),
        Arc::clone(&observers.metrics),
        done_rx.clone(),
    ));
    let order = tokio::spawn(gauges::mailbox_order_loop(pool.clone(), done_rx.clone()));
    let heartbeat = tokio::spawn(heartbeat::run(
        pool.clone(),
        uuid::Uuid::new_v4(),
        stack.live_replicas.clone(),
        (heartbeat::EVERY, heartbeat::STALE_AFTER),
        done_rx.clone(),
    ));
    let retention = config.retention.map(|keep| {
        tokio::spawn(retention::retention_loop(
            pool.clone(),
            Arc::clone(&observers.metrics),
            keep,
            done_rx.clone(),
        ))
    });
    let bounces = config.bounces.enabled.then(|| {
        let stop = done_rx.clone();
        tokio::spawn(stack.bounces.run(stop))
    });
    // Every replica: a sender's `traceDelivery` may turn it on without GRAPH_TRACE_DELIVERY.
    let delivery = tokio::spawn(stack.delivery.run(done_rx.clone()));
    // The webhooks: their own tasks, so a slow receiver never holds a send.
    let outbox = outbox.map(|settings| {
        tokio::spawn(crate::outbox::run(
            pool.clone(),
            settings,
            Arc::clone(&observers.metrics),
            done_rx.clone(),
        ))
    });
    let intake = intake.map(|(settings, conn)| {
        tokio::spawn(intake::run(
            settings,
            conn,
            pool.clone(),
            Arc::clone(&observers.metrics),
            intake_stopped,
        ))
    });
    worker::run_observed(pool, stack.service, settings, observers, shutdown).await;
    // Sends the shutdown grace cut off ended their leases as they were dropped (spawned): kept
    // until their request times out when one may still be in flight at Graph, released
    // otherwise. End what is left the same way before the process exits.
    stack.limiter.hold_live().await;
    if let Some(intake) = intake {
        match intake.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(event = events::INTAKE_REDIS_ERROR, error = %e, "the intake consumer failed")
            }
            Err(e) => tracing::error!(error = %e, "the intake consumer panicked"),
        }
    }
    let _ = done_tx.send(true);
    let _ = gauge.await;
    let _ = budgets.await;
    let _ = order.await;
    let _ = heartbeat.await;
    if let Some(retention) = retention {
        let _ = retention.await;
    }
    if let Some(bounces) = bounces {
        let _ = bounces.await;
    }
    let _ = delivery.await;
    if let Some(outbox) = outbox
        && let Ok(Err(e)) = outbox.await
    {
        tracing::warn!(error = %e, "the outbox's dispatchers could not start");
    }
    if let Some(server) = server {
        match server.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "the metrics listener failed"),
            Err(e) => tracing::warn!(error = %e, "the metrics listener panicked"),
        }
    }
    Ok(())
}

/// Runs the daemon until `shutdown` completes.
///
/// # Errors
/// Start-up failures and parts that stopped on their own.
pub(crate) async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (handle, run) = start(config, Options::default()).await?;
    let stop = async move {
        shutdown.await;
        handle.stop();
        std::future::pending::<()>().await;
    };
    tokio::select! {
        result = run => result,
        () = stop => Ok(()),
    }
}

/// `mail-worker run`: the daemon until SIGTERM or SIGINT; exit 0 after a requested shutdown,
/// non-zero when any part stopped on its own.
///
/// # Errors
/// As [`run_until`].
pub(crate) async fn run(config: Config) -> anyhow::Result<ExitCode> {
    run_until(config, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

pub use crate::shutdown::shutdown_signal;
