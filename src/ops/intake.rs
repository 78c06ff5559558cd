//! The intake queue's metrics (in [`super::Metrics`]'s table, counted by
//! [`crate::intake`]):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `mail_worker_intake_jobs_total` | counter | `outcome` (`inserted`, `duplicate`, `dead`) |
//! | `mail_worker_intake_queue_depth` | gauge | — (jobs waiting: active + scheduled retries) |
//! | `mail_worker_intake_dead` | gauge | — (dead-lettered jobs kept for `mail-worker queue dead`) |
//! | `mail_worker_intake_oldest_job_seconds` | gauge | — (age of the oldest waiting job) |
//! | `mail_worker_intake_consumer_restarts_total` | counter | — (the consumer started again after a poll error or a stall) |
//! | `mail_worker_intake_consumer_silent_seconds` | gauge | — (how long this process's consumer has not heard from its Redis; 0 while it holds jobs) |

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use prometheus_client::encoding::EncodeLabelSet;

/// `outcome` of `mail_worker_intake_jobs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntakeOutcome {
    /// A new row was committed.
    Inserted,
    /// Its id was stored already (a redelivery, or a message both queued and imported).
    Duplicate,
    /// Dead-lettered: the line is not a message (the reason the file import gives).
    Dead,
}

impl IntakeOutcome {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Inserted => "inserted",
            Self::Duplicate => "duplicate",
            Self::Dead => "dead",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    outcome: &'static str,
}

/// The queue's gauges, as [`crate::intake`] reads them from Redis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueGauges {
    /// Jobs waiting (active list + scheduled retries).
    pub depth: i64,
    /// Dead-lettered jobs.
    pub dead: i64,
    /// Age of the oldest waiting job, seconds (0 when none).
    pub oldest_seconds: i64,
}

impl super::Metrics {
    /// Counts `n` intake jobs of `outcome`.
    pub(crate) fn intake_jobs(&self, outcome: IntakeOutcome, n: u64) {
        if n > 0 {
            self.intake_jobs
                .get_or_create(&OutcomeLabels {
                    outcome: outcome.as_str(),
                })
                .inc_by(n);
        }
    }

    /// Sets the intake queue's gauges.
    pub(crate) fn set_intake(&self, gauges: QueueGauges) {
        self.intake_depth.set(gauges.depth);
        self.intake_dead.set(gauges.dead);
        self.intake_oldest.set(gauges.oldest_seconds);
    }
}

/// How this process's intake consumer is doing, written by [`crate::intake`] (its Redis
/// answers, its jobs, its restarts) and read by `/readyz` (`intake_consumer`) and `/healthz`
/// (`intake`): ops does not depend on the intake, the intake tells it.
#[derive(Debug)]
pub struct ConsumerHealth {
    /// When this was made; the times below are milliseconds after it.
    start: Instant,
    /// The consumer's last answer from its Redis (a fetch, a heartbeat, an ack).
    answered_ms: AtomicU64,
    /// The supervisor's last beat (it beats while it runs, consumer up or restarting).
    beat_ms: AtomicU64,
    /// Jobs this consumer's handlers hold now (waiting for their batch's commit).
    busy: AtomicUsize,
    /// Restarts since start-up.
    restarts: AtomicU64,
    /// The last restart, and the error that caused it.
    restarted: Mutex<Option<(u64, String)>>,
    /// Restarts in a row of a consumer that was silent while its Redis answered.
    stuck_in_a_row: AtomicU64,
    /// The supervisor ended although the daemon did not stop.
    ended: AtomicBool,
    /// A consumer silent for longer than this is not polling (`heartbeat × missed_heartbeats`),
    /// in ms.
    silent_after_ms: AtomicU64,
}

/// Restarts in a row of a consumer silent while its Redis answers after which a restart
/// of the process is what is left (`/healthz` fails).
pub const STUCK_RESTARTS_UNRECOVERABLE: u64 = 3;

impl ConsumerHealth {
    /// A consumer that counts as having polled now; silent after `silent_after`.
    pub fn new(silent_after: Duration) -> Self {
        let silent_after_ms = u64::try_from(silent_after.as_millis()).unwrap_or(u64::MAX);
        Self {
            start: Instant::now(),
            answered_ms: AtomicU64::new(0),
            beat_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            restarts: AtomicU64::new(0),
            restarted: Mutex::new(None),
            stuck_in_a_row: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            silent_after_ms: AtomicU64::new(silent_after_ms),
        }
    }

    /// A consumer silent for longer than this is not polling.
    pub fn silent_after(&self) -> Duration {
        Duration::from_millis(self.silent_after_ms.load(Ordering::Relaxed))
    }

