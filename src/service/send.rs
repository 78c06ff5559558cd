//! One send: the sender and its mailer, the suppressed recipients dropped (`suppress.rs`), the
//! pause's admission, the attempt under its lease, and the outcome written ([`super::errors`] for a failed one).

use std::{
    ops::ControlFlow::{self, Break, Continue},
    time::Instant,
};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    MailProviderService, SendOutcome,
    journal::AttemptJournal,
    lease,
    pause::Admit,
    pool::{self, Placement},
    suppress,
};
use crate::{
    domain::{ALL_SUPPRESSED, MailboxAddress, OutgoingMail, Sender, TenantTransport},
    log_events,
    mailer::{
        MailError, MailErrorKind, MailResult, Mailer, PriorAttempt, SendAttempt, SendReceipt,
    },
    ops::metrics::{OutcomeLabel, PROVIDER_GRAPH, PROVIDER_SENDGRID},
    store::{
        StoreError,
        messages::{self, SenderRef, StoredMessage},
        senders,
    },
};

/// The message being sent, its sending mailbox and its `provider` label: what every step of
/// [`MailProviderService::send`] writes and counts by.
struct Sending<'a> {
    message: &'a StoredMessage,
    mailbox: MailboxAddress,
    provider: &'static str,
}

impl MailProviderService {
    /// Sends `message` (already `SENDING`) and writes the outcome: the sender looked up, the
    /// mail built without its suppressed recipients, the pause's admission, the attempt under
    /// the lease, then the outcome written.
    ///
    /// # Errors
    /// Only infrastructure trouble (PostgreSQL); mail problems are outcomes.
    pub(crate) async fn send(&self, message: &StoredMessage) -> Result<SendOutcome, StoreError> {
        let sender = match pool::to_place(message) {
            Some(pool_id) => match self.place(message, pool_id).await? {
                Placement::On(sender) => Some(sender),
                Placement::Kept => self.sender_of(message).await?,
                Placement::Superseded => {
                    self.stale(message.fence, "placed").await;
                    return Ok(SendOutcome::Superseded);
                }
            },
            None => self.sender_of(message).await?,
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
            self.count(("unknown", None), &outcome, OutcomeLabel::Failed);
            return Ok(outcome);
        };
        let sending = Sending {
            message,
            mailbox: sender.mailbox().clone(),
            provider: provider_of(&sender),
        };
        let (mail, suppressed) = match self.mail_of(&sending).await? {
            Continue(mail) => mail,
            Break(outcome) => return Ok(outcome),
        };
        let sender_id = sender_id(&sender);
        let (fingerprint, mailer) = self.mailers.mailer_and_fingerprint(&sender).await;
        if let Break(outcome) = self.admit(&sending, sender_id, &fingerprint).await? {
            return Ok(outcome);
        }
        let started = Instant::now();
        let journal = AttemptJournal {
            noted: std::sync::Mutex::new(None),
        };
        let suspended = match &message.campaign {
            Some(campaign) => {
                let now = self.clock.now();
                self.mailers
                    .campaign_suspended_until(campaign, now)
                    .await
                    .map(|until| (until - now).to_std().unwrap_or_default())
            }
            None => None,
        };
        let result = match (mailer, suspended) {
            // A suspended campaign's message waits (SCHEDULED) until the suspension ends.
            (_, Some(retry_after)) => Err(MailErrorKind::RateLimitExceeded {
                reason: crate::rate_limit::DenyReason::Suspended,
                retry_after,
                booked: false,
            }
            .into()),
            (Ok(mailer), None) => match self.attempt(&sending, &*mailer, &mail, &journal).await {
                Continue(result) => result,
                Break(outcome) => return Ok(outcome),
            },
            (Err(e), None) => Err(e),
        };
        self.probed(sender_id, &result).await?;
        if let (
            Some((pool_id, _)),
            Err(MailErrorKind::RateLimitExceeded {
                reason,
                retry_after,
                booked,
            }),
        ) = (message.pool, result.as_ref().map_err(|e| &e.kind))
            && let denial = (pool::Denial {
                reason: *reason,
                retry_after: *retry_after,
                booked: *booked,
            })
            && denial.may_overflow(message.db_now(), message.send_by)
            && let Some(outcome) = self
                .overflow_after_denial(message, pool_id, sender_id, denial)
                .await?
        {
            return Ok(outcome);
        }
        let recipients = mail.content.recipient_count();
        match result {
            Ok(receipt) => {
                self.write_sent(&sending, receipt, started, (recipients, suppressed))
                    .await
            }
            Err(error) => {
                let (outcome, counted) = self
                    .handle_error(
                        message,
                        &sending.mailbox,
                        sender_id,
                        &fingerprint,
                        error,
                        (started, journal.take().as_ref()),
                    )
                    .await?;
                self.count(
                    (sending.provider, Some(&sending.mailbox)),
                    &outcome,
                    counted,
                );
                Ok(outcome)
            }
        }
    }

