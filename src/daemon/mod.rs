//! The composition root of `mail-worker run`: one PostgreSQL pool, one
//! [`crate::rate_limit::MailRateLimiter`] (its own Redis connection), one
//! [`crate::mailer::factory::MailerFactory`], one [`crate::service::MailProviderService`], the worker
//! loops, the operations listener (`METRICS_LISTEN`: `/metrics`, `/healthz`, `/readyz`) and the
//! HTTP ingest (`INGEST_LISTEN`, [`crate::ingest`]), until SIGTERM/SIGINT.

use std::{
    future::Future,
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, atomic::AtomicBool},
};

use futures::future::BoxFuture;
use sqlx::PgPool;

use crate::{
    clock::{Clock, SystemClock},
    config::Config,
    intake, log_events,
    mailer::factory::SecretEnv,
    ops::{self, Liveness, Metrics, OpsState, Readiness},
    rate_limit::MailRateLimiter,
    shutdown::CancellationToken,
    store,
    supervise::Supervisor,
    worker::{self, DaemonSettings, Observers},
};

mod gauges;
pub mod heartbeat;
mod retention;
mod senders_file;
mod stack;
mod startup;
mod suspensions;
mod warmup;

pub(crate) use senders_file::check as check_senders_file;
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
    /// One more part, supervised as the daemon's own are: tests make it stop or panic to see
    /// the daemon stop (`daemon.partFailed`, the run future's error naming it).
    pub extra_part: Option<(&'static str, ExtraPart)>,
}

/// A part given in [`Options::extra_part`]: started with the token cancelled when the daemon's
/// last parts stop.
pub type ExtraPart = Arc<dyn Fn(CancellationToken) -> BoxFuture<'static, ()> + Send + Sync>;

/// The handle of a daemon started by [`start`].
#[derive(Debug, Clone)]
pub struct Handle {
    /// Where `/metrics`, `/healthz`, `/readyz` answer (`None` with `METRICS_LISTEN=off`).
    pub ops_addr: Option<SocketAddr>,
    /// Where the HTTP ingest answers (`None` with `INGEST_LISTEN=off`).
    pub ingest_addr: Option<SocketAddr>,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    stop: CancellationToken,
}

