//! `MailProviderService`: sends one claimed message through its sender's mailer and writes
//! the outcome to PostgreSQL — sent, deferred (rate limit or provider throttling, with the
//! per-message spread), retried with backoff (transient), or failed with a reason a person
//! can act on. It knows nothing of Redis or Lua: it sees only [`Mailer`] and [`MailError`].
//!
//! A sender whose credentials are missing or refused is paused ([`pause`]) instead of failing
//! its backlog; every outcome is counted in [`crate::ops::metrics`].
//!
//! Here the service and one send; beside it what a failed send becomes (`errors.rs`), the
//! retry policy's arithmetic (`policy.rs`: spread, backoff), the attempt journal
//! (`journal.rs`), the lease of an attempt, batched `SENT` writes and sender pauses.

pub(crate) mod lease;
pub(crate) mod outcomes;
pub(crate) mod pause;

mod errors;
mod journal;
mod policy;

use journal::AttemptJournal;
pub use policy::spread_ms;
use policy::{backoff, human};

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use rand::Rng;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    clock::Clock,
    domain::{MailboxAddress, Sender, TenantTransport},
    events,
    mailer::{MailError, MailerSource, PriorAttempt, SendAttempt},
    ops::metrics::{Metrics, PROVIDER_GRAPH, PROVIDER_SENDGRID, SendResult},
    rate_limit::DenyReason,
    store::{
        StoreError,
        messages::{self, Fence, Reschedule, SenderRef, StoredMessage, Wait, wait_reason},
        senders,
    },
};

use pause::{Admit, PAUSED_PREFIX, SenderPauses};

/// What happened to one message.
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
    /// `MAIL_DEFER_SPREAD_MAX_MS`.
    pub defer_spread_max: Duration,
    /// `MAIL_MAX_ATTEMPTS`: an extra cap on transient failures before `ERROR` (`u32::MAX`:
    /// none, the default).
    pub max_attempts: u32,
    /// `MAIL_RETRY_FOR`: a message failing transiently ends `ERROR` once it is this old
    /// (from its first attempt).
    pub retry_for: Duration,
}

/// `SEND_LEASE_MS` unless [`MailProviderService::with_send_lease`] says otherwise: 10 minutes,
/// its default. It bounds each attempt ([`lease::LeaseKeeper`]) and how long an outcome write is
/// retried while PostgreSQL is unreachable.
pub(crate) const DEFAULT_SEND_LEASE: Duration = Duration::from_secs(600);

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
    sent: outcomes::SentWriter,
}

