//! `RateLimitedGraphMailer`: the decorator that reserves a place in the sending mailbox's
//! budgets before the inner Graph mailer sends, and ends the reservation with the request's
//! outcome. Wrapper anatomy as in tower: `new`, `inner`, `into_inner`; same [`Mailer`] interface.

mod lease;
#[cfg(test)]
pub(crate) mod tests;

use std::{fmt, sync::Arc, time::Duration};

use lease::LeaseGuard;

use crate::{
    clock::Clock,
    domain::OutgoingMail,
    log_events,
    mailer::{
        MailError, MailErrorKind, MailResult, Mailer, SendAttempt, request_start::RequestStarts,
    },
    rate_limit::{
        Ask, Decision, RateLimitError, RateLimiter, RateLimits, RequestEnd, Reservation,
        TenantBudget,
    },
};

/// `Permanent.code` when a message's recipients alone exceed the mailbox's day budget.
pub(crate) const CODE_RECIPIENTS_EXCEED_DAY_LIMIT: &str = "RecipientsExceedDayLimit";
/// `Permanent.code` when a message's external recipients alone exceed its tenant's day budget.
pub(crate) const CODE_EXTERNAL_RECIPIENTS_EXCEED_TENANT_LIMIT: &str =
    "ExternalRecipientsExceedTenantLimit";

/// Wraps `inner` with the limiter, for one mailbox budget (`limits`).
///
/// `send_with`: the inner mailer's local checks ([`Mailer::check`]: a bad message costs no
/// budget) → `check_and_reserve`:
/// - denied → [`MailErrorKind::RateLimitExceeded`](crate::mailer::MailErrorKind::RateLimitExceeded) at once; `inner` is not called, nothing sleeps;
/// - a message that can never fit → [`MailErrorKind::Permanent`](crate::mailer::MailErrorKind::Permanent) naming both numbers;
/// - allowed → `inner.send_with`, then [`RateLimiter::release`] with the outcome:
///   - sent → [`RequestEnd::Done`]: the budget was used;
///   - [`MailErrorKind::Throttled`](crate::mailer::MailErrorKind::Throttled) (429/503/504) → `Done`, and a `Retry-After` becomes the
///     mailbox's cooldown for every replica ([`RateLimiter::cooldown`]);
///   - [`MailErrorKind::OutcomeUnknown`](crate::mailer::MailErrorKind::OutcomeUnknown) (a timeout, reset or 5xx after the request was written:
///     Graph may have delivered it) → `Done`: the budget stays counted;
///   - any other error (connect failure, local refusal, a 4xx refusal) → [`RequestEnd::Unsent`]:
///     the budget is given back (event `mail.rateLimit.released`).
///
/// Why a provider's 429/503 keeps the reservation: the mailbox is over Exchange's limit right
/// now. Giving the slot back would let the next queued message go out at once into the same
/// refusal, turning our budget into a retry loop against the provider.
pub struct RateLimitedGraphMailer<M: Mailer, L: RateLimiter> {
    inner: M,
    limiter: Arc<L>,
    limits: RateLimits,
    tenant: String,
    tenant_budget: Option<TenantBudget>,
    clock: Arc<dyn Clock>,
    /// `HTTP_TIMEOUT`: how long a request of a cut-off send may still be in flight.
    request_timeout: Option<Duration>,
}

impl<M: Mailer, L: RateLimiter> fmt::Debug for RateLimitedGraphMailer<M, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitedGraphMailer")
            .field("limits", &self.limits)
            .field("tenant", &self.tenant)
            .field("tenant_budget", &self.tenant_budget)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<M: Mailer, L: RateLimiter> RateLimitedGraphMailer<M, L> {
    /// Wraps `inner`; `limiter` is the process's shared limiter, `limits` this mailbox's budget,
    /// `clock` the time the limiter decides by. The mailbox's Graph tenant defaults to its
    /// domain; set it with [`Self::with_tenant`].
    pub(crate) fn new(
        inner: M,
        limiter: Arc<L>,
        limits: RateLimits,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            inner,
            limiter,
            limits,
            tenant: String::new(),
            tenant_budget: None,
            clock,
            request_timeout: None,
        }
    }

    /// The inner mailer's whole-request deadline (`HTTP_TIMEOUT`): a send cut off after it
    /// started a request keeps its in-flight lease until that request's start + `timeout`
    /// ([`LeaseGuard`]). Without it a cut-off send releases its lease at once.
    #[must_use]
    pub(crate) fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// The mailbox's Graph tenant (the `paced` keys' hash tag) and, when configured, the
    /// tenant's external-recipient budget.
    #[must_use]
    pub(crate) fn with_tenant(mut self, tenant: &str, budget: Option<TenantBudget>) -> Self {
        self.tenant = tenant.to_lowercase();
        self.tenant_budget = budget;
        self
    }

    fn ask<'a>(&'a self, mail: &'a OutgoingMail) -> Ask<'a> {
        let tenant = if self.tenant.is_empty() {
            mail.from.as_str().rsplit('@').next().unwrap_or_default()
        } else {
            &self.tenant
        };
        Ask {
            message_id: mail.id,
            mailbox: &mail.from,
            tenant,
            recipients: mail.content.recipient_count(),
            limits: self.limits,
            tenant_budget: self.tenant_budget.as_ref().map(|budget| {
                let addresses = mail
                    .content
                    .to
                    .iter()
                    .chain(&mail.content.cc)
                    .chain(&mail.content.bcc);
                (
                    budget.external_count(addresses.map(|r| r.address.as_str())),
                    budget.external_recipients_per_day,
                )
            }),
            priority: mail.priority,
        }
    }

    /// Runs `work` (the attempt) while renewing its in-flight lease every
    /// [`RateLimiter::renew_every`], concurrently, so the attempt is never paused by a renewal.
    async fn renewing<T>(&self, reservation: &Reservation, work: impl Future<Output = T>) -> T {
        let Some(every) = self.limiter.renew_every() else {
            return work.await;
        };
        let renew = async {
            loop {
                tokio::time::sleep(every).await;
                self.limiter.renew(reservation, self.clock.now()).await;
            }
        };
        tokio::select! {
            biased;
            out = work => out,
            () = renew => unreachable!("renews until the attempt ends"),
        }
    }
}

