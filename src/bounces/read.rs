//! One mailbox's read: list its NDRs (each request under an in-flight lease), read each one's
//! MIME (`$value`), mark each of our messages `BOUNCED`, pause a budget an NDR says is used up
//! ([`crate::domain::action_of`], `pause.rs`), then move the NDR or mark it read.

use std::time::Duration;

use super::{
    BounceReader, MAX_PAGES, PAGE_SIZE,
    ndr::{Report, code_class},
    pause::{Found, Pauses, Told},
};
use crate::{
    domain::{LimitFinding, MailboxAddress, Priority, Sender},
    log_events,
    mailer::{MailError, MailErrorKind, factory::GraphMailbox, redact},
    rate_limit::{Ask, RateLimiter, ReadLease, RedisCallError, RequestEnd},
    store::{
        StoreError,
        messages::bounce::{self, Bounce, Marked},
    },
};

/// How often a request waits for a free in-flight slot before the read gives up (the next
/// interval tries again); each wait at most [`MAX_LEASE_WAIT`].
const LEASE_TRIES: u32 = 5;
const MAX_LEASE_WAIT: Duration = Duration::from_secs(2);

/// What one read did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadOutcome {
    /// Graph requests made (listing pages, each NDR's MIME, marks and moves).
    pub requests: u32,
    /// NDRs listed.
    pub reports: u32,
    /// Messages that became `BOUNCED`.
    pub bounced: u32,
    /// NDRs left in place for a later read (their message not `SENT` yet) or as not ours.
    pub left: u32,
    /// Whether a `5.7.233` / `5.7.705` / `5.7.708` / `5.7.501` paused the tenant's external
    /// mail (or, without a tenant budget, the mailbox).
    pub tenant_paused: bool,
    /// Whether a `5.1.90` / `5.2.2` submission quota paused the mailbox until its 24 h window
    /// frees.
    pub mailbox_paused: bool,
}

