//! One tenant's read: the window of its traced senders' `SENT` messages, the trace's pages of
//! it (each request counted in the tenant's Redis budget first), the details of failed
//! recipients, and each recipient's fate written.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::DeliveryReconciler;
use crate::{
    bounces::{Found, Pauses, Told},
    domain::{LimitFinding, Sender},
    log_events,
    mailer::{
        graph::trace::{TraceError, TraceRow, failure_of},
        redact,
    },
    store::outcomes::{self, Outcome, RecipientOutcome},
};

/// Pages one read lists at most (5,000 records each); the rest waits for the next interval.
pub const MAX_PAGES: u32 = 20;

/// Messages written per transaction.
const WRITE_BATCH: usize = 500;

/// What one read did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceOutcome {
    /// Trace requests made (pages and details).
    pub requests: u32,
    /// Records listed.
    pub records: u32,
    /// Recipients whose fate became final, by outcome.
    pub delivered: u32,
    /// See [`Self::delivered`].
    pub failed: u32,
    /// See [`Self::delivered`].
    pub filtered: u32,
    /// Why the tenant's reads are paused now (a `401`/`403`, naming the fix).
    pub paused: Option<String>,
    /// The read stopped early: the budget was used up or cooling down, or an error.
    pub error: Option<String>,
    /// The budgets a failure paused in this read: sender, whole day, mailbox quota.
    pub paused_budgets: BTreeSet<(String, bool, bool)>,
}

/// Why a request was not made or failed.
enum Stop {
    Budget,
    Trace(TraceError),
}

impl DeliveryReconciler {
    /// Reads `tenant`'s trace for `senders`.
    pub(super) async fn read(&self, tenant: &str, senders: &[Sender]) -> TraceOutcome {
        let mut out = TraceOutcome::default();
        if let Err(stop) = self.read_into(tenant, senders, &mut out).await {
            match stop {
                Stop::Budget => out.error = Some("trace budget used up".to_owned()),
                Stop::Trace(e @ (TraceError::Unprovisioned | TraceError::Forbidden)) => {
                    let reason = e.to_string();
                    tracing::warn!(
                        event = log_events::MAIL_TRACE_PAUSED,
                        tenant,
                        reason = %reason,
                        "the tenant's message trace is paused until the fix; probed again later"
                    );
                    out.paused = Some(reason);
                }
                Stop::Trace(e) => {
                    tracing::warn!(
                        event = log_events::MAIL_TRACE_READ_FAILED,
                        tenant,
                        error = %e,
                        "reading the message trace failed; the next interval tries again"
                    );
                    out.error = Some(e.to_string());
                }
            }
        }
        tracing::info!(
            event = log_events::MAIL_TRACE_READ,
            tenant,
            requests = out.requests,
            records = out.records,
            delivered = out.delivered,
            failed = out.failed,
            filtered = out.filtered,
            "read the message trace"
        );
        out
    }

