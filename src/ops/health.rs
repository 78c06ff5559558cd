//! Liveness (`GET /healthz`: the daemon's loops are alive) and readiness (`GET /readyz`:
//! PostgreSQL answers and the claim loop runs; the limiter's Redis being down is *degraded*, not
//! unready, because the limiter fails open). On a Redis Cluster the limiter's check pings every
//! master that serves slots, so a master this process cannot reach, or a cluster none of its
//! seeds leads to, is degraded just as a dead standalone Redis is.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde::Serialize;
use sqlx::PgPool;

use crate::{ops::intake::ConsumerHealth, rate_limit::MailRateLimiter};

/// How long one readiness check may take: 800 ms, so that `/readyz` (its checks run
/// concurrently) answers within a probe's default `timeoutSeconds` of 1 s
/// (<https://kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/>):
/// a probe that times out counts as failed, and a degraded Redis would make the pod unready.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_millis(800);

/// The heartbeats of the daemon's loops. A loop that has not beaten within its allowance, or
/// that ended, makes `/healthz` answer 503.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    beats: Mutex<BTreeMap<&'static str, Beat>>,
    /// The intake consumer's health: `intake` is dead when it cannot recover in this process.
    intake: OnceLock<Arc<ConsumerHealth>>,
}

#[derive(Debug, Clone, Copy)]
struct Beat {
    at: Instant,
    allowance: Duration,
    ended: bool,
}

impl Liveness {
    /// `loop_name` is alive now and will beat again within `allowance`.
    pub(crate) fn beat(&self, loop_name: &'static str, allowance: Duration) {
        if let Ok(mut beats) = self.beats.lock() {
            beats.insert(
                loop_name,
                Beat {
                    at: Instant::now(),
                    allowance,
                    ended: false,
                },
            );
        }
    }

    /// `loop_name` ended (it will not beat again).
    pub(crate) fn ended(&self, loop_name: &'static str) {
        if let Ok(mut beats) = self.beats.lock()
            && let Some(beat) = beats.get_mut(loop_name)
        {
            beat.ended = true;
        }
    }

    /// Also watches the intake consumer (`intake`, [`ConsumerHealth::unrecoverable`]).
    pub(crate) fn watch_intake(&self, health: Arc<ConsumerHealth>) {
        let _ = self.intake.set(health);
    }

    /// The loops that ended or missed their heartbeat, by name (`intake`: the consumer cannot
    /// recover in this process).
    pub(crate) fn dead(&self) -> Vec<&'static str> {
        let now = Instant::now();
        let mut dead = self.beats.lock().map_or_else(
            |_| vec!["liveness-lock"],
            |beats| {
                beats
                    .iter()
                    .filter(|(_, b)| b.ended || now.duration_since(b.at) > b.allowance)
                    .map(|(name, _)| *name)
                    .collect()
            },
        );
        if self
            .intake
            .get()
            .is_some_and(|h| h.unrecoverable().is_some())
        {
            dead.push("intake");
        }
        dead
    }

    /// The loops known so far.
    pub(crate) fn loops(&self) -> Vec<&'static str> {
        let mut loops: Vec<&'static str> = self
            .beats
            .lock()
            .map(|b| b.keys().copied().collect())
            .unwrap_or_default();
        if self.intake.get().is_some() {
            loops.push("intake");
        }
        loops
    }
}

/// One dependency's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Check {
    /// Whether it answered within [`CHECK_TIMEOUT`].
    pub ok: bool,
    /// Its round trip in ms, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
    /// What went wrong (the error's message; never a password).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /readyz`'s body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ReadyReport {
    /// PostgreSQL answers and the claim loop runs.
    pub ready: bool,
    /// What is down: `postgresql`, `claim_loop`, `intake_consumer` (it cannot recover in this
    /// process: `/healthz` fails too).
    pub down: Vec<&'static str>,
    /// What is degraded but not blocking: `rate_limit_redis` (the limiter fails open; on a
    /// cluster: some master serving slots did not answer), `intake_redis` (the intake queue's),
    /// `intake_consumer` (it has not polled within its orphan threshold: restarting).
    pub degraded: Vec<&'static str>,
    /// Every check by name.
    pub checks: BTreeMap<&'static str, Check>,
}

/// What readiness asks.
pub(crate) struct Readiness {
    pool: PgPool,
    limiter: Option<Arc<MailRateLimiter>>,
    claiming: Arc<AtomicBool>,
    intake: Option<(IntakeProbe, Arc<ConsumerHealth>)>,
    /// A limiter whose Redis has not answered once since start-up for this long is down, not
    /// degraded (`MAIL_RATE_LIMIT_UNREACHABLE_NOT_READY_AFTER`).
    unreachable_bound: Duration,
}

/// A fresh handle on the intake queue's connection (one node or a cluster), behind the redis
/// crate's trait: ops does not depend on the intake.
type IntakeProbe = Arc<dyn Fn() -> Box<dyn redis::aio::ConnectionLike + Send> + Send + Sync>;

crate::debug_showing::debug_showing!(Readiness {});

impl Readiness {
    /// Checks `pool`, whether the claim loop runs (`claiming`, kept by the loop) and, as
    /// degraded only, `limiter`.
    pub(crate) fn new(
        pool: PgPool,
        limiter: Option<Arc<MailRateLimiter>>,
        claiming: Arc<AtomicBool>,
    ) -> Self {
        Self {
            pool,
            limiter,
            claiming,
            intake: None,
            unreachable_bound: Duration::from_secs(60),
        }
    }

