//! `MailProviderService`: sends one claimed message through its sender's mailer and writes
//! the outcome to PostgreSQL — sent, deferred (rate limit or provider throttling, with the
//! per-message spread), retried with backoff (transient), or failed with a reason a person
//! can act on. It knows nothing of Redis or Lua: it sees only [`Mailer`] and [`MailError`].
//!
//! A sender whose credentials are missing or refused is paused ([`pause`]) instead of failing
//! its backlog; every outcome is counted in [`crate::ops::metrics`].
//!
//! Here the service, its settings and what one send comes to ([`SendOutcome`]); beside it one
//! send (`send.rs`), what a failed send becomes (`errors.rs`), how an outcome is written
//! (`write.rs`: retried while PostgreSQL is unreachable), the retry policy's arithmetic
//! (`policy.rs`: spread, backoff), the attempt journal (`journal.rs`), the lease of an
//! attempt, batched `SENT` writes (`sent_batch.rs`), the suppression list's check before a
//! send (`suppress.rs`) and sender pauses.

pub(crate) mod lease;
pub(crate) mod pause;

mod errors;
mod journal;
mod policy;
mod send;
mod sent_batch;
mod suppress;
pub mod verify;
mod write;

pub use policy::spread_ms;

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::store::events::Outbox;
use crate::{
    clock::Clock,
    domain::Sender,
    log_events,
    mailer::MailerSource,
    ops::metrics::Metrics,
    store::{
        StoreError,
        messages::{self, Wait},
        senders,
    },
};

use pause::SenderPauses;

/// What the service made of one message: the row as it wrote it. (Metrics count it finer,
/// by cause: [`crate::ops::metrics::OutcomeLabel`].)
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Accepted by the provider; the row is `SENT`.
    Sent,
    /// Back to `SCHEDULED` until `until` (rate limit, throttling or a transient failure).
    Deferred {
        /// The new `scheduled_on`.
        until: DateTime<Utc>,
        /// Why, e.g. `rate limit (minute)`.
        reason: String,
    },
    /// The row is `ERROR` with this `last_error`.
    Failed {
        /// What a person must do.
        reason: String,
    },
    /// The row was no longer `SENDING` when the outcome was written (a lease recovery took
    /// it); nothing was written.
    Superseded,
}

/// Settings of [`MailProviderService`].
#[derive(Debug, Clone, Copy)]
pub struct ServiceSettings {
    /// `MAIL_DEFER_SPREAD_MAX`.
    pub defer_spread_max: Duration,
    /// `MAIL_MAX_ATTEMPTS`: an extra cap on transient failures before `ERROR` (`u32::MAX`:
    /// none, the default).
    pub max_attempts: u32,
    /// `MAIL_RETRY_FOR`: a message failing transiently ends `ERROR` once it is this old
    /// (from its first attempt).
    pub retry_for: Duration,
    /// `SEND_LEASE`: each attempt renews its row's lease while it runs and stops when it
    /// cannot ([`lease::LeaseKeeper`]); an outcome write that fails for PostgreSQL connectivity
    /// is retried (backoff with jitter, 200 ms doubling to 5 s) until a lease after the send
    /// started — past it, lease recovery takes the row and its next attempt checks Graph before
    /// it resends (docs/delivery.md). Writes are fenced, so a late one changes nothing.
    pub send_lease: Duration,
}

/// Sends claimed messages and records their outcomes.
pub struct MailProviderService {
    pool: PgPool,
    mailers: Arc<dyn MailerSource>,
    clock: Arc<dyn Clock>,
    settings: ServiceSettings,
    metrics: Arc<Metrics>,
    pauses: SenderPauses,
    outcome_write_deadline: Duration,
    lease: lease::LeaseKeeper,
    outcome_write_retries: std::sync::atomic::AtomicU64,
    sent: sent_batch::SentWriter,
    outbox: Outbox,
}

crate::debug_showing::debug_showing!(MailProviderService { settings });

impl MailProviderService {
    /// A service writing to `pool`, resolving mailers through `mailers`.
    pub fn new(
        pool: PgPool,
        mailers: Arc<dyn MailerSource>,
        clock: Arc<dyn Clock>,
        settings: ServiceSettings,
    ) -> Self {
        Self {
            sent: sent_batch::SentWriter::new(pool.clone(), Outbox::Off),
            outbox: Outbox::Off,
            lease: lease::LeaseKeeper::new(pool.clone(), settings.send_lease),
            pool,
            mailers,
            clock,
            settings,
            metrics: Arc::new(Metrics::new()),
            pauses: SenderPauses::default(),
            outcome_write_deadline: settings.send_lease,
            outcome_write_retries: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Writes each outcome's event (`sent`, `deferred`, `failed`) in its transaction when
    /// `outbox` is on (`EVENTS_WEBHOOK_URL`).
    #[must_use]
    pub fn with_outbox(mut self, outbox: Outbox) -> Self {
        self.outbox = outbox;
        self.sent = sent_batch::SentWriter::new(self.pool.clone(), outbox);
        self
    }

    /// Outcome writes retried so far because PostgreSQL was unreachable.
    pub fn outcome_write_retries(&self) -> u64 {
        self.outcome_write_retries
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts outcomes in `metrics` (default: a registry of its own).
    #[must_use]
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Ends the pause of every paused sender whose configuration changed since it was paused,
    /// and makes its paused messages due now. Returns how many senders resumed. The daemon
    /// calls this every `SCHEDULER_INTERVAL`, so a fixed secret takes effect within a tick
    /// instead of at the next probe.
    ///
    /// # Errors
    /// PostgreSQL errors.
    pub(crate) async fn revisit_paused(&self) -> Result<usize, StoreError> {
        let mut resumed = 0;
        for (id, fingerprint) in self.pauses.paused() {
            let sender = match senders::tenant_by_id(&self.pool, id).await? {
                Some(t) => Some(Sender::Tenant(t)),
                None => senders::system_mailbox_by_id(&self.pool, id)
                    .await?
                    .map(Sender::SystemMailbox),
            };
            let Some(sender) = sender else {
                self.pauses.resume(id);
                continue;
            };
            if self.mailers.fingerprint(&sender).await == fingerprint {
                continue;
            }
            if let Some((mailbox, reason)) = self.pauses.resume(id) {
                let due = messages::resume_paused(&self.pool, id).await?;
                self.log_resumed(&mailbox, &reason, "configuration changed", due);
                resumed += 1;
            }
        }
        Ok(resumed)
    }

    fn log_resumed(&self, mailbox: &str, reason: &str, why: &str, due: u64) {
        self.metrics.set_paused(mailbox, false);
        tracing::info!(
            event = log_events::MAIL_SENDER_RESUMED,
            mailbox,
            was = reason,
            why,
            messages_due = due,
            "sender resumed"
        );
    }

    /// `wait` from PostgreSQL's now; on a test's virtual clock, until the clock's now + `wait`.
    fn wait(&self, wait: Duration) -> Wait {
        Wait {
            wait,
            virtual_at: self.clock.is_virtual().then(|| {
                self.clock.now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX)
            }),
        }
    }

    /// How long from this replica's clock's now until `until` (a pause's next probe).
    fn until(&self, until: DateTime<Utc>) -> Duration {
        (until - self.clock.now()).to_std().unwrap_or_default()
    }

    fn spread(&self, id: Uuid) -> Duration {
        Duration::from_millis(spread_ms(
            id,
            self.settings.defer_spread_max.as_millis() as u64,
        ))
    }
}
