//! One receiver's dispatcher: claim its lease, take the next batch after its cursor, POST it
//! signed, and move the cursor on — or back off (jittered, [`crate::backoff`]) and, for events
//! older than `EVENTS_RETRY_FOR`, give them up as dead.
//!
//! A retry resends the **same** batch (the same events, so the same `webhook-id`,
//! [`sign::batch_id`]): after a failure the dispatcher remembers where the batch ended
//! ([`Pin`]) and cuts the next one there, even if more events have committed since.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::Utc;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{OutboxSettings, POLL, Receiver, sign};
use crate::{
    log_events,
    ops::Metrics,
    store::{
        StoreError,
        events::delivery::{self, Event},
    },
};

/// What a step did: found work (go on at once) or none (wait [`POLL`]).
enum Step {
    Busy,
    Idle,
}

/// The body of one POST.
#[derive(serde::Serialize)]
struct Body<'a> {
    events: &'a [Event],
}

/// The batch a failed POST carried: from the cursor `after` up to `until` (both `(xid, seq)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pin {
    after: (i64, i64),
    until: (i64, i64),
}

/// `batch` (read after `after`) cut where `pin`'s batch ended, if it was read after the same
/// cursor: a retry carries exactly the events the failed POST did.
fn pinned(mut batch: Vec<Event>, after: (i64, i64), pin: Option<Pin>) -> Vec<Event> {
    if let Some(pin) = pin.filter(|p| p.after == after) {
        batch.retain(|e| (e.xid, e.seq) <= pin.until);
    }
    batch
}

pub(super) struct Dispatcher {
    pub pool: PgPool,
    pub client: reqwest::Client,
    pub receiver: Receiver,
    pub settings: Arc<OutboxSettings>,
    pub metrics: Arc<Metrics>,
    /// This process's lease holder id.
    pub me: Uuid,
    /// The last failed batch, resent as it was ([`pinned`]).
    pub pin: Option<Pin>,
}

