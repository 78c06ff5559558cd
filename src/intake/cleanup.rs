//! Keeping the queue's Redis bounded, on a schedule of ours. apalis-redis 1.0 never removes a
//! finished job by itself (its `vacuum` is not called by the worker, reads the whole data hash
//! in one `HGETALL`, and deletes `Failed` jobs that are only waiting for a retry), so every
//! [`IntakeSettings::cleanup_every`] each replica removes a slice of the done set
//! (`lua/intake/remove_jobs.lua` on the done set: only ids apalis-redis marked `Done`, so never another
//! replica's live or retrying job), forgets workers that died without leaving
//! (`lua/intake/forget_workers.lua`: registration and metadata of a worker silent past the orphan
//! threshold, once apalis-redis's heartbeat has re-enqueued its jobs), and refreshes the queue's
//! gauges. A stopping worker leaves the queue cleanly (`lua/intake/leave.lua`).
//! docs/decisions/0011-intake-queue.md says what we rely on.

use std::{
    sync::{Arc, LazyLock},
    time::Instant,
};

use redis::{AsyncCommands, Script};
use tokio_util::sync::CancellationToken;

use super::{IntakeError, IntakeSettings, QueueConnection};
use crate::{
    log_events,
    ops::{Metrics, intake::QueueGauges},
    shutdown,
};

/// Done jobs one cleanup call removes (one script call each; a call takes well under 1 ms per
/// 100 ids, so Redis is never held long).
pub(crate) const REMOVE_PER_CALL: usize = 1_000;

/// `lua/intake/remove_jobs.lua`: removes the jobs of one set (done here, dead for
/// `queue discard`).
pub(crate) static REMOVE_JOBS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/intake/remove_jobs.lua")));
static LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/intake/leave.lua")));
static FORGET_WORKERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/intake/forget_workers.lua")));

/// `<queue>:workers:started`: each worker of ours by its start (Unix s), from its start until it
/// leaves or is forgotten ([`forget_dead_workers`]).
fn started_set(queue: &str) -> String {
    format!("{queue}:workers:started")
}

/// `<queue>:workers:metadata:<worker>`: apalis-redis's hash of a registered worker.
fn metadata_key(queue: &str, worker: &str) -> String {
    format!("{queue}:workers:metadata:{worker}")
}

/// Now on this process's clock, Unix seconds (apalis-redis's heartbeats use the same).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Lists `settings.worker` as started now, before it registers, so that
/// [`forget_dead_workers`] finds it should it die without leaving.
///
/// # Errors
/// Redis errors.
pub(crate) async fn started(
    conn: &mut QueueConnection,
    settings: &IntakeSettings,
) -> Result<(), IntakeError> {
    let _: () = redis::AsyncCommands::zadd(
        conn,
        started_set(&settings.queue),
        &settings.worker,
        unix_now(),
    )
    .await?;
    Ok(())
}

/// Forgets the workers that died without leaving (`lua/intake/forget_workers.lua`): started
/// and silent for longer than `settings.orphaned_after()`, their in-flight set gone (re-enqueued
/// by apalis-redis's heartbeat). Returns how many.
///
/// # Errors
/// Redis errors.
pub(crate) async fn forget_dead_workers(
    conn: &mut QueueConnection,
    settings: &IntakeSettings,
) -> Result<u64, IntakeError> {
    let config = settings.storage_config();
    Ok(FORGET_WORKERS
        .key(config.workers_set())
        .key(started_set(&settings.queue))
        .arg(metadata_key(&settings.queue, ""))
        .arg(format!("{}:", config.inflight_jobs_set()))
        .arg(unix_now())
        .arg(settings.orphaned_after().as_secs())
        .invoke_async(conn)
        .await?)
}