    /// A limiter never reached since start-up for longer than `bound` makes the replica not
    /// ready (`down: ["rate_limit_redis"]`): a wrong `REDIS_URL` stops a rollout at its first
    /// pod. One that answered once and was lost later stays degraded.
    pub(crate) fn with_unreachable_bound(mut self, bound: Duration) -> Self {
        self.unreachable_bound = bound;
        self
    }

    /// Also checks the intake queue's Redis (`intake_redis`; degraded, not unready, when down:
    /// the jobs wait in Redis, and sends from PostgreSQL go on) and its consumer
    /// (`intake_consumer`: degraded while it does not poll, down when it cannot recover).
    pub(crate) fn with_intake(
        mut self,
        conn: impl redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
        health: Arc<ConsumerHealth>,
    ) -> Self {
        self.intake = Some((Arc::new(move || Box::new(conn.clone())), health));
        self
    }

    /// Runs every check (concurrently, each within [`CHECK_TIMEOUT`]).
    pub(crate) async fn check(&self) -> ReadyReport {
        let (postgresql, limiter, intake) =
            tokio::join!(self.postgresql(), self.limiter(), self.intake());
        let claim_loop = if self.claiming.load(Ordering::SeqCst) {
            ok(None)
        } else {
            failed("the claim loop is not running (starting or stopping)".into())
        };
        let mut checks = BTreeMap::new();
        checks.insert("postgresql", postgresql);
        checks.insert("claim_loop", claim_loop);
        let mut degraded = Vec::new();
        let mut limiter_down = false;
        if let Some(mut limiter) = limiter {
            let never = self
                .limiter
                .as_ref()
                .and_then(|l| l.unreachable_since_start())
                .filter(|since| *since > self.unreachable_bound);
            if let Some(since) = never.filter(|_| !limiter.ok) {
                limiter_down = true;
                limiter.error = Some(format!(
                    "{}; never answered since start-up ({} s): check MAIL_RATE_LIMIT_REDIS_URL / REDIS_URL",
                    limiter.error.unwrap_or_default(),
                    since.as_secs()
                ));
            } else if !limiter.ok {
                degraded.push("rate_limit_redis");
            }
            checks.insert("rate_limit_redis", limiter);
        }
        let mut down: Vec<&'static str> = ["postgresql", "claim_loop"]
            .into_iter()
            .filter(|name| checks.get(name).is_some_and(|c| !c.ok))
            .collect();
        if limiter_down {
            down.push("rate_limit_redis");
        }
        if let Some(intake) = intake {
            if !intake.ok {
                degraded.push("intake_redis");
            }
            checks.insert("intake_redis", intake);
        }
        if let Some((_, health)) = &self.intake {
            let (check, unrecoverable) = consumer_check(health);
            if unrecoverable {
                down.push("intake_consumer");
            } else if !check.ok {
                degraded.push("intake_consumer");
            }
            checks.insert("intake_consumer", check);
        }
        ReadyReport {
            ready: down.is_empty(),
            down,
            degraded,
            checks,
        }
    }

    async fn postgresql(&self) -> Check {
        within(async {
            sqlx::query("SELECT 1").execute(&self.pool).await?;
            Ok::<_, sqlx::Error>(())
        })
        .await
    }

    async fn limiter(&self) -> Option<Check> {
        let limiter = self.limiter.as_ref()?;
        Some(within(limiter.ping()).await)
    }
}

/// The intake consumer's check, and whether it cannot recover in this process.
fn consumer_check(health: &ConsumerHealth) -> (Check, bool) {
    if let Some(why) = health.unrecoverable() {
        return (failed(why), true);
    }
    match health.not_polling() {
        None => (ok(None), false),
        Some(why) => (failed(why), false),
    }
}

impl Readiness {
    async fn intake(&self) -> Option<Check> {
        let mut conn = (self.intake.as_ref()?.0)();
        let cmd = redis::cmd("PING");
        Some(within(async { conn.req_packed_command(&cmd).await?.extract_error() }).await)
    }
}

/// `check`'s answer within [`CHECK_TIMEOUT`], with how long it took.
async fn within<T, E: std::fmt::Display>(check: impl Future<Output = Result<T, E>>) -> Check {
    let started = Instant::now();
    match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(Ok(_)) => ok(Some(started.elapsed())),
        Ok(Err(e)) => failed(e.to_string()),
        Err(_) => failed(format!("no answer within {} ms", CHECK_TIMEOUT.as_millis())),
    }
}

fn ok(took: Option<Duration>) -> Check {
    Check {
        ok: true,
        ms: took.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        error: None,
    }
}

fn failed(error: String) -> Check {
    Check {
        ok: false,
        ms: None,
        error: Some(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_ended_or_missed_its_beat_is_dead() {
        let live = Liveness::default();
        live.beat("claim", Duration::from_secs(60));
        live.beat("recovery", Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(live.dead(), ["recovery"]);
        live.beat("recovery", Duration::from_secs(60));
        assert!(live.dead().is_empty());
        live.ended("claim");
        assert_eq!(live.dead(), ["claim"]);
    }
}
