//! Sending one claimed message: [`Handler::send`] runs a `SENDING` row through
//! [`MailProviderService::send`], which writes the outcome.

use std::sync::Arc;

use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    ops::Metrics,
    service::{MailProviderService, SendOutcome},
    store::{
        StoreError,
        messages::{self, StoredMessage},
    },
};

/// What each send needs, shared by every worker slot.
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

    /// Keeps `mail_worker_in_flight` in `metrics` while a send runs.
    #[must_use]
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Sends `message`, claimed (`SENDING`) by [`messages::claim_due`].
    ///
    /// # Errors
    /// Only infrastructure trouble (PostgreSQL); mail outcomes are written and returned. The
    /// row then stays `SENDING` and lease recovery reschedules it.
    pub async fn send(&self, message: &StoredMessage) -> Result<SendOutcome, StoreError> {
        let _in_flight = self.metrics.as_ref().map(|m| m.in_flight());
        self.service.send(message).await
    }

    /// Takes message `id` if it is `QUEUED` ([`messages::start_sending`]) and sends it;
    /// `Ok(None)` when it is not.
    ///
    /// # Errors
    /// As [`Self::send`].
    pub async fn process(&self, id: Uuid) -> Result<Option<SendOutcome>, StoreError> {
        match messages::start_sending(&self.pool, id).await? {
            Some(message) => self.send(&message).await.map(Some),
            None => Ok(None),
        }
    }
}