impl Dispatcher {
    /// Delivers until `done`.
    pub(super) async fn run(mut self, done: CancellationToken) {
        let shown = self.receiver.shown.clone();
        let shown = shown.as_str();
        tracing::info!(
            event = log_events::EVENTS_DISPATCHER,
            receiver = shown,
            "delivering events"
        );
        let mut registered = false;
        while !done.is_cancelled() {
            let step = if registered {
                self.step().await
            } else {
                delivery::register(&self.pool, &self.receiver.key, shown)
                    .await
                    .map(|()| {
                        registered = true;
                        Step::Busy
                    })
            };
            let wait = match step {
                Ok(Step::Busy) => continue,
                Ok(Step::Idle) => POLL,
                Err(e) => {
                    tracing::warn!(event = log_events::EVENTS_STORE_ERROR, receiver = shown, error = %e, "the outbox's query failed; trying again");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = done.cancelled() => {}
            }
        }
        // A restarted replica (or another) takes over at once, not after the lease.
        if let Err(e) = delivery::release(&self.pool, &self.receiver.key, self.me).await {
            tracing::warn!(event = log_events::EVENTS_STORE_ERROR, receiver = shown, error = %e, "could not give the receiver's lease back; it lapses by itself");
        }
    }

    /// One claim, batch and POST.
    async fn step(&mut self) -> Result<Step, StoreError> {
        let (key, me) = (self.receiver.key.as_str(), self.me);
        // The lease outlives one POST and the writes after it.
        let lease = self.settings.timeout + Duration::from_secs(30);
        let Some(claimed) = delivery::claim(&self.pool, key, me, lease).await? else {
            return Ok(Step::Idle);
        };
        let after = (claimed.cursor_xid, claimed.cursor_seq);
        let batch = pinned(
            delivery::next_batch(&self.pool, after, self.settings.batch_size).await?,
            after,
            self.pin,
        );
        let Some(last) = batch.last().map(|e| (e.xid, e.seq)) else {
            self.pin = None;
            return Ok(Step::Idle);
        };
        self.pin = None;
        let n = batch.len() as u64;
        let started = Instant::now();
        let shown = self.receiver.shown.as_str();
        match self.post(&batch).await {
            Ok(()) => {
                if delivery::delivered(&self.pool, key, me, last, n).await? {
                    self.metrics.events_delivered(n);
                }
                tracing::debug!(
                    event = log_events::EVENTS_DELIVERED,
                    receiver = shown,
                    events = n,
                    duration_ms = started.elapsed().as_millis() as u64,
                    "events delivered"
                );
                Ok(Step::Busy)
            }
            Err(why) => {
                let cutoff = Utc::now()
                    - chrono::Duration::from_std(self.settings.retry_for)
                        .unwrap_or(chrono::Duration::MAX);
                let expired: Vec<(i64, i64)> = batch
                    .iter()
                    .take_while(|e| e.occurred_at < cutoff)
                    .map(|e| (e.xid, e.seq))
                    .collect();
                if !expired.is_empty() {
                    let reason =
                        format!("not delivered within EVENTS_RETRY_FOR; last error: {why}");
                    if delivery::dead(&self.pool, key, me, &expired, &reason).await? {
                        self.metrics.events_dead(expired.len() as u64);
                        tracing::error!(
                            event = log_events::EVENTS_DEAD,
                            receiver = shown,
                            events = expired.len(),
                            reason = %reason,
                            "events given up at this receiver (mail-worker events dead; events replay resends)"
                        );
                    }
                    return Ok(Step::Busy);
                }
                let failures = u32::try_from(claimed.failures).unwrap_or(0) + 1;
                let wait = crate::backoff::jittered(
                    failures,
                    self.settings.backoff_base,
                    self.settings.backoff_cap,
                );
                delivery::failed(&self.pool, key, me, wait, &why).await?;
                self.pin = Some(Pin { after, until: last });
                self.metrics.events_retried(n);
                tracing::warn!(
                    event = log_events::EVENTS_DELIVERY_FAILED,
                    receiver = shown,
                    events = n,
                    failures,
                    retry_in_ms = wait.as_millis() as u64,
                    error = %why,
                    "a webhook receiver did not take a batch of events; trying again"
                );
                Ok(Step::Idle)
            }
        }
    }

    /// POSTs `batch`, signed; `Err` with what went wrong unless the receiver answered 2xx.
    async fn post(&self, batch: &[Event]) -> Result<(), String> {
        let body = serde_json::to_vec(&Body { events: batch }).map_err(|e| e.to_string())?;
        let timestamp = Utc::now().timestamp();
        let id = sign::batch_id(batch);
        let mut request = self
            .client
            .post(self.receiver.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        for (name, value) in self.settings.signing.headers(&id, timestamp, &body) {
            request = request.header(name, value);
        }
        let answer = request.body(body).send().await.map_err(|e| {
            // reqwest's text names the URL, and a URL may carry a token.
            let kind = if e.is_timeout() {
                "timed out"
            } else if e.is_connect() {
                "cannot connect"
            } else {
                "request failed"
            };
            format!("{kind} ({})", self.receiver.shown)
        })?;
        let status = answer.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("answered {status}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seqs: std::ops::RangeInclusive<i64>) -> Vec<Event> {
        seqs.map(|seq| {
            let id = Uuid::from_u128(u128::from(seq.unsigned_abs()));
            super::super::test_events::sent(id, Uuid::nil(), (9, seq))
        })
        .collect()
    }

    #[test]
    fn a_retry_is_cut_where_the_failed_batch_ended() {
        let pin = Some(Pin {
            after: (9, 0),
            until: (9, 3),
        });
        let seqs = |b: Vec<Event>| b.iter().map(|e| e.seq).collect::<Vec<_>>();
        // More events committed since: the retry carries the first three only, same id.
        let retry = pinned(batch(1..=8), (9, 0), pin);
        assert_eq!(seqs(retry.clone()), [1, 2, 3]);
        assert_eq!(sign::batch_id(&retry), sign::batch_id(&batch(1..=3)));
        // The cursor moved (delivered or dead since, another replica): no cut.
        assert_eq!(seqs(pinned(batch(4..=8), (9, 3), pin)).len(), 5);
        assert_eq!(seqs(pinned(batch(1..=8), (9, 0), None)).len(), 8);
    }
}
