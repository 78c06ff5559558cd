//! A replica's periodic Graph reader — the bounce reader ([`crate::bounces::BounceReader`]) and
//! the delivery reconciler ([`crate::delivery::DeliveryReconciler`]) alike: PostgreSQL, the
//! mailer factory with its limiter, clock and metrics, the reader's settings, this replica's
//! reader id (`bounce_reads.reader`, `trace_reads.reader`) and whether outcome events are
//! written (`EVENTS_WEBHOOK_URL`). Each reader adds its own `round` and `read`.

use std::{fmt, future::Future, sync::Arc, time::Duration};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{
    clock::Clock,
    mailer::MailerFactory,
    ops::Metrics,
    rate_limit::MailRateLimiter,
    shutdown,
    store::{StoreError, events::Outbox},
};

/// One replica's reader of Graph with settings `S`. One per replica and kind.
#[derive(Clone)]
pub struct ReplicaReader<S> {
    pub(crate) pool: PgPool,
    pub(crate) factory: Arc<MailerFactory<MailRateLimiter>>,
    pub(crate) limiter: Arc<MailRateLimiter>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) settings: S,
    /// This replica in the reads table's `reader` column: a fresh id per reader.
    pub(crate) reader: String,
    /// Whether a read writes its outcome events; off until [`Self::with_outbox`].
    pub(crate) outbox: Outbox,
}

impl<S: fmt::Debug> fmt::Debug for ReplicaReader<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaReader")
            .field("settings", &self.settings)
            .field("reader", &self.reader)
            .finish_non_exhaustive()
    }
}

impl<S> ReplicaReader<S> {
    /// A reader for this replica (a fresh reader id) on `factory`'s limiter, clock and
    /// metrics, writing no events.
    pub(crate) fn new(
        pool: PgPool,
        factory: Arc<MailerFactory<MailRateLimiter>>,
        settings: S,
    ) -> Self {
        let (limiter, clock, metrics) = factory.shared();
        Self {
            pool,
            factory,
            limiter,
            metrics,
            clock,
            settings,
            reader: uuid::Uuid::new_v4().to_string(),
            outbox: Outbox::Off,
        }
    }

    /// Writes the reads' outcome events (the bounce reader's `bounced`, the reconciler's
    /// recipient outcomes) when `outbox` is on.
    #[must_use]
    pub(crate) fn with_outbox(mut self, outbox: Outbox) -> Self {
        self.outbox = outbox;
        self
    }

    /// Runs `round` every `interval` until `stop`; `failed` logs a round that could not run
    /// (the next interval tries again).
    pub(crate) async fn rounds<'a, F, Fut, T>(
        &'a self,
        interval: Duration,
        stop: CancellationToken,
        round: F,
        failed: fn(&StoreError),
    ) where
        F: Fn(&'a Self) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let round = &round;
        shutdown::every(interval, stop, None, || async move {
            if let Err(e) = round(self).await {
                failed(&e);
            }
        })
        .await;
    }
}