    async fn read_into(
        &self,
        tenant: &str,
        senders: &[Sender],
        out: &mut TraceOutcome,
    ) -> Result<(), Stop> {
        let now = self.clock.now();
        let mailboxes: Vec<String> = senders.iter().map(|s| s.mailbox().to_string()).collect();
        let window = (self.settings.give_up, self.settings.lag);
        let age = match outcomes::pending(&self.pool, &mailboxes, window).await {
            Ok((count, Some(age))) if count > 0 => age,
            Ok(_) => return Ok(()),
            Err(e) => return Err(Stop::Trace(TraceError::Other(e.to_string()))),
        };
        let Some(first) = senders.first() else {
            return Ok(());
        };
        let mailbox = match self.factory.graph_mailbox(first).await {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err(e) => return Err(Stop::Trace(e.into())),
        };
        let from = now
            - chrono::Duration::from_std(age).unwrap_or_default()
            - chrono::Duration::minutes(1);
        // One sender: its own records; several: the tenant's, one listing for all of them.
        let sender_filter = (senders.len() == 1).then(|| mailboxes[0].as_str());
        let mut url = Some(mailbox.mailer.traces_first_url(sender_filter, (from, now)));
        let mut rows: Vec<TraceRow> = Vec::new();
        for _ in 0..MAX_PAGES {
            let Some(page_url) = url.take() else { break };
            self.spend(tenant, out).await?;
            let page = self
                .throttled(tenant, mailbox.mailer.trace_page(&page_url).await)
                .await?;
            rows.extend(page.value);
            url = page.next_link.and_then(|n| url::Url::parse(&n).ok());
        }
        out.records = u32::try_from(rows.len()).unwrap_or(u32::MAX);
        let by_message = self.ours(rows).await;
        let mut batch = Vec::new();
        let mut stopped = None;
        for (message, rows) in by_message {
            // Once the budget is spent, the messages that need no details are still written.
            let asks = rows.iter().any(|r| r.status.as_deref() == Some("Failed"));
            if stopped.is_some() && asks {
                continue;
            }
            match self.fates(tenant, &mailbox.mailer, rows, out).await {
                Ok(recipients) => batch.push((message, recipients)),
                Err(stop) => stopped = Some(stop),
            }
            if batch.len() >= WRITE_BATCH {
                self.write(senders, &std::mem::take(&mut batch), out)
                    .await?;
            }
        }
        // What was asked before the budget ran out is written all the same.
        self.write(senders, &batch, out).await?;
        stopped.map_or(Ok(()), Err)
    }

    /// Each recipient's fate of one message's `rows`: the details of the failed ones asked.
    async fn fates(
        &self,
        tenant: &str,
        mailer: &crate::mailer::graph::MicrosoftGraphMailer,
        rows: Vec<TraceRow>,
        out: &mut TraceOutcome,
    ) -> Result<Vec<RecipientOutcome>, Stop> {
        let mut recipients = Vec::with_capacity(rows.len());
        for row in rows {
            let status = row.status.clone().unwrap_or_default();
            let outcome = Outcome::of_trace(&status);
            let recipient = row.recipient_address.clone().unwrap_or_default();
            let failure = if outcome == Outcome::Failed {
                self.spend(tenant, out).await?;
                let details = self
                    .throttled(tenant, mailer.trace_details(&row.id, &recipient).await)
                    .await?;
                Some(failure_of(&details).map_or_else(
                    || ("5.0.0".to_owned(), "the trace names no reason".to_owned()),
                    |(code, text)| (code, redact::scrub_provider_text(&text)),
                ))
            } else {
                None
            };
            recipients.push(RecipientOutcome {
                recipient,
                trace_status: status,
                outcome,
                at: row.received_date_time,
                failure,
                trace_id: row.id,
            });
        }
        Ok(recipients)
    }

    /// Writes `batch` in one transaction, counts what became final (by the message's sender)
    /// and pauses the budgets a quota or reputation failure names, as an NDR would
    /// ([`crate::domain::action_of`], [`crate::bounces::Pauses`]).
    async fn write(
        &self,
        senders: &[Sender],
        batch: &[(Uuid, Vec<RecipientOutcome>)],
        out: &mut TraceOutcome,
    ) -> Result<(), Stop> {
        if batch.is_empty() {
            return Ok(());
        }
        let applied = outcomes::apply_batch(&self.pool, batch, self.outbox)
            .await
            .map_err(|e| Stop::Trace(TraceError::Other(e.to_string())))?;
        for (applied, (message, _)) in applied.into_iter().zip(batch) {
            let sender = applied.sender.as_deref().unwrap_or_default();
            for outcome in &applied.finals {
                let (count, label) = match outcome {
                    Outcome::Delivered => (&mut out.delivered, "delivered"),
                    Outcome::Failed => (&mut out.failed, "failed"),
                    Outcome::Filtered => (&mut out.filtered, "filtered"),
                    Outcome::Pending => continue,
                };
                *count += 1;
                self.metrics.recipient_outcome(sender, label);
            }
            for (code, text) in &applied.pauses {
                self.pause(senders, sender, *message, (code, text), out)
                    .await;
            }
        }
        Ok(())
    }