    /// The supervisor (re)starts with these settings: counts as having polled and beaten now.
    pub(crate) fn starting(&self, silent_after: Duration) {
        let ms = u64::try_from(silent_after.as_millis()).unwrap_or(u64::MAX);
        self.silent_after_ms.store(ms, Ordering::Relaxed);
        self.answered_ms.store(self.now_ms(), Ordering::Relaxed);
        self.beat();
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn since(&self, at: &AtomicU64) -> Duration {
        Duration::from_millis(self.now_ms().saturating_sub(at.load(Ordering::Relaxed)))
    }

    /// The consumer's Redis answered it.
    pub(crate) fn answered(&self) {
        self.answered_ms.store(self.now_ms(), Ordering::Relaxed);
        self.stuck_in_a_row.store(0, Ordering::Relaxed);
    }

    /// The supervisor is alive.
    pub(crate) fn beat(&self) {
        self.beat_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// A handler took a job (until the returned guard drops).
    pub(crate) fn job(self: &Arc<Self>) -> BusyGuard {
        self.busy.fetch_add(1, Ordering::Relaxed);
        BusyGuard(Arc::clone(self))
    }

    /// The consumer was started again after `error`; `stuck`: because it was silent while
    /// Redis answered.
    pub(crate) fn restarted(&self, error: &str, stuck: bool) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.restarted.lock() {
            *last = Some((self.now_ms(), error.to_owned()));
        }
        if stuck {
            self.stuck_in_a_row.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The supervisor ended (a stop, or a failure the daemon reports).
    pub(crate) fn ended(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }

    /// How long the consumer has not heard from its Redis; zero while its handlers hold jobs
    /// (a consumer waiting for PostgreSQL is busy, not dead).
    pub fn silent_for(&self) -> Duration {
        if self.busy.load(Ordering::Relaxed) > 0 {
            Duration::ZERO
        } else {
            self.since(&self.answered_ms)
        }
    }

    /// Restarts since start-up.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Why the consumer does not poll now, or `None` when it does: it has not heard from its
    /// Redis within [`Self::silent_after`], or it was restarted within it (a consumer that
    /// fails at each start answers its registration, then fails again).
    pub fn not_polling(&self) -> Option<String> {
        let silent = self.silent_for();
        let restarted = self.restarted.lock().ok().and_then(|l| l.clone());
        let last = restarted.as_ref().map(|(at, error)| {
            let ago = self.now_ms().saturating_sub(*at) / 1_000;
            (ago, format!("; restarted {ago} s ago after: {error}"))
        });
        let recent = last
            .as_ref()
            .is_some_and(|(ago, _)| Duration::from_secs(*ago) <= self.silent_after());
        (silent > self.silent_after() || recent).then(|| {
            format!(
                "the intake consumer has not polled its queue for {} s (restarts since start-up: {}{})",
                silent.as_secs(),
                self.restarts(),
                last.map(|(_, text)| text).unwrap_or_default()
            )
        })
    }

    /// Why the consumer cannot recover in this process (`/healthz` fails, so that Kubernetes
    /// restarts it), or `None`: its supervisor ended or stopped beating (hung), or it was
    /// restarted [`STUCK_RESTARTS_UNRECOVERABLE`] times in a row for not polling while its
    /// Redis answered. A Redis that is down is not this: a new process would not reach it either.
    pub fn unrecoverable(&self) -> Option<String> {
        if self.ended.load(Ordering::Relaxed) {
            return Some("the intake consumer's supervisor ended".into());
        }
        let hung = self.since(&self.beat_ms);
        if hung > 2 * self.silent_after() {
            return Some(format!(
                "the intake consumer's supervisor has not run for {} s",
                hung.as_secs()
            ));
        }
        let stuck = self.stuck_in_a_row.load(Ordering::Relaxed);
        (stuck >= STUCK_RESTARTS_UNRECOVERABLE).then(|| {
            format!("the intake consumer was restarted {stuck} times in a row and still does not poll while its Redis answers")
        })
    }
}

/// A job held by a handler of the intake consumer ([`ConsumerHealth::job`]).
#[derive(Debug)]
pub(crate) struct BusyGuard(Arc<ConsumerHealth>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

impl super::Metrics {
    /// Counts a restart of the intake consumer.
    pub(crate) fn intake_consumer_restarted(&self) {
        self.intake_restarts.inc();
    }

    /// Sets how long the intake consumer has not heard from its Redis.
    pub(crate) fn set_intake_consumer_silent(&self, silent: Duration) {
        self.intake_silent.set(silent.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consumer_is_not_polling_when_silent_or_just_restarted_and_busy_is_not_silent() {
        let health = Arc::new(ConsumerHealth::new(Duration::from_millis(50)));
        assert_eq!(health.not_polling(), None, "new: counts as polled now");
        std::thread::sleep(Duration::from_millis(60));
        let why = health.not_polling().expect("silent for 60 ms of 50");
        assert!(
            why.contains("has not polled") && why.contains("restarts since start-up: 0"),
            "{why}"
        );
        let busy = health.job();
        assert_eq!(health.silent_for(), Duration::ZERO, "a handler holds a job");
        drop(busy);
        health.answered();
        assert_eq!(health.not_polling(), None);
        health.restarted("WRONGTYPE", false);
        let why = health.not_polling().expect("restarted within 50 ms");
        assert!(why.contains("restarted 0 s ago after: WRONGTYPE"), "{why}");
        std::thread::sleep(Duration::from_millis(1_100));
        health.answered();
        assert_eq!(health.not_polling(), None, "polled since, restart 1 s ago");
    }

    #[test]
    fn only_stalls_while_redis_answers_a_hung_or_ended_supervisor_cannot_recover() {
        let health = ConsumerHealth::new(Duration::from_millis(50));
        for _ in 0..STUCK_RESTARTS_UNRECOVERABLE - 1 {
            health.restarted("stalled", true);
        }
        health.restarted("refused", false);
        health.beat();
        assert_eq!(health.unrecoverable(), None, "2 stalls and a refusal");
        health.restarted("stalled", true);
        assert!(health.unrecoverable().unwrap().contains("3 times in a row"));
        health.answered();
        assert_eq!(
            health.unrecoverable(),
            None,
            "it polled: the count starts again"
        );
        std::thread::sleep(Duration::from_millis(110));
        assert!(
            health.unrecoverable().unwrap().contains("has not run for"),
            "no beat for 2 × 50 ms"
        );
        health.beat();
        health.ended();
        assert!(health.unrecoverable().unwrap().contains("ended"));
    }
}
