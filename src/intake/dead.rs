//! The queue as operators see it (`mail-worker queue stats|dead|retry|discard`, the admin UI):
//! counts, and the dead-lettered jobs with the reason their line was refused, to retry (after
//! fixing the cause, e.g. importing a missing sender) or discard.

use std::{sync::LazyLock, time::Duration};

use redis::{AsyncCommands, Script};
use serde::Serialize;

use super::{IntakeError, IntakeSettings, QueueConnection};

/// The queue's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QueueStats {
    /// Jobs waiting to be fetched.
    pub waiting: u64,
    /// Jobs scheduled (a retry, or a producer's push time).
    pub scheduled: u64,
    /// Jobs fetched by a worker and not acked yet (a silent worker's too, until another
    /// replica's heartbeat puts them back on the queue).
    pub in_flight: u64,
    /// Dead-lettered jobs.
    pub dead: u64,
    /// Finished jobs not yet removed by the cleanup.
    pub done: u64,
    /// Workers alive: registered, with a heartbeat within `heartbeat × missed heartbeats`.
    pub workers: u64,
    /// Workers still registered but silent for longer than that (stopped or killed; another
    /// replica's heartbeat re-queues their jobs and deregisters them).
    pub workers_silent: u64,
    /// The age in seconds of the oldest job waiting (the active list's head, by the push time
    /// `lua/intake/push.lua` records, or the scheduled set's oldest entry); `None` when
    /// nothing waits or the head has no push time (a producer that does not record it).
    pub oldest_seconds: Option<u64>,
}

impl QueueStats {
    /// What to say when no worker is alive: no replica's consumer polls the queue, so its jobs
    /// wait (issue 46: `workers alive 0` was the only sign of a dead consumer). `None` while one
    /// is alive.
    pub fn no_consumer(&self) -> Option<&'static str> {
        (self.workers == 0).then_some(if self.waiting + self.scheduled > 0 {
            "no consumer polls this queue and jobs wait: see each replica's /readyz (intake_consumer) and its intake.consumerRestart lines"
        } else {
            "no consumer polls this queue: a job pushed now waits until one does (see each replica's /readyz, intake_consumer)"
        })
    }
}

/// One dead-lettered job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadJob {
    /// Its task id (the message's `id` when it had one).
    pub task: String,
    /// Why its line was refused (the file import's reason).
    pub reason: String,
    /// Its line's size in bytes (the line itself may hold addresses: not shown).
    pub bytes: usize,
    /// When it was dead-lettered (Unix seconds, apalis-redis's `done_at`).
    pub dead_at: Option<i64>,
}

fn config(queue: &str) -> apalis_redis::Config {
    IntakeSettings::new(queue, None).storage_config()
}

/// What [`stats`] reads besides [`super::waiting::read`]: the done count and the workers with
/// their heartbeats.
type StatsReads = (u64, Vec<(String, f64)>);

/// The queue's counts; a worker is alive if its last heartbeat is within `alive_within`
/// ([`IntakeSettings::orphaned_after`]) of Redis's clock.
///
/// # Errors
/// Redis errors.
pub async fn stats(
    conn: &mut QueueConnection,
    queue: &str,
    alive_within: Duration,
) -> Result<QueueStats, IntakeError> {
    let c = config(queue);
    let waiting = super::waiting::read(conn, &c).await?;
    let (done, workers): StatsReads = redis::pipe()
        .scard(c.done_jobs_set())
        .zrange_withscores(c.workers_set(), 0, -1)
        .query_async(conn)
        .await?;
    let now = waiting.now;
    let mut pipe = redis::pipe();
    for (w, _) in &workers {
        pipe.scard(format!("{}:{w}", c.inflight_jobs_set()));
    }
    let in_flight: Vec<u64> = if workers.is_empty() {
        Vec::new()
    } else {
        pipe.query_async(conn).await?
    };
    // apalis-redis's rule: a worker whose beat is at or before `now - orphaned` is dead.
    let dead_before = now.saturating_sub(alive_within.as_secs()) as f64;
    let alive = workers
        .iter()
        .filter(|(_, beat)| *beat > dead_before)
        .count() as u64;
    let ages = [waiting.head_age(), waiting.scheduled_age()];
    Ok(QueueStats {
        waiting: waiting.active,
        scheduled: waiting.scheduled,
        in_flight: in_flight.iter().sum(),
        dead: waiting.dead,
        done,
        workers: alive,
        workers_silent: workers.len() as u64 - alive,
        oldest_seconds: ages.into_iter().flatten().max(),
    })
}

