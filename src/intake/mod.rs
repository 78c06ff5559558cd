//! The intake queue of campaign sends: an apalis worker per process on apalis-redis storage
//! named by `INTAKE_QUEUE` on `REDIS_URL`. A job is one campaign JSONL line
//! (docs/file-formats.md, `job`); every replica consumes (`consumer`: batches of lines
//! parsed by the file import's code, one multi-row insert, acked after the commit), bad lines
//! are dead-lettered with the file import's reason ([`dead`]), and finished jobs are removed
//! from Redis by our own cleanup (`cleanup`). PostgreSQL stays the scheduler: the intake
//! only writes `SCHEDULED` rows, which `send-scheduled-messages` claims as ever. The wire
//! format for producers in any language is docs/queue.md.

#[cfg(test)]
mod apalis_scripts;
pub(crate) mod cleanup;
mod connection;
pub(crate) mod consumer;
pub mod dead;
pub(crate) mod job;
mod supervise;
mod waiting;

use std::{sync::Arc, time::Duration};

pub use connection::QueueConnection;
pub use supervise::run;

use crate::{config::IntakeConfig, ops::intake::ConsumerHealth, rate_limit::RedisUrls};

/// Failures of the intake layer.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// The queue's Redis failed.
    #[error("the intake queue's Redis (REDIS_URL): {0}{hint}", hint = one_cluster_node(.0))]
    Redis(#[from] redis::RedisError),
    /// apalis-redis failed (its worker's error, as text: a redirection reaches us first as
    /// [`Self::Redis`], from the worker's registration).
    #[error("the intake queue (apalis-redis): {0}")]
    Queue(String),
}

/// The fix, when `error` is a redirection (`MOVED`/`ASK`, by its [`redis::ErrorKind`]):
/// `REDIS_URL` is one URL, so the queue is on one node, and that node is part of a Redis Cluster.
/// Empty for any other error.
fn one_cluster_node(error: &redis::RedisError) -> &'static str {
    use redis::{ErrorKind::Server, ServerErrorKind};
    if matches!(
        error.kind(),
        Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
    ) {
        " (REDIS_URL names one node of a Redis Cluster: give it the cluster's seeds, comma-separated)"
    } else {
        ""
    }
}

/// How one process consumes the queue.
#[derive(Debug, Clone)]
pub struct IntakeSettings {
    /// The apalis-redis namespace (`INTAKE_QUEUE`).
    pub queue: String,
    /// This process's worker name (unique: see [`worker_name`]).
    pub worker: String,
    /// Jobs one fetch takes.
    pub fetch: usize,
    /// Jobs in flight in this process (their handlers wait for the batch's commit).
    pub in_flight: usize,
    /// apalis-redis's heartbeat: a worker silent for `heartbeat × missed_heartbeats` is dead, and
    /// its in-flight jobs go back to the queue.
    pub heartbeat: Duration,
    /// See [`Self::heartbeat`].
    pub missed_heartbeats: usize,
    /// How often an idle worker looks for jobs.
    pub poll: Duration,
    /// How often finished jobs are removed from Redis (`cleanup`).
    pub cleanup_every: Duration,
    /// Whether stored rows write their `accepted` events (`EVENTS_WEBHOOK_URL`).
    pub outbox: crate::store::events::Outbox,
    /// How the consumer is doing, for `/readyz` and `/healthz` (shared by the clones).
    pub health: Arc<ConsumerHealth>,
}

impl IntakeSettings {
    /// The production settings for `queue`, with a fresh worker name from `name_start`.
    pub fn new(queue: &str, name_start: Option<&str>) -> Self {
        Self {
            queue: queue.to_owned(),
            worker: worker_name(name_start),
            fetch: 100,
            in_flight: 2 * consumer::MAX_BATCH,
            heartbeat: Duration::from_secs(10),
            missed_heartbeats: 3,
            poll: Duration::from_millis(100),
            cleanup_every: Duration::from_secs(5),
            outbox: crate::store::events::Outbox::Off,
            health: Arc::new(ConsumerHealth::new(Duration::from_secs(30))),
        }
    }

    /// The production settings of the configured queue (`INTAKE_QUEUE`, `INTAKE_WORKER_NAME`,
    /// `INTAKE_HEARTBEAT`) writing events as `outbox` says; `None` when the intake is off.
    pub fn from_config(
        config: &IntakeConfig,
        outbox: crate::store::events::Outbox,
    ) -> Option<Self> {
        let queue = config.queue.as_deref()?;
        Some(Self {
            heartbeat: config.heartbeat,
            outbox,
            ..Self::new(queue, config.worker_name.as_deref())
        })
    }

