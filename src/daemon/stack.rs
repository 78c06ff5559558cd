//! The service stack `mail-worker run` builds: one [`MailRateLimiter`] (its own Redis
//! connection), one [`MailerFactory`], one [`MailProviderService`], and the bounce reader and the
//! delivery reconciler on them.

use std::sync::Arc;

use anyhow::Context;
use sqlx::PgPool;

use crate::{
    clock::Clock,
    config::Config,
    mailer::factory::{MailerFactory, SecretEnv},
    ops::Metrics,
    rate_limit::MailRateLimiter,
    service::{MailProviderService, ServiceSettings},
    store,
};

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
    /// The clock (a test's virtual time decides the warm-up's day).
    pub clock: Arc<dyn Clock>,
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
            .with_metrics(Arc::clone(&metrics))
            .with_adaptive_rules(crate::rate_limit::adaptive::load_rules(
                config.settings.limiter.adaptive_rules_file.as_deref(),
            )?),
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
        Arc::clone(&clock),
        ServiceSettings {
            defer_spread_max: config.defer_spread_max,
            max_attempts: config.max_attempts.map_or(u32::MAX, |n| n.get()),
            retry_for: config.retry_for,
            send_lease: config.worker.send_lease,
        },
    )
    .with_metrics(Arc::clone(&metrics))
    .with_outbox(config.events.outbox());
    Ok(Stack {
        service: Arc::new(service),
        limiter,
        bounces,
        delivery,
        live_replicas,
        clock,
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
