//! Batched `SENT` writes: sends that finish together are written as one statement
//! ([`messages::mark_sent_many`]) by one writer task, so under load the outcome write costs a
//! fraction of a round trip per message and a single pooled connection.

use std::sync::OnceLock;

use crate::store::{
    StoreError,
    events::Outbox,
    messages::{self, Fence, SentRow},
};
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

/// The most `SENT` rows one statement writes.
pub(crate) const MAX_BATCH: usize = 256;

/// One `SENT` to write and who waits for it: `Some(was SENDING)`, or `None` when the batch
/// failed (the caller then writes it alone, to see its own error).
struct Pending {
    row: SentRow,
    reply: oneshot::Sender<Option<bool>>,
}

/// Writes `SENT` outcomes, batching those that arrive while a write runs.
pub(crate) struct SentWriter {
    pool: PgPool,
    outbox: Outbox,
    queue: OnceLock<mpsc::UnboundedSender<Pending>>,
}

impl SentWriter {
    /// A writer on `pool`; its task starts with the first write (on the caller's runtime) and
    /// ends when the writer is dropped.
    pub(crate) fn new(pool: PgPool, outbox: Outbox) -> Self {
        Self {
            pool,
            outbox,
            queue: OnceLock::new(),
        }
    }

    /// `SENDING → SENT` of the row `fence` holds, with `last_error = note` (`suppressed`: how
    /// many of its recipients were dropped before the send), together with whatever else
    /// finishes meanwhile. Returns whether the row was still the attempt's.
    ///
    /// # Errors
    /// Database errors of this row's write.
    pub(crate) async fn mark_sent(
        &self,
        fence: Fence,
        note: Option<&str>,
        suppressed: u32,
    ) -> Result<bool, StoreError> {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(write_batches(self.pool.clone(), self.outbox, rx));
            tx
        });
        let (reply, answer) = oneshot::channel();
        let row = SentRow {
            fence,
            note: note.map(str::to_owned),
            suppressed,
        };
        let pending = Pending {
            row: row.clone(),
            reply,
        };
        if queue.send(pending).is_ok()
            && let Ok(Some(was_sending)) = answer.await
        {
            return Ok(was_sending);
        }
        Ok(messages::mark_sent_many(&self.pool, &[row], self.outbox)
            .await?
            .contains(&fence.id))
    }
}

/// Takes the first waiting write, everything queued behind it (up to [`MAX_BATCH`]), writes
/// them in one statement and answers each; until every sender is gone.
async fn write_batches(pool: PgPool, outbox: Outbox, mut queue: mpsc::UnboundedReceiver<Pending>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let rows: Vec<SentRow> = batch.iter().map(|p| p.row.clone()).collect();
        let written = messages::mark_sent_many(&pool, &rows, outbox).await.ok();
        for p in batch.drain(..) {
            let answer = written.as_ref().map(|ids| ids.contains(&p.row.fence.id));
            let _ = p.reply.send(answer);
        }
    }
}
