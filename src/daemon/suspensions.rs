//! The operator's suspensions written back from PostgreSQL into the limiter's Redis every
//! [`EVERY`] (docs/decisions/0048-adaptive-rules.md): a Redis that was flushed or replaced gets
//! them back within one tick, so it never silently lifts one for longer.

use std::{sync::Arc, time::Duration};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{
    domain::MailboxAddress,
    rate_limit::{KeptSuspension, MailRateLimiter, ScopeKey},
    shutdown,
    store::suspensions::{self, Suspension},
};

/// How often: 10 s.
pub(super) const EVERY: Duration = Duration::from_secs(10);

/// Writes the suspensions in force back every [`EVERY`] until `done`.
pub(super) async fn reapply_loop(
    pool: PgPool,
    limiter: Arc<MailRateLimiter>,
    done: CancellationToken,
) {
    let (pool, limiter) = (&pool, &limiter);
    shutdown::every(EVERY, done, None, || async move {
        let now = chrono::Utc::now();
        let kept = match suspensions::in_force(pool, now).await {
            Ok(rows) => rows.into_iter().filter_map(kept).collect::<Vec<_>>(),
            Err(e) => {
                tracing::debug!(error = %e, "operator suspensions not read");
                return;
            }
        };
        match limiter.reapply_suspensions(&kept, now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                written = n,
                "operator suspensions written back into the limiter's Redis (it had lost them)"
            ),
            Err(e) => tracing::debug!(error = %e, "operator suspensions not written back"),
        }
    })
    .await;
}

/// The limiter's view of a kept row (`None`: a row this version cannot read).
fn kept(row: Suspension) -> Option<KeptSuspension> {
    let scope = match row.scope.as_str() {
        "mailbox" => ScopeKey::Mailbox {
            tenant: row.tenant?,
            mailbox: MailboxAddress::parse(&row.key).ok()?,
        },
        "tenant" => ScopeKey::Tenant(row.key),
        "campaign" => ScopeKey::Campaign(row.key),
        _ => return None,
    };
    Some(KeptSuspension {
        scope,
        at: row.suspended_at,
        until: row.suspended_until,
        reason: row.reason,
    })
}
