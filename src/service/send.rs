//! One send: the sender and its mailer, the suppressed recipients dropped (`suppress.rs`), the
//! pause's admission, the attempt under its lease, and the outcome written ([`super::errors`] for a failed one).

use std::time::Instant;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    MailProviderService, SendOutcome, journal::AttemptJournal, lease, pause::Admit, suppress,
};
use crate::{
    domain::{ALL_SUPPRESSED, MailboxAddress, Sender, TenantTransport},
    log_events,
    mailer::{MailError, PriorAttempt, SendAttempt},
    ops::metrics::{OutcomeLabel, PROVIDER_GRAPH, PROVIDER_SENDGRID},
    store::{
        StoreError,
        messages::{self, SenderRef, StoredMessage},
        senders,
    },
};

impl MailProviderService {
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
            self.count(("unknown", None), &outcome, OutcomeLabel::Failed);
            return Ok(outcome);
        };
        let mailbox = sender.mailbox().clone();
        let provider = provider_of(&sender);
        let mut mail = match message.outgoing(mailbox.clone()) {
            Ok(mail) => mail,
            Err(problem) => {
                let outcome = self.fail(message.fence, Some(&mailbox), problem).await?;
                self.count((provider, Some(&mailbox)), &outcome, OutcomeLabel::Failed);
                return Ok(outcome);
            }
        };
        let suppressed = self.drop_suppressed(message, &mut mail.content).await?;
        if suppressed > 0 && mail.content.recipient_count() == 0 {
            let outcome = self
                .fail(message.fence, Some(&mailbox), ALL_SUPPRESSED.into())
                .await?;
            self.count((provider, Some(&mailbox)), &outcome, OutcomeLabel::Failed);
            return Ok(outcome);
        }
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
                self.count((provider, Some(&mailbox)), &outcome, OutcomeLabel::Paused);
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
                            event = log_events::MAIL_SEND_LEASE_DEADLINE,
                            message.id = %message.id,
                            mailbox = %mailbox,
                            send_attempted,
                            "attempt stopped at its lease deadline (SEND_LEASE without a confirmed renewal)"
                        );
                        let why = "the attempt was stopped at its lease deadline (SEND_LEASE)";
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
                self.metrics.send(provider, OutcomeLabel::Sent);
                tracing::info!(
                    event = log_events::MAIL_SENT,
                    message.id = %message.id,
                    mailbox = %mailbox,
                    recipients = mail.content.recipient_count(),
                    suppressed,
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
                self.count((provider, Some(&mailbox)), &outcome, counted);
                Ok(outcome)
            }
        }
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
