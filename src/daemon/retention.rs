//! The retention loop (`MAIL_RETENTION`): every [`EVERY`] each replica tries a round of
//! [`store::retention::purge`]; the one that gets the advisory lock deletes, the others skip.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{log_events, ops::Metrics, shutdown, store};

/// How often a replica tries a round (the first at start-up).
pub(super) const EVERY: Duration = Duration::from_secs(15 * 60);

/// Runs rounds deleting the finished messages older than `retention` until `done`; counts them
/// in `mail_worker_messages_purged_total` and logs each round that deleted some.
pub(super) async fn retention_loop(
    pool: PgPool,
    metrics: Arc<Metrics>,
    retention: Duration,
    done: CancellationToken,
) {
    let (pool, metrics, stop) = (&pool, &metrics, &done);
    shutdown::every(EVERY, done.clone(), None, || async move {
        let started = Instant::now();
        match store::retention::purge(pool, retention, store::retention::PAUSE, stop.clone()).await
        {
            Ok(Some(purged)) => {
                metrics.purged(purged.messages);
                if purged.messages > 0 {
                    tracing::info!(
                        event = log_events::MESSAGES_PURGED,
                        messages = purged.messages,
                        attachments = purged.attachments,
                        batches = purged.batches,
                        duration_ms =
                            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        "deleted finished messages older than MAIL_RETENTION"
                    );
                }
            }
            Ok(None) => tracing::debug!("retention: another replica holds the lock, skipped"),
            Err(e) => tracing::warn!(
                event = log_events::MESSAGES_PURGE_FAILED,
                error = %e,
                "a retention round failed; the next one tries again"
            ),
        }
    })
    .await;
}
