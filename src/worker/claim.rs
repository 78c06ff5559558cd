//! send-scheduled-messages: each replica claims due rows for its **own** free worker slots (and
//! a small prefetch), straight to `SENDING` in one statement ([`messages::claim_due`]), and
//! hands each to a worker slot in this process. While due work remains and slots are free it
//! claims again at once; when a claim finds less than it had room for, it looks again after
//! `SCHEDULER_INTERVAL`. Replicas never wait on each other: `SKIP LOCKED` claims, no shared
//! cap, no Redis queue between the claim and the send.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use sqlx::PgPool;
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    task::JoinSet,
};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Observers, handler::Handler};
use crate::{
    config::WorkerConfig,
    log_events,
    ops::Metrics,
    store::{
        StoreError,
        messages::{self, StoredMessage},
    },
};

/// The prefetch is `WORKER_CONCURRENCY / PREFETCH_DIVISOR` (at least 1) claimed rows waiting
/// for a worker slot: under load a claim waits until that many slots are free, so claims stay
/// batches while the prefetched rows keep the workers busy.
pub(crate) const PREFETCH_DIVISOR: usize = 4;

/// This replica's room: `concurrency` worker slots, and `concurrency + prefetch` rows it may
/// hold claimed (sending or waiting for a slot).
#[derive(Debug, Clone)]
pub struct Slots {
    claimable: Arc<Semaphore>,
    sending: Arc<Semaphore>,
    prefetch: usize,
}

impl Slots {
    /// `concurrency` worker slots and their prefetch.
    pub fn new(concurrency: usize) -> Self {
        let concurrency = concurrency.max(1);
        let prefetch = concurrency.div_ceil(PREFETCH_DIVISOR);
        Self {
            claimable: Arc::new(Semaphore::new(concurrency + prefetch)),
            sending: Arc::new(Semaphore::new(concurrency)),
            prefetch,
        }
    }

    /// How many more rows this replica may claim now.
    pub fn free(&self) -> usize {
        self.claimable.available_permits()
    }

    /// The prefetch: claimed rows that may wait for a worker slot.
    pub fn prefetch(&self) -> usize {
        self.prefetch
    }

    /// Waits until at least the prefetch's worth of room is free, then takes all free room up
    /// to `batch`.
    async fn room(&self, batch: usize) -> OwnedSemaphorePermit {
        let first = self.prefetch.min(batch).max(1);
        let mut permit = Arc::clone(&self.claimable)
            .acquire_many_owned(first as u32)
            .await
            .expect("the semaphore is never closed");
        let more = self.free().min(batch - first);
        if more > 0
            && let Ok(extra) = Arc::clone(&self.claimable).try_acquire_many_owned(more as u32)
        {
            permit.merge(extra);
        }
        permit
    }
}

/// A replica's round over the senders with due rows ([`messages::due_senders`], longest-waiting
/// first): each claim takes the next senders in turn, an equal share of the claim each, so one
/// mailbox's backlog never delays another's due mail. The list is read again when a round ends
/// and it is older than `refresh` (`SCHEDULER_INTERVAL`), or after [`Self::stale`]: the
/// aggregate over the due rows runs once per round, not once per claim.
#[derive(Debug, Clone)]
pub struct SenderRound {
    senders: Vec<Uuid>,
    next: usize,
    read_at: Option<Instant>,
    refresh: Duration,
    metrics: Option<Arc<Metrics>>,
}

impl SenderRound {
    /// An empty round, read at the first claim.
    pub fn new(refresh: Duration) -> Self {
        Self {
            senders: Vec::new(),
            next: 0,
            read_at: None,
            refresh,
            metrics: None,
        }
    }

    /// This round, each claim statement's round trip observed in `metrics`
    /// (`mail_worker_claim_duration_seconds`).
    pub fn observed(self, metrics: Arc<Metrics>) -> Self {
        Self {
            metrics: Some(metrics),
            ..self
        }
    }