impl std::fmt::Debug for MailProviderService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailProviderService")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl MailProviderService {
    /// A service writing to `pool`, resolving mailers through `mailers`.
    pub fn new(
        pool: PgPool,
        mailers: Arc<dyn MailerSource>,
        clock: Arc<dyn Clock>,
        settings: ServiceSettings,
    ) -> Self {
        Self {
            sent: outcomes::SentWriter::new(pool.clone()),
            lease: lease::LeaseKeeper::new(pool.clone(), DEFAULT_SEND_LEASE),
            pool,
            mailers,
            clock,
            settings,
            metrics: Arc::new(Metrics::new()),
            pauses: SenderPauses::default(),
            outcome_write_deadline: DEFAULT_SEND_LEASE,
            outcome_write_retries: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `SEND_LEASE_MS`: each attempt renews its row's lease while it runs and stops when it
    /// cannot ([`lease::LeaseKeeper`]); an outcome write that fails for PostgreSQL connectivity
    /// is retried (backoff with jitter, 200 ms doubling to 5 s) until a lease after the send
    /// started — past it, lease recovery takes the row and its next attempt checks Graph before
    /// it resends (README "Delivery guarantee"). Writes are fenced, so a late one changes
    /// nothing.
    #[must_use]
    pub(crate) fn with_send_lease(mut self, lease: Duration) -> Self {
        self.outcome_write_deadline = lease;
        self.lease = lease::LeaseKeeper::new(self.pool.clone(), lease);
        self
    }

    /// Outcome writes retried so far because PostgreSQL was unreachable.
    pub fn outcome_write_retries(&self) -> u64 {
        self.outcome_write_retries
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs the outcome write `write` until it succeeds, fails for a reason other than
    /// connectivity, or the deadline after `started` passes.
    async fn durably<T, F, Fut>(
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
                    let base = 200u64.saturating_mul(1 << n.min(5)).min(5_000);
                    let wait = Duration::from_millis(rand::rng().random_range(base / 2..=base));
                    tracing::warn!(
                        event = events::MAIL_OUTCOME_WRITE_RETRY,
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

    /// Counts outcomes in `metrics` (default: a registry of its own).
    #[must_use]
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Ends the pause of every paused sender whose configuration changed since it was paused,
    /// and makes its paused messages due now. Returns how many senders resumed. The daemon
    /// calls this every `SCHEDULER_INTERVAL_MS`, so a fixed secret takes effect within a tick
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
            event = events::MAIL_SENDER_RESUMED,
            mailbox,
            was = reason,
            why,
            messages_due = due,
            "sender resumed"
        );
    }

    /// Sends `message` (already `SENDING`) and writes the outcome.
    ///
    /// # Errors
    /// Only infrastructure trouble (PostgreSQL); mail problems are outcomes.
    pub(crate) async fn send(&self, message: &StoredMessage) -> Result<SendOutcome, StoreError> {
        let sender = match message.sender {
            SenderRef::Tenant(id) => senders::tenant_by_id(&self.pool, id)
                .await?
                .map(Sender::Tenant),
            SenderRef::SystemMailbox(id) => senders::system_mailbox_by_id(&self.pool, id)
                .await?
                .map(Sender::SystemMailbox),
        };
        let Some(sender) = sender else {
            let outcome = self
                .fail(
                    message.fence,
                    None,
                    "unknown sender: the message's tenant or system mailbox no longer exists"
                        .into(),
                )
                .await?;
            self.count("unknown", &outcome, SendResult::Failed);
            return Ok(outcome);
        };
        let mailbox = sender.mailbox().clone();
        let provider = provider_of(&sender);
        let mail = match message.outgoing(mailbox.clone()) {
            Ok(mail) => mail,
            Err(problem) => {
                let outcome = self.fail(message.fence, Some(&mailbox), problem).await?;
                self.count(provider, &outcome, SendResult::Failed);
                return Ok(outcome);
            }
        };
        let sender_id = sender_id(&sender);
        let (fingerprint, mailer) = self.mailers.mailer_and_fingerprint(&sender).await;
        match self.pauses.admit(sender_id, &fingerprint, self.clock.now()) {
            Admit::Go { resumed: None } => {}
            Admit::Go {
                resumed: Some((paused_mailbox, reason)),
            } => {
                let due = messages::resume_paused(&self.pool, sender_id).await?;
                self.log_resumed(&paused_mailbox, &reason, "configuration changed", due);
            }
            Admit::Wait { until, reason } => {
                let wait = self.until(until) + self.spread(message.id);
                let outcome = self
                    .defer_paused(message.fence, wait, &reason, None)
                    .await?;
                self.count(provider, &outcome, SendResult::Paused);
                return Ok(outcome);
            }
        }
        let started = Instant::now();
        let prior = PriorAttempt {
            earlier_attempts: u32::try_from(message.attempts.saturating_sub(1)).unwrap_or(0),
            graph_draft_id: message.graph_draft_id.clone(),
            send_attempted_at: message.send_attempted_at.map(|at| self.rebase(message, at)),
        };
        let journal = AttemptJournal {
            noted: std::sync::Mutex::new(None),
        };
        let attempt = SendAttempt {
            prior: &prior,
            journal: &journal,
        };
        let result = match mailer {
            Ok(mailer) => {
                let sending = mailer.send_with(&mail, &attempt);
                match self
                    .lease
                    .keep(message.fence, message.claimed_at.1, sending)
                    .await
                {
                    Ok(result) => result,
                    Err(lease::Cut::Lost) => {
                        self.stale(message.fence, "lease lost").await;
                        return Ok(SendOutcome::Superseded);
                    }
                    Err(lease::Cut::Deadline) => {
                        let send_attempted = journal.noted();
                        tracing::warn!(
                            event = events::MAIL_SEND_LEASE_DEADLINE,
                            message.id = %message.id,
                            mailbox = %mailbox,
                            send_attempted,
                            "attempt stopped at its lease deadline (SEND_LEASE_MS without a confirmed renewal)"
                        );
                        let why = "the attempt was stopped at its lease deadline (SEND_LEASE_MS)";
                        Err(if send_attempted {
                            MailError::OutcomeUnknown(why.into())
                        } else {
                            MailError::Transient(why.into())
                        })
                    }
                }
            }
            Err(e) => Err(e),
        };
        match &result {
            Err(MailError::Unauthorized(_) | MailError::Misconfigured(_)) => {}
            Err(MailError::RateLimitExceeded { .. } | MailError::Throttled { .. }) => {
                self.pauses.inconclusive(sender_id);
            }
            Ok(_) | Err(_) => {
                if let Some((paused_mailbox, reason)) = self.pauses.succeeded(sender_id) {
                    self.log_resumed(
                        &paused_mailbox,
                        &reason,
                        "a probe got past the credentials",
                        0,
                    );
                    messages::resume_paused(&self.pool, sender_id).await?;
                }
            }
        }
        match result {
            Ok(receipt) => {
                let note = receipt.note.as_deref();
                let written = self
                    .durably(message.id, started, "sent", || {
                        self.sent.mark_sent(message.fence, note)
                    })
                    .await?;
                if !written {
                    self.stale(message.fence, "sent").await;
                    return Ok(SendOutcome::Superseded);
                }
                self.metrics.send(provider, SendResult::Sent);
                tracing::info!(
                    event = events::MAIL_SENT,
                    message.id = %message.id,
                    mailbox = %mailbox,
                    recipients = mail.recipient_count(),
                    duration_ms = started.elapsed().as_millis() as u64,
                    already_sent = receipt.already_sent,
                    note = receipt.note.as_deref(),
                    "mail sent"
                );
                Ok(SendOutcome::Sent)
            }
            Err(error) => {
                let (outcome, counted) = self
                    .handle_error(
                        message,
                        &mailbox,
                        sender_id,
                        &fingerprint,
                        error,
                        (started, journal.take().as_ref()),
                    )
                    .await?;
                self.count(provider, &outcome, counted);
                Ok(outcome)
            }
        }
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

    /// `at`, a PostgreSQL timestamp of the row, on this replica's clock (the mailer compares it
    /// with that): as long before the clock's now as it is before PostgreSQL's now.
    fn rebase(&self, message: &StoredMessage, at: DateTime<Utc>) -> DateTime<Utc> {
        self.clock.now() - (message.db_now() - at)
    }

    /// Logs that the attempt holding `fence` wrote nothing: a newer claim holds the row.
    async fn stale(&self, fence: Fence, outcome: &str) {
        let (status, current) = match messages::holder(&self.pool, fence.id).await {
            Ok(Some((status, token))) => (status, token.map(|t| t.to_string())),
            Ok(None) => ("gone".to_owned(), None),
            Err(e) => (format!("unknown ({e})"), None),
        };
        tracing::warn!(
            event = events::MAIL_SEND_STALE_OUTCOME,
            message.id = %fence.id,
            outcome,
            claim_token = %fence.token,
            current_token = current.as_deref(),
            current_status = %status,
            "this attempt's lease was taken over: its outcome is not written (the live attempt checks Graph before it sends)"
        );
    }

    fn spread(&self, id: Uuid) -> Duration {
        Duration::from_millis(spread_ms(
            id,
            self.settings.defer_spread_max.as_millis() as u64,
        ))
    }

    /// Counts `result` unless the write was superseded (another replica's lease recovery).
    fn count(&self, provider: &'static str, outcome: &SendOutcome, result: SendResult) {
        if *outcome != SendOutcome::Superseded {
            self.metrics.send(provider, result);
        }
    }
}

/// `graph` or `sendgrid`: the `provider` label of a sender.
fn provider_of(sender: &Sender) -> &'static str {
    match sender {
        Sender::Tenant(t) if matches!(t.transport, TenantTransport::SendGrid { .. }) => {
            PROVIDER_SENDGRID
        }
        _ => PROVIDER_GRAPH,
    }
}

fn sender_id(sender: &Sender) -> Uuid {
    match sender {
        Sender::Tenant(t) => t.id,
        Sender::SystemMailbox(m) => m.id,
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
