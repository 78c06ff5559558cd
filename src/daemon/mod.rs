//! The composition root of `mail-worker run`: one PostgreSQL pool, one [`MailRateLimiter`]
//! (its own Redis connection), one [`MailerFactory`], one [`MailProviderService`], the worker
//! loops and the operations listener (`METRICS_LISTEN`: `/metrics`, `/healthz`, `/readyz`),
//! until SIGTERM/SIGINT.

use std::{
    future::Future,
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, atomic::AtomicBool},
};

use anyhow::Context;
use sqlx::PgPool;

use crate::{
    clock::{Clock, SystemClock},
    config::Config,
    events, intake,
    mailer::factory::{MailerFactory, SecretEnv},
    ops::{self, Liveness, Metrics, OpsState, Readiness},
    rate_limit::MailRateLimiter,
    service::{MailProviderService, ServiceSettings},
    shutdown, store,
    worker::{self, DaemonSettings, Observers},
};

mod gauges;
pub mod heartbeat;
mod retention;

/// The service stack and the parts of it the daemon also watches.
#[derive(Debug, Clone)]
pub(crate) struct Stack {
    /// The service.
    pub service: Arc<MailProviderService>,
    /// The limiter (for `/readyz`'s degraded check).
    pub limiter: Arc<MailRateLimiter>,
    /// The bounce reader (`GRAPH_READ_BOUNCES=on`), on the same limiter and factory.
    pub bounces: crate::bounces::BounceReader,
    /// The delivery reconciler (message trace), on the same limiter and factory.
    pub delivery: crate::delivery::DeliveryReconciler,
    /// The live replicas the heartbeat counts, which the limiter's fail-open shares among.
    pub live_replicas: crate::rate_limit::LiveReplicas,
}

/// Builds the service stack for `config` on `pool`: limiter, factory, service, counting in
/// `metrics`; `env:` secrets through `secret_env` (default: the process environment).
///
/// # Errors
/// A limiter or HTTP client that cannot be built from the configuration.
pub(crate) fn build_stack(
    config: &Config,
    pool: PgPool,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    secret_env: Option<SecretEnv>,
) -> anyhow::Result<Stack> {
    let live_replicas = crate::rate_limit::LiveReplicas::new();
    let limiter = Arc::new(
        MailRateLimiter::new(&config.rate_limit)
            .context("building the rate limiter")?
            .with_live_replicas(live_replicas.clone())
            .with_history(Arc::new(store::history::PgSendHistory::new(pool.clone())))
            .with_metrics(Arc::clone(&metrics)),
    );
    let mut factory = MailerFactory::new(config, Arc::clone(&limiter), clock.clone())
        .context("building the mailers")?
        .with_metrics(Arc::clone(&metrics));
    if let Some(env) = secret_env {
        factory = factory.with_secret_env(env);
    }
    let factory = Arc::new(factory);
    let bounces = crate::bounces::BounceReader::new(
        pool.clone(),
        Arc::clone(&factory),
        config.bounces.clone(),
    )
    .with_outbox(config.events.outbox());
    let delivery = crate::delivery::DeliveryReconciler::new(
        pool.clone(),
        Arc::clone(&factory),
        config.trace.clone(),
    )
    .with_outbox(config.events.outbox());
    let service = MailProviderService::new(
        pool,
        factory,
        clock,
        ServiceSettings {
            defer_spread_max: config.defer_spread_max,
            max_attempts: config.max_attempts.map_or(u32::MAX, |n| n.get()),
            retry_for: config.retry_for,
        },
    )
    .with_metrics(Arc::clone(&metrics))
    .with_send_lease(config.worker.send_lease)
    .with_outbox(config.events.outbox());
    Ok(Stack {
        service: Arc::new(service),
        limiter,
        bounces,
        delivery,
        live_replicas,
    })
}

/// The bounce reader over the real stack for `config` on `pool` (its own limiter, factory and
/// metrics, the process environment), on `clock`: what a replica runs with
/// `GRAPH_READ_BOUNCES=on`, for tests and benchmarks that drive its rounds.
///
/// # Errors
/// As [`build_stack`].
pub fn build_bounce_reader(
    config: &Config,
    pool: PgPool,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<crate::bounces::BounceReader> {
    Ok(build_stack(config, pool, clock, metrics, None)?.bounces)
}

/// The delivery reconciler over the real stack for `config` on `pool`, on `clock`, counting in
/// `metrics` (tests, the benchmark).
///
/// # Errors
/// As [`build_stack`].
pub fn build_delivery_reconciler(
    config: &Config,
    pool: PgPool,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<crate::delivery::DeliveryReconciler> {
    Ok(build_stack(config, pool, clock, metrics, None)?.delivery)
}

/// Builds the service stack for `config` on `pool` (its own metrics, the process environment).
///
/// # Errors
/// As [`build_stack`].
pub fn build_service(
    config: &Config,
    pool: PgPool,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Arc<MailProviderService>> {
    Ok(build_stack(config, pool, clock, Arc::new(Metrics::new()), None)?.service)
}

/// The daemon's settings from the config.
pub fn daemon_settings(config: &Config) -> DaemonSettings {
    DaemonSettings {
        worker: config.worker.clone(),
        shutdown_grace: config.shutdown_grace,
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
    say_if_limiter_unreachable(Arc::clone(&stack.limiter));
    probe_paused_senders_now(&pool).await;
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

/// Makes the rows an earlier process paused (a sender's missing or refused credentials) due now,
/// so this process probes each sender at once instead of at the earlier process's next probe
/// (up to 15 min): a restart is how an `env:` secret reaches the daemon. A database error is
/// logged; the rows then wait for their probe time as before.
async fn probe_paused_senders_now(pool: &PgPool) {
    match store::messages::resume_all_paused(pool).await {
        Ok(0) => {}
        Ok(due) => tracing::info!(
            event = events::MAIL_SENDER_RESUMED,
            why = "start-up",
            messages_due = due,
            "messages an earlier process paused for their sender's credentials are due now: this process probes each sender at once"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            "could not make the paused senders' messages due at start-up; they wait for their probe time"
        ),
    }
}

/// Pings the limiter's Redis once, in the background, and says loudly if it does not answer:
/// the daemon still starts (sends fail open, bounded), but an operator who mistyped
/// `REDIS_URL` should not have to find that out from `/readyz`.
fn say_if_limiter_unreachable(limiter: Arc<MailRateLimiter>) {
    tokio::spawn(async move {
        if let Err(e) = limiter.ping().await {
            tracing::error!(
                event = events::MAIL_RATE_LIMIT_UNREACHABLE_AT_START,
                error = %e,
                "the rate limiter's Redis (MAIL_RATE_LIMIT_REDIS_URL, default REDIS_URL) does not answer: sends fail open, paced locally within this replica's share, until it does; /readyz reports degraded"
            );
        }
    });
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
    worker::run_observed(
        pool,
        stack.service,
        daemon_settings(&config),
        observers,
        shutdown,
    )
    .await;
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
