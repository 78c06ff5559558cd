//! Lease recovery — no message is lost or stuck: `SENDING` rows older than `SEND_LEASE` (a
//! replica died mid-send; `mail.send.outcomeUnknown`) go back to `SCHEDULED`.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{
    config::WorkerConfig,
    log_events, shutdown,
    store::{StoreError, messages},
};

/// Runs recovery once; returns how many `SENDING` rows it rescheduled.
///
/// # Errors
/// PostgreSQL errors.
pub async fn recover_once(pool: &PgPool, config: &WorkerConfig) -> Result<usize, StoreError> {
    let sending = messages::recover_stale_sending(pool, config.send_lease).await?;
    for id in &sending {
        tracing::warn!(
            event = log_events::MAIL_SEND_OUTCOME_UNKNOWN,
            message.id = %id,
            "SENDING past its lease; rescheduled as possibly sent: its next attempt checks Graph before it sends again"
        );
    }
    Ok(sending.len())
}

/// How often recovery runs: a tenth of the send lease, between 1 s and 30 s.
pub(crate) fn interval(config: &WorkerConfig) -> Duration {
    (config.send_lease / 10).clamp(Duration::from_secs(1), Duration::from_secs(30))
}

/// Recovers periodically until `stop` is cancelled (failures are logged and retried), beating `recovery` on `liveness`.
pub(crate) async fn run_loop_observed(
    pool: PgPool,
    config: WorkerConfig,
    stop: CancellationToken,
    liveness: std::sync::Arc<crate::ops::Liveness>,
) {
    let beat = Some((&*liveness, "recovery"));
    let (pool, config) = (&pool, &config);
    shutdown::every(interval(config), stop, beat, || async move {
        if let Err(e) = recover_once(pool, config).await {
            tracing::warn!(error = %e, "lease recovery failed; retrying next tick");
        }
    })
    .await;
}