impl Handle {
    /// Asks the daemon to stop, as SIGTERM does; its run future then completes.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

/// Starts the daemon in this process: binds `METRICS_LISTEN` (a port in use fails here,
/// naming the variable) and opens the (existing, migrated) database. Returns its [`Handle`]
/// and the future that runs it until [`Handle::stop`], or until one of its parts stops on its
/// own, fails or panics (then the future's error names the part: `src/supervise.rs`).
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
    let ingest = crate::ingest::prepare(&config).await?;
    let ingest_addr = ingest.as_ref().and_then(|(l, _)| ops::local_addr(l));
    for warning in config
        .warnings()
        .into_iter()
        .chain(Config::environment_warnings())
    {
        tracing::warn!(event = log_events::CONFIG_WARNING, "{warning}");
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
    let stop = CancellationToken::new();
    let shutdown = stop.clone().cancelled_owned();
    let run = async move {
        let parts = Supervisor::default();
        if let Some((name, part)) = options.extra_part {
            parts.spawn(name, move |done| part(done));
        }
        spawn_parts(
            &parts,
            &config,
            &pool,
            &stack,
            &observers,
            (listener, outbox, ingest),
        )?;
        let settings = DaemonSettings {
            metrics_listen: ops_addr,
            ..daemon_settings(&config)
        };
        worker::spawn_parts(&parts, pool, stack.service, settings, observers);
        finish(parts, shutdown, stack.limiter).await
    };
    Ok((
        Handle {
            ops_addr,
            ingest_addr,
            metrics,
            stop,
        },
        run,
    ))
}

/// Starts every part but the worker's on `parts`: the intake among the draining parts (it stops
/// when the claim loop does: its jobs in flight are stored or returned), the rest after them.
fn spawn_parts(
    parts: &Supervisor,
    config: &Config,
    pool: &PgPool,
    stack: &Stack,
    observers: &Observers,
    (listener, outbox, ingest): (
        Option<tokio::net::TcpListener>,
        Option<crate::outbox::OutboxSettings>,
        Option<(tokio::net::TcpListener, crate::ingest::IngestSettings)>,
    ),
) -> anyhow::Result<()> {
    let intake = match intake::IntakeSettings::from_config(&config.intake, config.events.outbox()) {
        Some(settings) => Some((settings, intake::QueueConnection::lazy(&config.redis_url)?)),
        None => None,
    };
    if let Some(listener) = listener {
        let state = ops_state(config, pool, stack, observers, intake.as_ref());
        parts.spawn("ops", |done| {
            ops::serve(listener, state, done.cancelled_owned())
        });
    }
    if let Some((settings, conn)) = intake {
        observers
            .liveness
            .watch_intake(Arc::clone(&settings.health));
        let (pool, metrics) = (pool.clone(), Arc::clone(&observers.metrics));
        parts.spawn_draining("intake", |stop| {
            intake::run(settings, conn, pool, metrics, stop)
        });
    }
    if let Some((listener, settings)) = ingest {
        // Among the draining parts: no request is taken once the claim loop stops.
        let (pool, metrics) = (pool.clone(), Arc::clone(&observers.metrics));
        parts.spawn_draining("ingest", |stop| {
            crate::ingest::serve(listener, pool, settings, metrics, stop.cancelled_owned())
        });
    }
    let metrics = &observers.metrics;
    parts.spawn("gauges", |done| {
        gauges::messages_gauge_loop(
            pool.clone(),
            Arc::clone(metrics),
            Arc::clone(&observers.liveness),
            config.metrics_refresh,
            done,
        )
    });
    parts.spawn("budget-gauges", |done| {
        gauges::budget_gauge_loop(config.clone(), pool.clone(), Arc::clone(metrics), done)
    });
    parts.spawn("suspensions", |done| {
        suspensions::reapply_loop(pool.clone(), Arc::clone(&stack.limiter), done)
    });
    parts.spawn("mailbox-order", |done| {
        gauges::mailbox_order_loop(pool.clone(), done)
    });
    parts.spawn("heartbeat", |done| {
        heartbeat::run(
            pool.clone(),
            uuid::Uuid::new_v4(),
            stack.live_replicas.clone(),
            (heartbeat::EVERY, heartbeat::STALE_AFTER),
            done,
        )
    });
    if let Some(keep) = config.retention {
        parts.spawn("retention", |done| {
            retention::retention_loop(pool.clone(), Arc::clone(metrics), keep, done)
        });
    }
    parts.spawn("warm-up", |done| {
        warmup::warmup_loop(
            pool.clone(),
            (warmup::gate(config), Arc::clone(metrics)),
            stack.clock.clone(),
            done,
        )
    });
    if config.bounces.enabled {
        parts.spawn("bounces", |done| stack.bounces.clone().run(done));
    }
    // Every replica: a sender's `traceDelivery` may turn it on without GRAPH_TRACE_DELIVERY.
    parts.spawn("delivery", |done| stack.delivery.clone().run(done));
    // The webhooks: their own tasks, so a slow receiver never holds a send.
    if let Some(settings) = outbox {
        parts.spawn("outbox", |done| {
            crate::outbox::run(pool.clone(), settings, Arc::clone(metrics), done)
        });
    }
    Ok(())
}

/// What `/metrics`, `/healthz` and `/readyz` read.
fn ops_state(
    config: &Config,
    pool: &PgPool,
    stack: &Stack,
    observers: &Observers,
    intake: Option<&(intake::IntakeSettings, intake::QueueConnection)>,
) -> OpsState {
    let readiness = Readiness::new(
        pool.clone(),
        Some(Arc::clone(&stack.limiter)),
        Arc::clone(&observers.claiming),
    )
    .with_unreachable_bound(config.rate_limit.unreachable_not_ready_after);
    let readiness = match intake {
        Some((settings, conn)) => readiness.with_intake(conn.clone(), Arc::clone(&settings.health)),
        None => readiness,
    };
    OpsState {
        metrics: Arc::clone(&observers.metrics),
        liveness: Arc::clone(&observers.liveness),
        readiness: Arc::new(readiness),
    }
}

/// Runs `parts` until `shutdown` (or a part's failure). Sends the shutdown grace cut off ended
/// their leases as they were dropped (spawned): kept until their request times out when one may
/// still be in flight at Graph, released otherwise; what is left is ended the same way once the
/// draining parts are done, before the rest stop.
///
/// # Errors
/// The part that stopped on its own, failed or panicked.
async fn finish(
    parts: Supervisor,
    shutdown: impl Future<Output = ()>,
    limiter: Arc<MailRateLimiter>,
) -> anyhow::Result<()> {
    parts
        .run(shutdown, async move {
            limiter.hold_live().await;
        })
        .await?;
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
/// an error (exit 1) when a part stopped on its own, failed or panicked.
///
/// # Errors
/// As [`run_until`].
pub(crate) async fn run(config: Config) -> anyhow::Result<ExitCode> {
    run_until(config, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

pub use crate::shutdown::shutdown_signal;