    /// How long a worker may be silent before it counts as dead (`heartbeat ×
    /// missed_heartbeats`, apalis-redis's orphan threshold).
    pub fn orphaned_after(&self) -> Duration {
        self.heartbeat * self.missed_heartbeats as u32
    }

    /// apalis-redis's configuration of the queue.
    pub(crate) fn storage_config(&self) -> apalis_redis::Config {
        apalis_redis::Config::default()
            .queue(&self.queue)
            .batch_size(self.fetch)
            .heartbeat_interval(self.heartbeat)
            .missed_heartbeats(self.missed_heartbeats)
            // No pub/sub traffic: nothing of ours subscribes.
            .emit_events(false)
    }
}

/// `<start>-<pid>-<random>`: apalis-redis refuses a worker name seen within a heartbeat, and two
/// processes must never share one (each owns its in-flight set). `start`: `INTAKE_WORKER_NAME`,
/// else the host name.
pub fn worker_name(start: Option<&str>) -> String {
    let start = start
        .map(str::to_owned)
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "mail-worker".to_owned());
    let random: u32 = rand::random();
    format!("{start}-{}-{random:08x}", std::process::id())
}

/// Connects to the queue's Redis now: one node, or a Redis Cluster when `urls` lists several
/// seeds (it redials after a lost connection).
///
/// # Errors
/// A URL the client refuses or a Redis that does not answer.
pub async fn connect(urls: &RedisUrls) -> Result<QueueConnection, IntakeError> {
    QueueConnection::connect(urls).await
}

/// The jobs of a campaign JSONL file: its non-blank lines (a trailing `\r` dropped), as bytes,
/// so a line that is not UTF-8 is judged by the consumer like any other (`mail-worker enqueue
/// --via queue`, the demo).
pub fn file_lines(bytes: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    bytes
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .map(<[u8]>::to_vec)
}

static PUSH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("../../lua/intake/push.lua")));

/// Pushes `lines` (campaign JSONL lines, each a job, task id = the line's `id`) onto `queue`, in
/// calls of 500 of `lua/intake/push.lua` (`mail-worker enqueue --via queue`, the demo, the
/// tests; the Python and Node producers call the same script). A line whose id is still in
/// the queue (waiting, in flight or dead) is not pushed twice (`HSETNX`). Returns how many were
/// pushed.
///
/// The jobs go onto the active list, not apalis-redis's own push path: that one puts every job
/// in the scheduled set, which `fetch_next.lua` then moves with one `unpack` of all due ids,
/// failing ("too many results to unpack") once more than about 8,000 are waiting, and the
/// worker with it, for good (docs/decisions/0011-intake-queue.md).
///
/// # Errors
/// Redis errors.
pub async fn push_lines(
    mut conn: QueueConnection,
    queue: &str,
    lines: impl IntoIterator<Item = Vec<u8>>,
) -> Result<usize, IntakeError> {
    let config = IntakeSettings::new(queue, None).storage_config();
    let lines: Vec<Vec<u8>> = lines.into_iter().collect();
    let mut pushed = 0;
    for chunk in lines.chunks(consumer::MAX_BATCH) {
        let mut call = PUSH.key(config.job_data_hash());
        call.key(config.active_jobs_list())
            .key(config.signal_list());
        for line in chunk {
            let id = job::task_id(line);
            call.key(format!("{}:{id}", config.job_meta_hash()))
                .arg(id)
                .arg(line.as_slice());
        }
        let new: usize = call.invoke_async(&mut conn).await?;
        pushed += new;
    }
    Ok(pushed)
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    use super::IntakeError;

    const HINT: &str = "REDIS_URL names one node of a Redis Cluster";

    fn said(error: RedisError) -> String {
        IntakeError::from(error).to_string()
    }

    #[test]
    fn a_redirection_is_known_by_its_kind() {
        let moved = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "redirected",
            "3999 127.0.0.1:7001".to_owned(),
        ));
        let ask = RedisError::from((ErrorKind::Server(ServerErrorKind::Ask), "redirected"));
        assert!(said(moved).contains(HINT));
        assert!(said(ask).contains(HINT));
    }

    #[test]
    fn text_that_looks_like_a_redirection_is_not_one() {
        // A script's own error, or a key name, can say "MOVED ": only the server's answer kind
        // makes it a redirection.
        let script = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "script error",
            "MOVED 3999 127.0.0.1:7001 (a line of ours)".to_owned(),
        ));
        let io = RedisError::from(std::io::Error::other("Moved: 1 host:1"));
        let down = RedisError::from((ErrorKind::Server(ServerErrorKind::ClusterDown), "down"));
        for e in [script, io, down] {
            let text = said(e);
            assert!(!text.contains(HINT), "{text}");
        }
    }
}
