//! The Redis job queue (apalis-redis): one job per message, carrying only its id.

use std::time::Duration;

use apalis::prelude::*;
use apalis_redis::{Config as QueueConfig, RedisStorage};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The job: "send message `message_id`". The row in PostgreSQL is the truth; the job only
/// points at it, so a duplicate delivery is harmless (the handler checks the status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendMessageJob {
    /// `messages.id`.
    pub message_id: Uuid,
}

/// The queue's storage type.
pub type JobQueue = RedisStorage<SendMessageJob>;

/// Opens the queue `queue_name` on `redis_url` with a patient, auto-reconnecting connection.
/// `batch_size` is how many jobs one fetch takes (kept at or below the worker's concurrency so
/// one replica cannot hoard jobs others could take).
///
/// # Errors
/// The first connection's error.
pub async fn open(
    redis_url: &url::Url,
    queue_name: &str,
    batch_size: usize,
) -> Result<JobQueue, redis::RedisError> {
    let conn = apalis_redis::connect(redis_url.as_str()).await?;
    let config = QueueConfig::default()
        .queue(queue_name)
        .batch_size(batch_size.max(1))
        .heartbeat_interval(Duration::from_secs(5));
    Ok(RedisStorage::new(conn).with_config(config))
}

/// Pushes one job per id.
///
/// # Errors
/// The push failed; none or some of the jobs may be on the queue (duplicates are harmless).
pub async fn push_all(
    queue: &mut JobQueue,
    ids: &[Uuid],
) -> Result<(), apalis::prelude::TaskSinkError<apalis_redis::Error>> {
    let jobs = ids
        .iter()
        .map(|&message_id| SendMessageJob { message_id })
        .collect();
    queue.push_bulk(jobs).await
}
