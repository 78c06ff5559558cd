//! One tenant's read: the window of its traced senders' `SENT` messages, the trace's pages of
//! it (each request counted in the tenant's Redis budget first), the details of failed
//! recipients, and each recipient's fate written.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::DeliveryReconciler;
use crate::{
    domain::Sender,
    events,
    mailer::{
        graph::trace::{TraceError, TraceRow, failure_of},
        redact,
    },
    store::outcomes::{self, Outcome, RecipientOutcome},
};

/// Pages one read lists at most (5,000 records each); the rest waits for the next interval.
pub const MAX_PAGES: u32 = 20;

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
                        event = events::MAIL_TRACE_PAUSED,
                        tenant,
                        reason = %reason,
                        "the tenant's message trace is paused until the fix; probed again later"
                    );
                    out.paused = Some(reason);
                }
                Stop::Trace(e) => {
                    tracing::warn!(
                        event = events::MAIL_TRACE_READ_FAILED,
                        tenant,
                        error = %e,
                        "reading the message trace failed; the next interval tries again"
                    );
                    out.error = Some(e.to_string());
                }
            }
        }
        tracing::info!(
            event = events::MAIL_TRACE_READ,
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
        for (message, rows) in by_message {
            let mut recipients = Vec::with_capacity(rows.len());
            for row in rows {
                let status = row.status.clone().unwrap_or_default();
                let outcome = Outcome::of_trace(&status);
                let recipient = row.recipient_address.clone().unwrap_or_default();
                let failure = if outcome == Outcome::Failed {
                    self.spend(tenant, out).await?;
                    let details = self
                        .throttled(
                            tenant,
                            mailbox.mailer.trace_details(&row.id, &recipient).await,
                        )
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
            let applied = outcomes::apply(&self.pool, message, &recipients, self.outbox)
                .await
                .map_err(|e| Stop::Trace(TraceError::Other(e.to_string())))?;
            let sender = first.mailbox().as_str();
            for outcome in applied.finals {
                let (count, label) = match outcome {
                    Outcome::Delivered => (&mut out.delivered, "delivered"),
                    Outcome::Failed => (&mut out.failed, "failed"),
                    Outcome::Filtered => (&mut out.filtered, "filtered"),
                    Outcome::Pending => continue,
                };
                *count += 1;
                self.metrics.recipient_outcome(sender, label);
            }
        }
        Ok(())
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