    /// The tenant or system mailbox that sends `message`; `None` when it no longer exists.
    async fn sender_of(&self, message: &StoredMessage) -> Result<Option<Sender>, StoreError> {
        Ok(match message.sender {
            SenderRef::Tenant(id) => senders::tenant_by_id(&self.pool, id)
                .await?
                .map(Sender::Tenant),
            SenderRef::SystemMailbox(id) => senders::system_mailbox_by_id(&self.pool, id)
                .await?
                .map(Sender::SystemMailbox),
        })
    }

    /// The mail to send and how many recipients were dropped as suppressed; or the message
    /// failed (`ERROR`) when its row cannot make a mail or no recipient is left.
    async fn mail_of(
        &self,
        sending: &Sending<'_>,
    ) -> Result<ControlFlow<SendOutcome, (OutgoingMail, u32)>, StoreError> {
        let message = sending.message;
        let mut mail = match message.outgoing(sending.mailbox.clone()) {
            Ok(mail) => mail,
            Err(problem) => return Ok(Break(self.fail_counted(sending, problem).await?)),
        };
        let suppressed = self.drop_suppressed(message, &mut mail.content).await?;
        if suppressed > 0 && mail.content.recipient_count() == 0 {
            let outcome = self.fail_counted(sending, ALL_SUPPRESSED.into()).await?;
            return Ok(Break(outcome));
        }
        Ok(Continue((mail, suppressed)))
    }

    /// Fails the message with `problem` and counts it.
    async fn fail_counted(
        &self,
        sending: &Sending<'_>,
        problem: String,
    ) -> Result<SendOutcome, StoreError> {
        let outcome = self
            .fail(sending.message.fence, Some(&sending.mailbox), problem)
            .await?;
        self.count(
            (sending.provider, Some(&sending.mailbox)),
            &outcome,
            OutcomeLabel::Failed,
        );
        Ok(outcome)
    }

    /// The sender's pause lets the attempt go (a pause lifted by a configuration change
    /// resumes its paused messages), or the message is deferred to the pause's end.
    async fn admit(
        &self,
        sending: &Sending<'_>,
        sender_id: Uuid,
        fingerprint: &str,
    ) -> Result<ControlFlow<SendOutcome>, StoreError> {
        match self.pauses.admit(sender_id, fingerprint, self.clock.now()) {
            Admit::Go { resumed: None } => {}
            Admit::Go {
                resumed: Some((paused_mailbox, reason)),
            } => {
                let due = messages::resume_paused(&self.pool, sender_id).await?;
                self.log_resumed(&paused_mailbox, &reason, "configuration changed", due);
            }
            Admit::Wait { until, reason } => {
                let message = sending.message;
                let wait = self.until(until) + self.spread(message.id);
                let outcome = self
                    .defer_paused(message.fence, wait, &reason, None)
                    .await?;
                self.count(
                    (sending.provider, Some(&sending.mailbox)),
                    &outcome,
                    OutcomeLabel::Paused,
                );
                return Ok(Break(outcome));
            }
        }
        Ok(Continue(()))
    }