/// The reason apalis-redis stored for a dead job: `{"Err":"AbortError: <reason>"}` → `<reason>`.
fn reason(result: Option<String>) -> String {
    let Some(raw) = result else {
        return "(no reason stored)".into();
    };
    let text = serde_json::from_str::<serde_json::Value>(&raw)
        .ok()
        .and_then(|v| v.get("Err").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or(raw);
    text.strip_prefix("AbortError: ")
        .unwrap_or(&text)
        .to_owned()
}

/// Up to `limit` dead jobs, by task id.
///
/// # Errors
/// Redis errors.
pub async fn list(
    conn: &mut QueueConnection,
    queue: &str,
    limit: usize,
) -> Result<Vec<DeadJob>, IntakeError> {
    let c = config(queue);
    let mut ids: Vec<String> = conn.smembers(c.dead_jobs_set()).await?;
    ids.sort();
    ids.truncate(limit);
    let mut jobs = Vec::with_capacity(ids.len());
    for task in ids {
        let meta = format!("{}:{task}", c.job_meta_hash());
        let (result, dead_at, bytes): (Option<String>, Option<i64>, usize) = redis::pipe()
            .hget(&meta, "result")
            .hget(&meta, "done_at")
            .cmd("HSTRLEN")
            .arg(c.job_data_hash())
            .arg(&task)
            .query_async(conn)
            .await?;
        jobs.push(DeadJob {
            reason: reason(result),
            task,
            bytes,
            dead_at,
        });
    }
    Ok(jobs)
}

static RETRY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/intake/retry_dead.lua")));

/// Which dead jobs a command takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// Every dead job.
    All,
    /// These task ids.
    Ids(Vec<String>),
}

async fn dead_ids(
    conn: &mut QueueConnection,
    c: &apalis_redis::Config,
    which: Which,
) -> Result<Vec<String>, IntakeError> {
    Ok(match which {
        Which::All => conn.smembers(c.dead_jobs_set()).await?,
        Which::Ids(ids) => ids,
    })
}

/// Runs `script` (KEYS: the dead set, `keys`, then each id's meta hash; ARGV: the ids) over the
/// chosen dead jobs, 500 ids a call; returns the sum of its answers.
async fn each_chunk(
    conn: &mut QueueConnection,
    c: &apalis_redis::Config,
    which: Which,
    script: &Script,
    keys: &[String],
) -> Result<u64, IntakeError> {
    let mut n = 0;
    for chunk in dead_ids(conn, c, which).await?.chunks(500) {
        let mut call = script.key(c.dead_jobs_set());
        for key in keys {
            call.key(key);
        }
        for id in chunk {
            call.key(format!("{}:{id}", c.job_meta_hash())).arg(id);
        }
        let done: u64 = call.invoke_async(conn).await?;
        n += done;
    }
    Ok(n)
}

/// Puts dead jobs back on the queue (attempts reset); returns how many were dead.
///
/// # Errors
/// Redis errors.
pub async fn retry(
    conn: &mut QueueConnection,
    queue: &str,
    which: Which,
) -> Result<u64, IntakeError> {
    let c = config(queue);
    let keys = [c.active_jobs_list(), c.signal_list()];
    each_chunk(conn, &c, which, &RETRY, &keys).await
}

/// Deletes dead jobs (id, payload, meta); returns how many were dead.
///
/// # Errors
/// Redis errors.
pub async fn discard(
    conn: &mut QueueConnection,
    queue: &str,
    which: Which,
) -> Result<u64, IntakeError> {
    let c = config(queue);
    let keys = [c.job_data_hash()];
    each_chunk(conn, &c, which, &super::cleanup::REMOVE_JOBS, &keys).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_live_worker_is_said_and_whether_jobs_wait() {
        let mut stats = QueueStats::default();
        assert!(
            stats
                .no_consumer()
                .unwrap()
                .contains("a job pushed now waits")
        );
        stats.waiting = 3;
        assert!(stats.no_consumer().unwrap().contains("jobs wait"));
        stats.workers = 1;
        assert_eq!(stats.no_consumer(), None);
    }
}