/// Removes every finished job of `queue` now (in calls of [`REMOVE_PER_CALL`]); returns how many.
///
/// # Errors
/// Redis errors.
pub async fn remove_done(conn: &mut QueueConnection, queue: &str) -> Result<u64, IntakeError> {
    let config = IntakeSettings::new(queue, None).storage_config();
    let mut total = 0;
    loop {
        let ids: Vec<String> = conn
            .srandmember_multiple(config.done_jobs_set(), REMOVE_PER_CALL as isize)
            .await?;
        if ids.is_empty() {
            return Ok(total);
        }
        let mut call = REMOVE_JOBS.key(config.done_jobs_set());
        call.key(config.job_data_hash());
        for id in &ids {
            call.key(format!("{}:{id}", config.job_meta_hash())).arg(id);
        }
        let n: u64 = call.invoke_async(conn).await?;
        total += n;
        if ids.len() < REMOVE_PER_CALL {
            return Ok(total);
        }
    }
}

/// Where the head of the active list was first seen, for the oldest job's age.
#[derive(Debug, Default)]
struct Head {
    id: Option<String>,
    since: Option<Instant>,
}

/// The queue's gauges: waiting jobs, dead jobs, and the age of the oldest waiting one (the
/// oldest score of the scheduled set, where apalis-redis's own push puts a job with its push
/// time, or, for the active list, its head's `pushed_at` (`lua/intake/push.lua`), else how long
/// the head has been the head as this replica saw it).
async fn gauges(
    conn: &mut QueueConnection,
    config: &apalis_redis::Config,
    head: &mut Head,
) -> Result<QueueGauges, IntakeError> {
    let waiting = super::waiting::read(conn, config).await?;
    let current = waiting.head.as_ref().map(|h| &h.id);
    if head.id.as_ref() != current {
        head.since = current.map(|_| Instant::now());
        head.id = current.cloned();
    }
    let head_age = waiting
        .head_age()
        .unwrap_or_else(|| head.since.map_or(0, |t| t.elapsed().as_secs()));
    let oldest = head_age.max(waiting.scheduled_age().unwrap_or(0));
    Ok(QueueGauges {
        depth: (waiting.active + waiting.scheduled) as i64,
        dead: waiting.dead as i64,
        oldest_seconds: oldest as i64,
    })
}

/// Every `settings.cleanup_every` until `stop`: removes finished jobs, refreshes the gauges.
pub(crate) async fn run(
    conn: QueueConnection,
    settings: IntakeSettings,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let config = settings.storage_config();
    let head = tokio::sync::Mutex::new(Head::default());
    let (conn, config, head, metrics, settings) = (&conn, &config, &head, &metrics, &settings);
    shutdown::every(settings.cleanup_every, stop, None, || async move {
        let mut conn = conn.clone();
        let result = async {
            remove_done(&mut conn, &settings.queue).await?;
            let forgotten = forget_dead_workers(&mut conn, settings).await?;
            if forgotten > 0 {
                tracing::info!(
                    event = log_events::INTAKE_CONSUMER,
                    workers = forgotten,
                    "intake workers that died without leaving were forgotten (their jobs were re-queued)"
                );
            }
            gauges(&mut conn, config, &mut *head.lock().await).await
        };
        match result.await {
            Ok(g) => metrics.set_intake(g),
            Err(e) => tracing::warn!(event = log_events::INTAKE_REDIS_ERROR, error = %e, "the intake queue's cleanup failed; it runs again"),
        }
    })
    .await;
}

/// Leaves the queue (`lua/intake/leave.lua`): jobs still in this worker's in-flight set go back
/// to the queue; its name and keys are removed. Returns how many jobs went back.
///
/// # Errors
/// Redis errors.
pub(crate) async fn leave(
    conn: &mut QueueConnection,
    settings: &IntakeSettings,
) -> Result<u64, IntakeError> {
    let config = settings.storage_config();
    Ok(LEAVE
        .key(config.workers_set())
        .key(format!(
            "{}:{}",
            config.inflight_jobs_set(),
            settings.worker
        ))
        .key(config.active_jobs_list())
        .key(metadata_key(&settings.queue, &settings.worker))
        .key(config.signal_list())
        .key(started_set(&settings.queue))
        .arg(&settings.worker)
        .invoke_async(conn)
        .await?)
}
