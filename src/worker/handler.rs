//! Sending one claimed message: [`Handler::send`] runs a `SENDING` row through
//! [`MailProviderService::send`], which writes the outcome.

use std::sync::Arc;

use crate::{
    ops::Metrics,
    service::{MailProviderService, SendOutcome},
    store::{StoreError, messages::StoredMessage},
};

/// What each send needs, shared by every worker slot.
#[derive(Clone)]
pub struct Handler {
    service: Arc<MailProviderService>,
    metrics: Option<Arc<Metrics>>,
}

impl Handler {
    /// A handler over `service` (which holds the pool its outcomes are written to).
    pub fn new(service: Arc<MailProviderService>) -> Self {
        Self {
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

    /// Sends `message`, claimed (`SENDING`) by [`crate::store::messages::claim_due`].
    ///
    /// # Errors
    /// Only infrastructure trouble (PostgreSQL); mail outcomes are written and returned. The
    /// row then stays `SENDING` and lease recovery reschedules it.
    pub async fn send(&self, message: &StoredMessage) -> Result<SendOutcome, StoreError> {
        let _in_flight = self.metrics.as_ref().map(|m| m.in_flight());
        self.service.send(message).await
    }
}
