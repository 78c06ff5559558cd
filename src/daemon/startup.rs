//! What a starting daemon does once, beside building its parts: it says loudly when the
//! limiter's Redis does not answer, and makes the rows an earlier process paused due now.

use std::sync::Arc;

use sqlx::PgPool;

use crate::{events, rate_limit::MailRateLimiter, store};

/// Makes the rows an earlier process paused (a sender's missing or refused credentials) due now,
/// so this process probes each sender at once instead of at the earlier process's next probe
/// (up to 15 min): a restart is how an `env:` secret reaches the daemon. A database error is
/// logged; the rows then wait for their probe time as before.
pub(super) async fn probe_paused_senders_now(pool: &PgPool) {
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
pub(super) fn say_if_limiter_unreachable(limiter: Arc<MailRateLimiter>) {
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