    /// One attempt under the message's lease, knowing what earlier ones left on the row and
    /// noting in `journal` what a later one must know: the mailer's result; a lease lost to
    /// another replica supersedes the message, one cut at its deadline is an unknown outcome
    /// when a request that could deliver was written, else transient.
    async fn attempt(
        &self,
        sending: &Sending<'_>,
        mailer: &dyn Mailer,
        mail: &OutgoingMail,
        journal: &AttemptJournal,
    ) -> ControlFlow<SendOutcome, MailResult> {
        let message = sending.message;
        let prior = PriorAttempt {
            earlier_attempts: u32::try_from(message.attempts.saturating_sub(1)).unwrap_or(0),
            graph_draft_id: message.graph_draft_id.clone(),
            send_attempted_at: message.send_attempted_at.map(|at| self.rebase(message, at)),
        };
        let attempt = SendAttempt {
            prior: &prior,
            journal,
        };
        let send = mailer.send_with(mail, &attempt);
        match self
            .lease
            .keep(message.fence, message.claimed_at.1, send)
            .await
        {
            Ok(result) => Continue(result),
            Err(lease::Cut::Lost) => {
                self.stale(message.fence, "lease lost").await;
                Break(SendOutcome::Superseded)
            }
            Err(lease::Cut::Deadline) => {
                let send_attempted = journal.noted();
                tracing::warn!(
                    event = log_events::MAIL_SEND_LEASE_DEADLINE,
                    message.id = %message.id,
                    mailbox = %sending.mailbox,
                    send_attempted,
                    "attempt stopped at its lease deadline (SEND_LEASE without a confirmed renewal)"
                );
                let why = "the attempt was stopped at its lease deadline (SEND_LEASE)";
                Continue(Err(if send_attempted {
                    MailError::outcome_unknown(why)
                } else {
                    MailError::transient(why)
                }))
            }
        }
    }

    /// What the attempt says of a paused sender's probe: a refusal of the credentials keeps the
    /// pause, a limiter or provider throttle says nothing, anything else lifts it (its paused
    /// messages resumed).
    async fn probed(&self, sender_id: Uuid, result: &MailResult) -> Result<(), StoreError> {
        match result.as_ref().map_err(|e| &e.kind) {
            Err(MailErrorKind::Unauthorized(_) | MailErrorKind::Misconfigured(_)) => {}
            Err(MailErrorKind::RateLimitExceeded { .. } | MailErrorKind::Throttled { .. }) => {
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
        Ok(())
    }

    /// Writes `SENT` (superseded when another replica took the row), counts and logs it.
    async fn write_sent(
        &self,
        sending: &Sending<'_>,
        receipt: SendReceipt,
        started: Instant,
        (recipients, suppressed): (u32, u32),
    ) -> Result<SendOutcome, StoreError> {
        let message = sending.message;
        let note = suppress::sent_note(receipt.note.as_deref(), suppressed);
        let written = self
            .durably(message.id, started, "sent", || {
                self.sent
                    .mark_sent(message.fence, note.as_deref(), suppressed)
            })
            .await?;
        if !written {
            self.stale(message.fence, "sent").await;
            return Ok(SendOutcome::Superseded);
        }
        self.metrics.send(sending.provider, OutcomeLabel::Sent);
        tracing::info!(
            event = log_events::MAIL_SENT,
            message.id = %message.id,
            mailbox = %sending.mailbox,
            recipients,
            suppressed,
            duration_ms = started.elapsed().as_millis() as u64,
            already_sent = receipt.already_sent,
            note = receipt.note.as_deref(),
            "mail sent"
        );
        Ok(SendOutcome::Sent)
    }

    /// `at`, a PostgreSQL timestamp of the row, on this replica's clock (the mailer compares it
    /// with that): as long before the clock's now as it is before PostgreSQL's now.
    fn rebase(&self, message: &StoredMessage, at: DateTime<Utc>) -> DateTime<Utc> {
        self.clock.now() - (message.db_now() - at)
    }

    /// Counts `result` unless the write was superseded (another replica's lease recovery); an
    /// `ERROR` also by its sending mailbox (`mail_worker_mailbox_failed_total`).
    fn count(
        &self,
        (provider, mailbox): (&'static str, Option<&MailboxAddress>),
        outcome: &SendOutcome,
        result: OutcomeLabel,
    ) {
        if *outcome != SendOutcome::Superseded {
            self.metrics.send(provider, result);
            if let (OutcomeLabel::Failed, Some(mailbox)) = (result, mailbox) {
                self.metrics.failed_for(mailbox.as_str());
            }
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