    /// Reads the list again when this round ends (after an idle wait: new senders may be due).
    pub(crate) fn stale(&mut self) {
        self.read_at = None;
    }

    /// Claims up to `limit` rows from the next senders of the round (starting at most one new
    /// round).
    ///
    /// # Errors
    /// PostgreSQL errors.
    pub(crate) async fn claim(
        &mut self,
        pool: &PgPool,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let mut claimed: Vec<StoredMessage> = Vec::new();
        let mut reread = false;
        while claimed.len() < limit {
            if self.next >= self.senders.len() {
                self.next = 0;
                let fresh = self.read_at.is_some_and(|at| at.elapsed() < self.refresh);
                if self.senders.is_empty() || !fresh {
                    if reread {
                        break;
                    }
                    reread = true;
                    self.senders = messages::due_senders(pool).await?;
                    self.read_at = Some(Instant::now());
                    if self.senders.is_empty() {
                        break;
                    }
                }
            }
            let want = limit - claimed.len();
            let end = (self.next + want).min(self.senders.len());
            let share = want.div_ceil(end - self.next);
            let started = Instant::now();
            let rows = messages::claim_due_from(
                pool,
                &self.senders[self.next..end],
                share as i64,
                want as i64,
            )
            .await?;
            if let Some(metrics) = &self.metrics {
                metrics.claim_statement(started.elapsed());
            }
            // A sender that gave less than its share has nothing more due (for this replica):
            // it leaves the round, so every pass claims something or shrinks the round. Unless
            // the claim's outer limit cut it off: when the claim filled `want`, a sender that
            // gave less may have had more, so it stays and goes first in the next claim.
            let gave = |sender: &Uuid| rows.iter().filter(|m| m.sender.id() == *sender).count();
            let cut = rows.len() >= want;
            let (served, waiting): (Vec<Uuid>, Vec<Uuid>) = self.senders[self.next..end]
                .iter()
                .filter(|sender| cut || gave(sender) >= share)
                .partition(|sender| gave(sender) >= share);
            let served_len = served.len();
            let kept: Vec<Uuid> = served.into_iter().chain(waiting).collect();
            self.senders.splice(self.next..end, kept);
            self.next += served_len;
            claimed.extend(rows);
        }
        Ok(claimed)
    }
}

/// A claimed message and its room in [`Slots`] (given back when it is done).
pub struct Claimed {
    /// The row, `SENDING`.
    pub message: StoredMessage,
    room: OwnedSemaphorePermit,
}

/// Claims for this replica's free room only — at most `batch` rows, never more than
/// [`Slots::free`], from the next senders of `round` — and returns them with the room they
/// take. Also returns how many it had room for (fewer claimed means nothing more is due now).
///
/// # Errors
/// PostgreSQL errors.
pub async fn claim_for_free_slots(
    pool: &PgPool,
    slots: &Slots,
    round: &mut SenderRound,
    batch: usize,
) -> Result<(Vec<Claimed>, usize), StoreError> {
    claim_into(pool, round, slots.room(batch.max(1)).await).await
}

/// Claims as many rows as `room` holds permits.
async fn claim_into(
    pool: &PgPool,
    round: &mut SenderRound,
    mut room: OwnedSemaphorePermit,
) -> Result<(Vec<Claimed>, usize), StoreError> {
    let wanted = room.num_permits();
    let messages = round.claim(pool, wanted).await?;
    let claimed = messages
        .into_iter()
        .filter_map(|message| {
            let room = room.split(1)?;
            Some(Claimed { message, room })
        })
        .collect();
    Ok((claimed, wanted))
}