    /// Pauses what a failed recipient's `code` names for `sender`'s budget, once per read and
    /// budget (the NDR path's rule).
    async fn pause(
        &self,
        senders: &[Sender],
        sender: &str,
        message_id: Uuid,
        (code, text): (&str, &str),
        out: &mut TraceOutcome,
    ) {
        let Some(finding) = LimitFinding::of(code, text) else {
            return;
        };
        let Some(sender) = senders
            .iter()
            .find(|s| s.mailbox().as_str().eq_ignore_ascii_case(sender))
        else {
            return;
        };
        let key = (
            sender.mailbox().as_str().to_owned(),
            finding.whole_day(),
            finding == LimitFinding::MailboxQuota,
        );
        if !out.paused_budgets.insert(key) {
            return;
        }
        let Ok(Some(mailbox)) = self.factory.graph_mailbox(sender).await else {
            return;
        };
        let found = Found {
            finding,
            told: Told::Trace,
            code,
            text,
            message_id,
        };
        let pauses = Pauses {
            pool: &self.pool,
            limiter: &self.limiter,
            now: self.clock.now(),
        };
        pauses.pause(&mailbox, sender.mailbox(), &found).await;
    }

    /// The rows of our `SENT` messages whose recipient is not final yet, by message.
    async fn ours(&self, rows: Vec<TraceRow>) -> BTreeMap<Uuid, Vec<TraceRow>> {
        let mut by_message: BTreeMap<Uuid, Vec<TraceRow>> = BTreeMap::new();
        for row in rows {
            if let Some(id) = row.message_id.as_deref().and_then(our_id) {
                by_message.entry(id).or_default().push(row);
            }
        }
        let ids: Vec<Uuid> = by_message.keys().copied().collect();
        let open: HashSet<(Uuid, String)> = outcomes::open(&self.pool, &ids)
            .await
            .unwrap_or_default()
            .into_iter()
            .collect();
        let sent: HashSet<Uuid> = open.iter().map(|(id, _)| *id).collect();
        by_message.retain(|id, rows| {
            rows.retain(|r| {
                let recipient = r.recipient_address.as_deref().unwrap_or_default();
                !open.contains(&(*id, format!("final:{}", recipient.to_lowercase())))
            });
            sent.contains(id) && !rows.is_empty()
        });
        by_message
    }

    /// Counts one request in the tenant's budget, or stops the read.
    async fn spend(&self, tenant: &str, out: &mut TraceOutcome) -> Result<(), Stop> {
        match self.limiter.trace_request(tenant, self.clock.now()).await {
            Ok(Ok(())) => {
                out.requests += 1;
                Ok(())
            }
            Ok(Err(_)) => Err(Stop::Budget),
            Err(e) => Err(Stop::Trace(TraceError::Other(e.to_string()))),
        }
    }

    /// A `429` cools the tenant's trace budget down until its `Retry-After` (60 s without one).
    async fn throttled<T>(&self, tenant: &str, result: Result<T, TraceError>) -> Result<T, Stop> {
        if let Err(TraceError::Throttled(wait)) = &result {
            let now = self.clock.now();
            let wait = wait.unwrap_or(std::time::Duration::from_secs(60));
            let until: DateTime<Utc> = now + chrono::Duration::from_std(wait).unwrap_or_default();
            let _ = self.limiter.trace_cooldown(tenant, now, until).await;
        }
        result.map_err(Stop::Trace)
    }
}

/// Our message id in a `messageId` we set (`<uuid@domain>`).
fn our_id(message_id: &str) -> Option<Uuid> {
    let inner = message_id.trim().strip_prefix('<')?.strip_suffix('>')?;
    let (local, _) = inner.rsplit_once('@')?;
    Uuid::parse_str(local).ok()
}
