//! The apalis job handler: `QUEUED → SENDING`, then [`MailProviderService::send`]. A job whose
//! message is no longer `QUEUED` (apalis-redis delivers at least once) does nothing.

use std::sync::Arc;

use apalis::prelude::{BoxDynError, Data};
use sqlx::PgPool;

use super::queue::SendMessageJob;
use crate::{
    events,
    ops::Metrics,
    service::{MailProviderService, SendOutcome},
    store::{StoreError, messages},
};

/// What each job needs, shared by every handler invocation.
#[derive(Clone)]
pub struct Handler {
    pool: PgPool,
    service: Arc<MailProviderService>,
    metrics: Option<Arc<Metrics>>,
}

impl Handler {
    /// A handler over `pool` and `service`.
    pub fn new(pool: PgPool, service: Arc<MailProviderService>) -> Self {
        Self {
            pool,
            service,
            metrics: None,
        }
    }

    /// Keeps `mail_worker_in_flight` in `metrics` while a job runs.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Processes one job. `Ok(None)` for a duplicate delivery.
    ///
    /// # Errors
    /// Only infrastructure trouble (PostgreSQL); mail outcomes are written and returned.
    pub async fn process(&self, job: SendMessageJob) -> Result<Option<SendOutcome>, StoreError> {
        let _in_flight = self.metrics.as_ref().map(|m| m.in_flight());
        let Some(message) = messages::start_sending(&self.pool, job.message_id).await? else {
            tracing::debug!(
                event = events::WORKER_DUPLICATE_JOB,
                message.id = %job.message_id,
                "message no longer QUEUED; job ignored"
            );
            return Ok(None);
        };
        self.service.send(&message).await.map(Some)
    }
}

/// The apalis entry point. Returns an error only for infrastructure trouble; the row then
/// stays `SENDING` and lease recovery reschedules it.
///
/// # Errors
/// [`StoreError`] boxed.
pub async fn handle(job: SendMessageJob, handler: Data<Handler>) -> Result<(), BoxDynError> {
    match handler.process(job).await {
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::error!(message.id = %job.message_id, error = %e, "job failed on infrastructure trouble");
            Err(Box::new(e))
        }
    }
}