/// Why a read stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A Graph request failed.
    #[error("Graph: {0}")]
    Graph(#[from] MailError),
    /// PostgreSQL failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The limiter's Redis failed (no lease, no read).
    #[error("the limiter's Redis: {0}")]
    Redis(#[from] RedisCallError),
    /// The mailbox had no free in-flight slot (its sends use them, or a cooldown holds it).
    #[error("the mailbox stayed busy (in-flight slots taken or cooling down); read later")]
    Busy,
}

impl BounceReader {
    /// Reads `sender`'s Inbox.
    pub(super) async fn read(&self, sender: &Sender) -> Result<ReadOutcome, ReadError> {
        let mut out = ReadOutcome::default();
        let Some(mailbox) = self.factory.graph_mailbox(sender).await? else {
            return Ok(out);
        };
        let address = sender.mailbox();
        let mut url = Some(
            mailbox
                .mailer
                .reports_url(self.settings.folder.is_none(), PAGE_SIZE),
        );
        let mut reports = Vec::new();
        for _ in 0..MAX_PAGES {
            let Some(page_url) = url.take() else { break };
            let page = self
                .leased(
                    &mailbox,
                    address,
                    &mut out,
                    mailbox.mailer.report_page(&page_url),
                )
                .await?;
            reports.extend(page.value);
            url = page
                .next_link
                .map(|next| mailbox.mailer.next_reports_url(&next))
                .transpose()?;
        }
        out.reports = u32::try_from(reports.len()).unwrap_or(u32::MAX);
        for message in &reports {
            let mime = self
                .leased(
                    &mailbox,
                    address,
                    &mut out,
                    mailbox.mailer.report_mime(&message.id),
                )
                .await?;
            let view = Report::read(message);
            let report = match mime {
                Some(raw) => Report::from_mime(&raw).or(view),
                None => view,
            };
            if self.handle(&mailbox, address, &report, &mut out).await? {
                let dispose = async {
                    match &self.settings.folder {
                        Some(folder) => mailbox.mailer.move_message(&message.id, folder).await,
                        None => mailbox.mailer.mark_read(&message.id).await,
                    }
                };
                self.leased(&mailbox, address, &mut out, dispose).await?;
            } else {
                out.left += 1;
            }
        }
        let level_info = out.bounced > 0;
        macro_rules! read_line {
            ($level:ident) => {
                tracing::$level!(
                    event = log_events::MAIL_BOUNCE_READ,
                    mailbox = %address,
                    requests = out.requests,
                    reports = out.reports,
                    bounced = out.bounced,
                    left = out.left,
                    "read the Inbox for bounces"
                )
            };
        }
        if level_info {
            read_line!(info);
        } else {
            read_line!(debug);
        }
        Ok(out)
    }

    /// One NDR: `true` when it is done with (to move or mark read), `false` to leave it.
    async fn handle(
        &self,
        mailbox: &GraphMailbox,
        address: &MailboxAddress,
        report: &Report,
        out: &mut ReadOutcome,
    ) -> Result<bool, ReadError> {
        let domain = address.as_str().rsplit('@').next().unwrap_or_default();
        let Some(message_id) = report.our_message(domain) else {
            // Not one of ours (a person's mail from the same mailbox): theirs to read.
            return Ok(false);
        };
        let first = report
            .failures
            .iter()
            .find(|f| f.code.starts_with('5'))
            .or_else(|| report.failures.first());
        let (code, text) = first.map_or(("5.0.0", "the NDR names no status code"), |f| {
            (f.code.as_str(), f.text.as_str())
        });
        let text = redact::scrub_provider_text(text);
        let failed: Vec<String> = report
            .failures
            .iter()
            .filter(|f| !f.recipient.is_empty())
            .map(|f| f.recipient.clone())
            .collect();
        let marked = bounce::mark(
            &self.pool,
            &Bounce {
                message_id,
                mailbox: address,
                code,
                text: &text,
                failed: &failed,
            },
            self.outbox,
        )
        .await?;
        match marked {
            Marked::Bounced(bounced) => {
                out.bounced += 1;
                self.metrics.bounced(code_class(code));
                tracing::info!(
                    event = log_events::MAIL_BOUNCE_RECORDED,
                    message.id = %message_id,
                    mailbox = %address,
                    code,
                    recipients = bounced.bounced.len(),
                    "a non-delivery report turned a sent message BOUNCED"
                );
                for failure in &report.failures {
                    let Some(finding) = LimitFinding::of(&failure.code, &failure.text) else {
                        continue;
                    };
                    // The message trace told this failure first and paused its budget.
                    if bounced
                        .traced
                        .iter()
                        .any(|told| LimitFinding::of(told, told) == Some(finding))
                    {
                        continue;
                    }
                    let done = match finding {
                        LimitFinding::MailboxQuota => &mut out.mailbox_paused,
                        LimitFinding::TenantLimit | LimitFinding::TenantBlocked => {
                            &mut out.tenant_paused
                        }
                    };
                    if !*done {
                        *done = true;
                        let text = redact::scrub_provider_text(&failure.text);
                        let found = Found {
                            finding,
                            told: Told::Ndr,
                            code: &failure.code,
                            text: &text,
                            message_id,
                        };
                        let pauses = Pauses {
                            pool: &self.pool,
                            limiter: &self.limiter,
                            now: self.clock.now(),
                        };
                        pauses.pause(mailbox, address, &found).await;
                    }
                }
                Ok(true)
            }
            Marked::AlreadyBounced | Marked::Unknown => Ok(true),
            Marked::NotSentYet => Ok(false),
        }
    }

    /// Runs `request` under one in-flight lease of the mailbox, counted in `out.requests`; a
    /// `429`/`503` with `Retry-After` becomes the mailbox's cooldown, as for a send.
    async fn leased<T>(
        &self,
        mailbox: &GraphMailbox,
        address: &MailboxAddress,
        out: &mut ReadOutcome,
        request: impl Future<Output = Result<T, MailError>>,
    ) -> Result<T, ReadError> {
        let mut tries = 0;
        let lease = loop {
            match self
                .limiter
                .read_lease(&mailbox.tenant, address, self.clock.now())
                .await?
            {
                ReadLease::Taken(lease) => break lease,
                ReadLease::Wait(wait) if tries < LEASE_TRIES && wait <= MAX_LEASE_WAIT => {
                    tries += 1;
                    tokio::time::sleep(wait).await;
                }
                ReadLease::Wait(_) => return Err(ReadError::Busy),
            }
        };
        out.requests += 1;
        let result = request.await;
        self.limiter.release(&lease, RequestEnd::Done).await;
        if let Err(MailError {
            kind:
                MailErrorKind::Throttled {
                    retry_after: Some(wait),
                    ..
                },
            ..
        }) = &result
        {
            let ask = Ask {
                message_id: uuid::Uuid::nil(),
                mailbox: address,
                tenant: &mailbox.tenant,
                recipients: 1,
                limits: self.factory.default_limits(),
                tenant_budget: None,
                priority: Priority::default(),
            };
            let now = self.clock.now();
            let until = now + chrono::Duration::from_std(*wait).unwrap_or_default();
            self.limiter.cooldown(&ask, until, now).await;
        }
        Ok(result?)
    }
}
