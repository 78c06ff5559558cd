//! Writing an outcome: retried while PostgreSQL is unreachable, until the attempt's lease
//! would let another replica take the row ([`MailProviderService::durably`]); and the log line
//! of an attempt whose write a newer claim fenced off.

use std::time::{Duration, Instant};

use uuid::Uuid;

use super::MailProviderService;
use crate::{
    log_events,
    store::{
        StoreError,
        messages::{self, Fence},
    },
};

impl MailProviderService {
    /// Runs the outcome write `write` until it succeeds, fails for a reason other than
    /// connectivity, or the deadline after `started` passes.
    pub(super) async fn durably<T, F, Fut>(
        &self,
        id: Uuid,
        started: Instant,
        what: &str,
        mut write: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut n = 0u32;
        loop {
            match write().await {
                Err(e)
                    if is_connectivity(&e) && started.elapsed() < self.outcome_write_deadline =>
                {
                    n += 1;
                    self.outcome_write_retries
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let wait = crate::backoff::jittered(
                        n + 1,
                        Duration::from_millis(200),
                        Duration::from_secs(5),
                    );
                    tracing::warn!(
                        event = log_events::MAIL_OUTCOME_WRITE_RETRY,
                        message.id = %id,
                        outcome = what,
                        retries = n,
                        backoff_ms = wait.as_millis() as u64,
                        error = %e,
                        "PostgreSQL unreachable; retrying the outcome write"
                    );
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    /// Logs that the attempt holding `fence` wrote nothing: a newer claim holds the row.
    pub(super) async fn stale(&self, fence: Fence, outcome: &str) {
        let (status, current) = match messages::holder(&self.pool, fence.id).await {
            Ok(Some((status, token))) => (status, token.map(|t| t.to_string())),
            Ok(None) => ("gone".to_owned(), None),
            Err(e) => (format!("unknown ({e})"), None),
        };
        tracing::warn!(
            event = log_events::MAIL_SEND_STALE_OUTCOME,
            message.id = %fence.id,
            outcome,
            claim_token = %fence.token,
            current_token = current.as_deref(),
            current_status = %status,
            "this attempt's lease was taken over: its outcome is not written (the live attempt checks Graph before it sends)"
        );
    }
}

/// Whether `e` means PostgreSQL could not be reached (worth retrying), not a refused query.
fn is_connectivity(e: &StoreError) -> bool {
    match e {
        StoreError::Database(e) => match e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => true,
            // Class 08 (connection exception), 57P01-57P03 (shutdown, cannot connect now).
            sqlx::Error::Database(db) => db
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
            _ => false,
        },
        _ => false,
    }
}
