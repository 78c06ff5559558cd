//! The queue as operators see it (`mail-worker queue stats|dead|retry|discard`, the admin UI):
//! counts, and the dead-lettered jobs with the reason their line was refused, to retry (after
//! fixing the cause, e.g. importing a missing sender) or discard.

use std::sync::LazyLock;

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
    /// Jobs fetched by a live worker, not acked yet.
    pub in_flight: u64,
    /// Dead-lettered jobs.
    pub dead: u64,
    /// Finished jobs not yet removed by the cleanup.
    pub done: u64,
    /// Workers registered (live, or not yet found dead).
    pub workers: u64,
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
}

fn config(queue: &str) -> apalis_redis::Config {
    IntakeSettings::new(queue, None).storage_config()
}

/// The queue's counts.
///
/// # Errors
/// Redis errors.
pub async fn stats(conn: &mut QueueConnection, queue: &str) -> Result<QueueStats, IntakeError> {
    let c = config(queue);
    let (waiting, scheduled, dead, done, workers): (u64, u64, u64, u64, Vec<String>) =
        redis::pipe()
            .llen(c.active_jobs_list())
            .zcard(c.scheduled_jobs_set())
            .scard(c.dead_jobs_set())
            .scard(c.done_jobs_set())
            .zrange(c.workers_set(), 0, -1)
            .query_async(conn)
            .await?;
    let mut in_flight = 0;
    for w in &workers {
        let n: u64 = conn.scard(format!("{}:{w}", c.inflight_jobs_set())).await?;
        in_flight += n;
    }
    Ok(QueueStats {
        waiting,
        scheduled,
        in_flight,
        dead,
        done,
        workers: workers.len() as u64,
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
        let (result, bytes): (Option<String>, usize) = redis::pipe()
            .hget(format!("{}:{task}", c.job_meta_hash()), "result")
            .cmd("HSTRLEN")
            .arg(c.job_data_hash())
            .arg(&task)
            .query_async(conn)
            .await?;
        jobs.push(DeadJob {
            reason: reason(result),
            task,
            bytes,
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