#[async_trait::async_trait]
impl<M: Mailer, L: RateLimiter> Mailer for RateLimitedGraphMailer<M, L> {
    fn check(&self, mail: &OutgoingMail) -> Result<(), MailError> {
        self.inner.check(mail)
    }

    /// One reservation covers the whole attempt. In `draft` mode an attempt is several Graph
    /// requests made one after another (check, create, upload, send), so the one in-flight lease
    /// covers each of them in turn; the message slot and recipients are used only when the send
    /// step ran: when the check found the message already sent by an earlier attempt
    /// ([`SendReceipt::already_sent`]) or could not confirm it yet ([`MailErrorKind::Unconfirmed`](crate::mailer::MailErrorKind::Unconfirmed)),
    /// or a create/upload step failed ([`MailErrorKind::Transient`](crate::mailer::MailErrorKind::Transient)), the budget is given back.
    async fn send_with(&self, mail: &OutgoingMail, attempt: &SendAttempt<'_>) -> MailResult {
        self.inner.check(mail)?;
        let ask = self.ask(mail);
        let decision = self.limiter.check_and_reserve(&ask, self.clock.now()).await;
        let reservation = match decision {
            Ok(Decision::Allowed(reservation)) => reservation,
            Ok(Decision::Denied {
                reason,
                retry_after,
                booked,
            }) => {
                return Err(MailErrorKind::RateLimitExceeded {
                    reason,
                    retry_after,
                    booked,
                }
                .into());
            }
            Err(RateLimitError::RecipientsExceedDayLimit {
                mailbox,
                recipients,
                recipients_per_day,
            }) => {
                return Err(MailError::permanent(
                    CODE_RECIPIENTS_EXCEED_DAY_LIMIT,
                    format!(
                        "the message has {recipients} recipients but mailbox {mailbox} may send to at most {recipients_per_day} recipients per day; split it into smaller messages"
                    ),
                ));
            }
            Err(RateLimitError::ExternalRecipientsExceedTenantLimit { external, per_day }) => {
                return Err(MailError::permanent(
                    CODE_EXTERNAL_RECIPIENTS_EXCEED_TENANT_LIMIT,
                    format!(
                        "the message has {external} external recipients but tenant {} may send to at most {per_day} external recipients per day; split it into smaller messages",
                        ask.tenant
                    ),
                ));
            }
            // `validate` already refused it; kept for exhaustiveness.
            Err(e @ RateLimitError::NoRecipients { .. }) => {
                return Err(MailError::permanent(
                    crate::mailer::validate::CODE_NO_RECIPIENTS,
                    e.to_string(),
                ));
            }
        };
        let starts = self.request_timeout.map(RequestStarts::new);
        let guard = LeaseGuard::new(Arc::clone(&self.limiter), reservation, starts.clone());
        let send = self.inner.send_with(mail, attempt);
        let result = match &starts {
            Some(starts) => self.renewing(guard.reservation(), starts.scope(send)).await,
            None => self.renewing(guard.reservation(), send).await,
        };
        let reservation = guard.disarm();
        match result.as_ref().map_err(|e| &e.kind) {
            Ok(receipt) if receipt.already_sent => {
                self.limiter.release(&reservation, RequestEnd::Unsent).await;
            }
            Ok(_) | Err(MailErrorKind::OutcomeUnknown(_)) => {
                self.limiter.release(&reservation, RequestEnd::Done).await;
            }
            Err(MailErrorKind::Throttled {
                retry_after,
                signal,
            }) => {
                self.limiter.release(&reservation, RequestEnd::Done).await;
                if let Some(signal) = signal {
                    self.limiter.signal(*signal, &ask, self.clock.now()).await;
                }
                if let Some(wait) = retry_after {
                    let now = self.clock.now();
                    let until = now + chrono::Duration::from_std(*wait).unwrap_or_default();
                    self.limiter.cooldown(&ask, until, now).await;
                }
            }
            Err(error) => {
                self.limiter.release(&reservation, RequestEnd::Unsent).await;
                tracing::info!(
                    event = log_events::MAIL_RATE_LIMIT_RELEASED,
                    message.id = %mail.id,
                    mailbox = %mail.from,
                    recipients = ask.recipients,
                    counted = reservation.is_counted(),
                    error = %error,
                    "gave the reservation back because the request surely did not reach the provider"
                );
            }
        }
        result
    }
}
