//! The replicas' heartbeat: every [`EVERY`] this replica beats its row of PostgreSQL's
//! `replicas` and counts the rows beaten within [`STALE_AFTER`] as the live replicas, which the
//! limiter's fail-open shares each mailbox's budgets among (`LiveReplicas`; the setting
//! `MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS` is a lower bound). A change of the count is logged
//! (`mail.replicas.changed`); the row is deleted when the replica stops
//! (docs/decisions/0034-replicas-and-restored-bookings.md).

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{log_events, rate_limit::LiveReplicas, shutdown, store};

/// How often a replica beats.
pub const EVERY: Duration = Duration::from_secs(5);
/// A replica whose row was not beaten for this long is not counted (three beats missed).
pub const STALE_AFTER: Duration = Duration::from_secs(15);

/// Beats replica `id`'s row every `every` until `done`, keeping `live` at the count of rows
/// beaten within `stale_after`; deletes the row at the end. A beat that fails keeps the last
/// count (logged as a warning).
pub async fn run(
    pool: PgPool,
    id: Uuid,
    live: LiveReplicas,
    (every, stale_after): (Duration, Duration),
    done: CancellationToken,
) {
    let (pool, live) = (&pool, &live);
    shutdown::every(every, done, None, || async move {
        match store::replicas::beat(pool, id, stale_after).await {
            Ok(count) => {
                let before = live.get();
                if count != before {
                    live.set(count);
                    tracing::info!(
                        event = log_events::MAIL_REPLICAS_CHANGED,
                        live = count,
                        before,
                        "the live replicas changed: fail-open shares each mailbox's budgets among them"
                    );
                }
            }
            Err(e) => tracing::warn!(
                event = log_events::MAIL_REPLICAS_CHANGED,
                error = %e,
                "the replica heartbeat failed: the last live count is kept"
            ),
        }
    })
    .await;
    if let Err(e) = store::replicas::leave(pool, id).await {
        tracing::warn!(error = %e, "the replica's heartbeat row could not be deleted: it goes stale in 15 s");
    }
}