/// Claims and sends until `stop` is cancelled, then lets sends in flight finish within `grace`
/// (rows still waiting for a slot go back to `SCHEDULED`; sends cut off by the grace stay
/// `SENDING` until lease recovery, and their in-flight leases are released as they are
/// dropped). Failures are logged and retried after `SCHEDULER_INTERVAL` (PostgreSQL may come
/// back).
pub(crate) async fn run_loop(
    pool: PgPool,
    handler: Handler,
    config: WorkerConfig,
    grace: Duration,
    stop: CancellationToken,
    observers: Observers,
) {
    let slots = Slots::new(config.concurrency.get() as usize);
    let mut round =
        SenderRound::new(config.scheduler_interval).observed(Arc::clone(&observers.metrics));
    let batch = config.scheduler_batch_size.get() as usize;
    // A claim may wait on PostgreSQL up to its acquire timeout (10 s) and more.
    let allowance = config.scheduler_interval * 3 + Duration::from_secs(60);
    let mut sends = JoinSet::new();
    observers
        .claiming
        .store(true, std::sync::atomic::Ordering::SeqCst);
    loop {
        observers.liveness.beat("claim", allowance);
        while sends.try_join_next().is_some() {}
        let room = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            // Waiting for free slots is the loop working, not hanging.
            room = beating(&observers, allowance, slots.room(batch.max(1))) => room,
        };
        // Not cancelled: a claim that committed must reach its workers.
        let claim = claim_into(&pool, &mut round, room).await;
        let more_due = match claim {
            Ok((claimed, room)) => {
                let more_due = claimed.len() == room;
                if !claimed.is_empty() {
                    observers.metrics.claimed(claimed.len() as u64);
                    tracing::debug!(
                        event = log_events::SCHEDULER_CLAIMED,
                        claimed = claimed.len(),
                        room,
                        "claimed due messages"
                    );
                }
                for claimed in claimed {
                    sends.spawn(send_one(
                        handler.clone(),
                        pool.clone(),
                        claimed,
                        Arc::clone(&slots.sending),
                        stop.clone(),
                    ));
                }
                more_due
            }
            Err(e) => {
                tracing::warn!(event = log_events::SCHEDULER_CLAIMED, error = %e, "claiming due messages failed; retrying");
                false
            }
        };
        if !more_due {
            round.stale();
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(config.scheduler_interval) => {}
            }
        }
    }
    observers
        .claiming
        .store(false, std::sync::atomic::Ordering::SeqCst);
    tracing::info!(
        event = log_events::DAEMON_STOPPING,
        in_flight = sends.len(),
        "shutdown requested; finishing in-flight sends"
    );
    let finished =
        tokio::time::timeout(grace, async { while sends.join_next().await.is_some() {} }).await;
    if finished.is_err() {
        tracing::warn!(
            event = log_events::DAEMON_STOPPED,
            in_flight = sends.len(),
            "shutdown grace elapsed with sends in flight; their rows will be recovered after SEND_LEASE"
        );
        sends.shutdown().await;
    }
    observers.liveness.ended("claim");
}

/// `work`, beating `claim` every second while it waits.
async fn beating<T>(
    observers: &Observers,
    allowance: Duration,
    work: impl Future<Output = T>,
) -> T {
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return out,
            () = tokio::time::sleep(Duration::from_secs(1)) => observers.liveness.beat("claim", allowance),
        }
    }
}

/// Waits for a worker slot and sends; a shutdown before a slot is free gives the row back.
async fn send_one(
    handler: Handler,
    pool: PgPool,
    claimed: Claimed,
    sending: Arc<Semaphore>,
    stop: CancellationToken,
) {
    let Claimed { message, room } = claimed;
    let slot = tokio::select! {
        biased;
        slot = sending.acquire_owned() => slot.ok(),
        () = stop.cancelled() => None,
    };
    let Some(slot) = slot else {
        if let Err(e) = messages::release_unstarted(&pool, &[message.fence]).await {
            tracing::warn!(event = log_events::MAIL_SEND_INFRASTRUCTURE_ERROR, message.id = %message.id, error = %e, "giving back an unstarted message failed; lease recovery will reschedule it");
        }
        return;
    };
    if let Err(e) = handler.send(&message).await {
        tracing::error!(event = log_events::MAIL_SEND_INFRASTRUCTURE_ERROR, message.id = %message.id, error = %e, "send failed on infrastructure trouble; lease recovery will reschedule it");
    }
    drop(slot);
    drop(room);
}
