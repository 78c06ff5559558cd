//! What the queue's gauges ([`super::cleanup`]) and `queue stats` ([`super::dead::stats`]) both
//! read of the waiting jobs: the counts, the active list's head with its push time, the
//! scheduled set's oldest entry and Redis's clock, and the ages they give.

use redis::AsyncCommands;

use super::{IntakeError, QueueConnection};

/// The waiting jobs as read in one pipeline (and the head's push time after it): each list's
/// count with its oldest entry, the dead count, Redis's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Waiting {
    /// Jobs on the active list.
    pub active: u64,
    /// The active list's head.
    pub head: Option<ActiveHead>,
    /// Jobs in the scheduled set.
    pub scheduled: u64,
    /// The scheduled set's oldest score (Unix s: apalis-redis's push time or a retry's).
    pub oldest_scheduled: Option<u64>,
    /// Dead-lettered jobs.
    pub dead: u64,
    /// Redis's clock (Unix s).
    pub now: u64,
}

/// The active list's head: the job fetched next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ActiveHead {
    /// Its id.
    pub id: String,
    /// Its `pushed_at` (Unix s, `lua/intake/push.lua`), when it recorded one.
    pub pushed_at: Option<u64>,
}

/// What [`read`] reads in one pipeline: active, scheduled and dead counts, the active list's
/// head, the scheduled set's oldest entry, Redis's `TIME`.
type Reads = (
    u64,
    u64,
    u64,
    Option<String>,
    Vec<(String, f64)>,
    (u64, u64),
);

/// Reads [`Waiting`] of the queue `config` names.
pub(super) async fn read(
    conn: &mut QueueConnection,
    config: &apalis_redis::Config,
) -> Result<Waiting, IntakeError> {
    let (active, scheduled, dead, head, oldest, now): Reads = redis::pipe()
        .llen(config.active_jobs_list())
        .zcard(config.scheduled_jobs_set())
        .scard(config.dead_jobs_set())
        .lindex(config.active_jobs_list(), 0)
        .zrange_withscores(config.scheduled_jobs_set(), 0, 0)
        .cmd("TIME")
        .query_async(conn)
        .await?;
    let head = match head {
        Some(id) => {
            let pushed_at = conn
                .hget(
                    format!("{}:{id}", config.job_meta_hash()),
                    super::job::PUSHED_AT,
                )
                .await?;
            Some(ActiveHead { id, pushed_at })
        }
        None => None,
    };
    Ok(Waiting {
        active,
        head,
        scheduled,
        oldest_scheduled: oldest.first().map(|(_, score)| *score as u64),
        dead,
        now: now.0,
    })
}

impl Waiting {
    /// The head's age by its push time, seconds (`None`: no head, or no push time).
    pub fn head_age(&self) -> Option<u64> {
        let pushed_at = self.head.as_ref()?.pushed_at?;
        Some(self.now.saturating_sub(pushed_at))
    }

    /// The scheduled set's oldest entry's age, seconds (`None`: nothing scheduled).
    pub fn scheduled_age(&self) -> Option<u64> {
        self.oldest_scheduled.map(|t| self.now.saturating_sub(t))
    }
}
